"""Progress remarks: the short things a voice agent says while a reasoning model thinks.

A reasoning turn can be silent for seconds. Under a :data:`ProgressPolicy` the voice front
end fills that silence with one remark at a time, chosen by a :class:`RemarkWriter`:

* ``off``: nothing is said.
* ``cue``: neutral cues only ("Let me work that out.", "Still working on it.", ...) and,
  when the model calls a tool, a cue naming it ("Checking the weather.", :func:`tool_cue`).
* ``summary``: as ``cue``, but a reasoning-step summary is spoken instead of a cue when
  everyone listening may see summaries (:func:`spoken_level`), rewritten for speech by
  :func:`speakable` (one clause, numbers as words, no markup, a dozen words at most).

Nothing here knows the transport or the LLM: callers pass text in and get text out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final, Literal

from alicia.agent.engine.participants import Visibility
from alicia.agent.llm.sentences import sentence_ends

__all__ = [
    "CUES",
    "MAX_WORDS",
    "PROGRESS_POLICIES",
    "ProgressPolicy",
    "RemarkWriter",
    "SpokenLevel",
    "TopicSentences",
    "speakable",
    "spoken_level",
    "tool_cue",
]

ProgressPolicy = Literal["off", "cue", "summary"]
"""What is said while the model thinks: nothing, neutral cues, or step summaries."""
PROGRESS_POLICIES: Final[tuple[ProgressPolicy, ...]] = ("off", "cue", "summary")
SpokenLevel = Literal["cue", "summary"]
"""The most a room's listeners may hear of the reasoning: cues only, or its summaries."""
MAX_WORDS: Final = 12
"""Longest spoken summary, in words."""

CUES: Final[tuple[str, ...]] = (
    "Let me work that out.",
    "Still working on it.",
    "Thinking it through.",
    "Almost there.",
)
"""Neutral cues, in the order they rotate (the first acknowledges the question)."""
_TOOL_VERBS: Final = frozenset({"get", "fetch", "lookup", "search", "find", "query", "call", "run"})
_TRAILING_WORDS: Final = (
    "a an the and or of to for with in on at by from about which that is are "
    "into onto as than but if my your our their its this these those was were be per via"
)
_TRAILING: Final = frozenset(_TRAILING_WORDS.split())
"""Words a clause cut short must not end with."""

_NUMBER_WORDS: Final = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety"
)
_ONES: Final = _NUMBER_WORDS.split()[:20]
_TENS: Final = ["", "", *_NUMBER_WORDS.split()[20:]]
_ORDINAL: Final = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_UNITS: Final = {
    "%": ["percent"],
    "°": ["degrees"],
    "°C": ["degrees", "Celsius"],
    "℃": ["degrees", "Celsius"],
    "°F": ["degrees", "Fahrenheit"],
    "℉": ["degrees", "Fahrenheit"],
}
_JOIN: Final = "\ue000"
"""Joins the words of one number so that a cut never splits it."""
_KEEP: Final = frozenset("'.,;:!?\u2026\u2014\u2013-\u2212%\u00b0\u2103\u2109(/")
"""Punctuation and symbols kept through cleaning (all other non-alphanumerics go)."""
_EDGE: Final = "'.,;:!?\u2026\u2014\u2013-("

_NUM: Final = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_NUMBER: Final = re.compile(
    rf"(?<![\w.,:/\-\u2013\u2212])(?P<neg>[-\u2212])?(?P<a>{_NUM})(?:[-\u2013](?P<b>{_NUM}))?"
    r"(?P<ord>st|nd|rd|th)?(?P<unit>\s?%|\s?\u00b0\s?[CF]\b|\s?[\u2103\u2109]|\s?\u00b0)?"
    r"(?![\w%\u00b0]|[.,:/\-\u2013]\d)"
)
_TIME: Final = re.compile(r"(?<![\w.:])(\d{1,2}):([0-5]\d)(?![\w:]|\.\d)")
_DIGITS: Final = re.compile(r"\S*\d\S*?([,;:.!?\u2026\u2014\u2013(]*)(?=\s|$)")
_SENTENCE_END: Final = re.compile(r"[.!?\u2026]+(?=\s|$)")
_CUT: Final = re.compile(r"(?P<p>[,;:\u2014\u2013(])|\s(?:which|because|so that|while|but)\s", re.I)
_BLOCK: Final = re.compile(r"^\s*(?:#+\s*|[-*+•]\s+|\d+[.)]\s+|\*\*[^*]+\*\*\s*$)")


def spoken_level(levels: Iterable[Visibility | None]) -> SpokenLevel:
    """``summary`` when there is a level and every one is ``summary`` or ``full``, else ``cue``.

    ``None`` (a listener whose grant is not known) counts as ``cue``."""
    seen = False
    for level in levels:
        if level not in ("summary", "full"):
            return "cue"
        seen = True
    return "summary" if seen else "cue"


def tool_cue(tool_name: str) -> str:
    """A cue naming a tool: ``Checking the weather.`` for ``get_weather`` or ``getWeather``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", tool_name)
    words = [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]
    if words[:2] == ["look", "up"]:
        words = words[2:]
    elif words[:1] and words[0] in _TOOL_VERBS:
        words = words[1:]
    words = [w for w in words if not any(c.isdigit() for c in w)]
    return f"Checking the {' '.join(words)}." if words else "Checking a tool."


def speakable(summary: str, *, max_words: int = MAX_WORDS) -> str | None:
    """A reasoning-step summary rewritten for speech: one clause, numbers as words, at most
    ``max_words`` words, ending with ``.``; ``None`` when fewer than two words are left."""
    text = _numbers_as_words(_plain(summary))
    for sentence in _SENTENCE_END.split(text):
        tokens = (t.strip(_EDGE) for t in _clause(sentence).split())
        units = [t.split(_JOIN) for t in tokens if _is_word(t)]
        if sum(len(u) for u in units) >= 2:
            break
    else:
        return None
    words: list[str] = []
    for unit in units:
        if len(words) + len(unit) > max_words:
            while words and words[-1].lower() in _TRAILING:
                words.pop()
            break
        words += unit
    if len(words) < 2:
        return None
    spoken = " ".join(words)
    return spoken[0].upper() + spoken[1:] + "."


class RemarkWriter:
    """Chooses each remark of one turn under a policy; never the same text twice in a row."""

    def __init__(self, policy: ProgressPolicy) -> None:
        if policy not in PROGRESS_POLICIES:
            raise ValueError(f"unknown progress policy {policy!r}")
        self._policy: ProgressPolicy = policy
        self._spoken: list[str] = []
        self._cue = 0

    @property
    def policy(self) -> ProgressPolicy:
        """The policy this writer follows."""
        return self._policy

    @property
    def spoken(self) -> list[str]:
        """The remarks returned so far, in order (a copy)."""
        return list(self._spoken)

    def next(
        self, *, summary: str | None = None, tool: str | None = None, level: SpokenLevel = "cue"
    ) -> str | None:
        """The next remark: a tool cue for ``tool``, else the summary when the policy and
        ``level`` allow it, else a general cue; ``None`` under policy ``off``."""
        if self._policy == "off":
            return None
        last = self._spoken[-1] if self._spoken else None
        remark: str | None = None
        if tool is not None:
            remark = tool_cue(tool)
        elif self._policy == "summary" and level == "summary" and summary is not None:
            remark = speakable(summary)
        if remark is None or remark == last:
            remark = self._general_cue(last)
        self._spoken.append(remark)
        return remark

    def _general_cue(self, last: str | None) -> str:
        while True:
            cue = CUES[self._cue]
            self._cue = self._cue + 1 if self._cue + 1 < len(CUES) else 1
            if cue != last:
                return cue


def _plain(text: str) -> str:
    """``text`` without markup, URLs, asides and unspeakable symbols, in one line."""
    text = unicodedata.normalize("NFC", text).replace("\u2019", "'")
    text = re.sub(r"```.*?(?:```|$)", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\b(?:https?://|www\.)[^\s)\]>]+", " ", text)
    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        for line in paragraph.splitlines():
            block = _BLOCK.match(line) is not None
            line = re.sub(r"^\s*(?:#+|[-*+•>]|\d+[.)])\s+|^\s*#+", "", line).strip()
            if line:
                lines.append(line)
            if block and lines and lines[-1][-1] not in ".!?:;,":
                lines[-1] += "."
        if lines and lines[-1][-1] not in ".!?:;,":
            lines[-1] += "."
    text = " ".join(lines)
    aside = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}|<[^<>]*>")
    while (stripped := aside.sub(" ", text)) != text:
        text = stripped
    text = re.sub(r"\s-\s|--+", " — ", text.replace("_", " "))
    return "".join(c if c.isalnum() or c.isspace() or c in _KEEP else " " for c in text)


def _numbers_as_words(text: str) -> str:
    """Times, numbers, ranges, ordinals, percentages and degrees spelled out; any other
    token with a digit in it dropped."""
    text = _TIME.sub(_time, text)
    text = _NUMBER.sub(_number, text)
    text = _DIGITS.sub(r" \1", text)
    return re.sub(r"[\u2212%\u00b0\u2103\u2109/]", " ", text)


def _time(m: re.Match[str]) -> str:
    hours, minutes = int(m[1]), int(m[2])
    words = _cardinal(hours)
    if minutes:
        words += ["oh", _ONES[minutes]] if minutes < 10 else _cardinal(minutes)
    return _JOIN.join(words)


def _number(m: re.Match[str]) -> str:
    a, b = _amount(m["a"]), _amount(m["b"]) if m["b"] else []
    if a is None or b is None or (m["ord"] and (b or m["neg"] or "." in m["a"])):
        return m[0]  # too large, or an ordinal that is not one: dropped with the digits
    words = (["minus"] if m["neg"] else []) + a + (["to", *b] if b else [])
    if m["ord"]:
        head, dash, last = words[-1].rpartition("-")
        if last in _ORDINAL:
            last = _ORDINAL[last]
        else:
            last = last[:-1] + "ieth" if last.endswith("y") else last + "th"
        words[-1] = head + dash + last
    return _JOIN.join(words + _UNITS.get((m["unit"] or "").replace(" ", ""), []))


def _amount(digits: str) -> list[str] | None:
    """``1,200.5`` -> one thousand two hundred point five; ``None`` past 999,999,999."""
    whole, _, fraction = digits.replace(",", "").partition(".")
    if int(whole) > 999_999_999:
        return None
    return _cardinal(int(whole)) + (
        ["point", *(_ONES[int(d)] for d in fraction)] if fraction else []
    )


def _cardinal(n: int) -> list[str]:
    if n == 0:
        return ["zero"]
    words: list[str] = []
    for scale, name in ((1_000_000, "million"), (1_000, "thousand"), (1, "")):
        q, n = divmod(n, scale)
        if q:
            hundreds, rest = divmod(q, 100)
            if hundreds:
                words += [_ONES[hundreds], "hundred"]
            if rest >= 20:
                words.append(_TENS[rest // 10] + (f"-{_ONES[rest % 10]}" if rest % 10 else ""))
            elif rest:
                words.append(_ONES[rest])
            if name:
                words.append(name)
    return words


def _clause(sentence: str) -> str:
    """The first clause of one sentence; a one-word label before it ("Plan:", "Okay,") goes."""
    first = True
    start = 0
    for m in _CUT.finditer(sentence):
        before = sum(_is_word(w) for w in sentence[start : m.start()].split())
        if before >= 2:
            return sentence[start : m.start()]
        if first and m["p"]:
            start = m.end()
        first = False
    return sentence[start:]


def _is_word(token: str) -> bool:
    return any(c.isalpha() for c in token)


_TOPIC_BUFFER: Final = 2000
"""Characters of an open paragraph kept while its first sentence is not complete."""


class TopicSentences:
    """The first sentence of each reasoning paragraph, as the reasoning streams.

    A paragraph's first sentence is the model's own heading for the thought: it is what
    the extractive summary of a paragraph step keeps. Steps cut by time in the middle of
    a paragraph have no such heading, so only paragraph openings are ever offered.
    """

    def __init__(self) -> None:
        """Nothing read yet."""
        self._buf = ""
        self._found = False
        """The open paragraph's first sentence was already returned."""
        self._newline = False
        """The last character read was a newline (a blank line may be splitting)."""

    def feed(self, text: str) -> str | None:
        """Read more reasoning; the first sentence of a paragraph once it is complete."""
        topic: str | None = None
        for part in re.split(r"(\n)", text):
            if part == "\n":
                if self._newline:  # a blank line: a new paragraph opens
                    self._buf, self._found, self._newline = "", False, False
                    continue
                self._newline = True
                self._buf += " "
                continue
            if not part:
                continue
            if part.strip():
                self._newline = False
            if self._found or len(self._buf) >= _TOPIC_BUFFER:
                continue
            self._buf += part
            sentence = _first_sentence(self._buf)
            if sentence is not None:
                self._found = True
                topic = sentence
        return topic


def _first_sentence(text: str) -> str | None:
    """The first complete sentence of ``text`` (followed by whitespace), if any."""
    stripped = text.lstrip()
    offset = len(text) - len(stripped)
    for end in sentence_ends(stripped):
        if end < len(stripped) and stripped[end].isspace():
            return " ".join(text[offset : offset + end].split())
    return None
