"""Split a streamed completion into reasoning, provider summaries and answer text, safe
across chunk cuts.

Providers put the model's reasoning in different places; :class:`ReasoningExtractor`
reads one streamed choice delta at a time (a plain mapping) and returns
:class:`Reasoning`, :class:`Summary` and :class:`Answer` parts:

* fields ``delta.reasoning_content`` (DeepSeek, llama.cpp, LiteLLM, vLLM before 2026),
  ``delta.reasoning`` (vLLM, OpenRouter, Ollama's OpenAI endpoint) and
  ``delta.thinking`` (Ollama's native name): reasoning. When a delta carries more than
  one (vLLM during the rename sent the same text twice) only the first non-empty counts.
* ``delta.reasoning_summary`` (the Responses API adapter's summary text): a provider
  summary.
* OpenRouter's ``delta.reasoning_details``: when present with text they decide the kind
  (``reasoning.text`` is reasoning, ``reasoning.summary`` a provider summary) and the
  plain ``reasoning`` field, which repeats them, is not read; ``reasoning.encrypted``
  items have no text (the pass-back collector keeps them).
* ``delta.content`` as a string: answer text, except text between inline markers, which
  is reasoning: ``<think>…</think>`` (Qwen3, DeepSeek-R1 without a reasoning parser),
  ``<thinking>…</thinking>`` (Claude without extended thinking), Kimi
  ``◁think▷…◁/think▷``, gpt-oss harmony ``<|channel|>analysis<|message|>…<|end|>`` and
  Gemma ``<|channel>thought…<channel|>``. Harmony's framing tokens (``<|start|>assistant``,
  ``<|channel|>final<|message|>``, ``<|return|>``, a stray ``<|end|>``) are dropped.
* ``delta.content`` as a list of blocks: blocks of type ``reasoning``/``thinking`` are
  reasoning (text under ``text``, ``thinking`` or ``reasoning``, a string or, as Mistral's
  Magistral sends it, a list of ``{"type": "text", "text": ...}`` chunks); ``text``
  blocks and bare strings go through the marker scanner; other blocks are ignored.
* ``tool_calls`` are ignored: the turn reads them itself.

Rules (they hold for any split of the stream into deltas):

* Only exact markers count; text that merely starts like one (``<thinking about it``,
  ``<th>``) is ordinary text. The only text ever held back is a suffix that is a proper
  prefix of a marker; it is released as soon as the next character decides it, or by
  :meth:`~ReasoningExtractor.flush`.
* An opening marker anywhere opens reasoning, also in the middle of the answer; a further
  opening marker inside reasoning is dropped; any closing marker ends it. A closing
  marker outside reasoning (a stray close) is dropped and its text stays answer.
* Never twice: once the provider has sent reasoning in a field or detail, text inside
  inline markers repeats it (llama.cpp's ``deepseek-legacy`` format sends every
  piece both ways) and is dropped.
* ``open_at_start=True`` (Qwen3 ``*-Thinking-2507``, DeepSeek-R1 distills: the template
  opens the tag, the model only writes the close): content is reasoning until the first
  closing marker, unless the provider sends reasoning in a field or block before any
  content text, which shows it separates reasoning itself (then content is answer).
* Whitespace never starts the answer: it is dropped while the answer is still empty and
  right after a closing marker when the answer so far ends in whitespace. Likewise
  whitespace right after an opening marker does not start a reasoning run.
* Removed reasoning (or a dropped marker) between two answer words acts as a word break:
  if neither side has whitespace there, one space is inserted.
* An unclosed opening marker at the end of the stream leaves all text after it as
  reasoning: reasoning is never spoken, even when the model forgets to close it.

:func:`strip_reasoning` applies the same rules to a finished text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CLOSE_MARKERS",
    "DROP_MARKERS",
    "OPEN_MARKERS",
    "Answer",
    "Part",
    "Reasoning",
    "ReasoningExtractor",
    "Summary",
    "strip_reasoning",
]

OPEN_MARKERS: Final = (
    "<think>",
    "<thinking>",
    "◁think▷",
    "<|channel|>analysis<|message|>",
    "<|channel>thought",
)
"""Inline markers that open reasoning."""
CLOSE_MARKERS: Final = ("</think>", "</thinking>", "◁/think▷", "<|end|>", "<channel|>")
"""Inline markers that close it."""
DROP_MARKERS: Final = ("<|start|>assistant", "<|channel|>final<|message|>", "<|return|>")
"""Framing tokens that are neither reasoning nor answer (gpt-oss harmony)."""

_OPEN: Final = frozenset(OPEN_MARKERS)
_CLOSE: Final = frozenset(CLOSE_MARKERS)
_ALL: Final = sorted({*OPEN_MARKERS, *CLOSE_MARKERS, *DROP_MARKERS}, key=len, reverse=True)
_MARKER: Final = re.compile("|".join(re.escape(m) for m in _ALL))
_PREFIXES: Final = frozenset(m[:i] for m in _ALL for i in range(1, len(m)))
_LONGEST: Final = max(map(len, _ALL))
_STARTS: Final = "".join(sorted({m[0] for m in _ALL}))
assert _STARTS == "<\u25c1", "the scanner's fast path checks exactly these"

_REASONING_FIELDS: Final = ("reasoning_content", "reasoning", "thinking")
_REASONING_BLOCKS: Final = frozenset({"reasoning", "thinking"})
_REASONING_BLOCK_KEYS: Final = ("text", "thinking", "reasoning")
_TEXT_BLOCKS: Final = frozenset({"text", "output_text"})


@dataclass(slots=True)
class Reasoning:
    """A fragment of the model's reasoning (never spoken)."""

    text: str


@dataclass(slots=True)
class Summary:
    """A fragment of the provider's own summary of its reasoning (never spoken)."""

    text: str


@dataclass(slots=True)
class Answer:
    """A fragment of the answer: safe for TTS and for the user."""

    text: str


Part = Reasoning | Summary | Answer


def _held_length(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    start = max(0, len(text) - _LONGEST + 1)
    for i in range(start, len(text)):
        if text[i] in _STARTS and text[i:] in _PREFIXES:
            return len(text) - i
    return 0


class ReasoningExtractor:
    """Stateful splitter of streamed deltas into parts.

    One instance per streamed completion. ``feed`` each choice delta as a plain mapping,
    then ``flush`` once at the end of the stream. Adjacent parts of one kind returned by
    one call are merged.
    """

    __slots__ = (
        "_answer_empty",
        "_answer_ends_ws",
        "_held",
        "_implicit",
        "_in_think",
        "_need_break",
        "_skip_answer_ws",
        "_skip_reasoning_ws",
        "_structured",
    )

    def __init__(self, *, open_at_start: bool = False) -> None:
        """Start outside reasoning, or inside it for models that only write the close."""
        self._in_think = open_at_start
        self._implicit = open_at_start
        self._held = ""
        self._skip_answer_ws = True
        self._skip_reasoning_ws = open_at_start
        self._answer_empty = True
        self._answer_ends_ws = False
        self._need_break = False
        self._structured = False

    @property
    def in_reasoning(self) -> bool:
        """True while content text is being read as reasoning (inside markers)."""
        return self._in_think

    def feed(self, delta: Mapping[str, Any]) -> list[Part]:
        """Read one streamed choice delta; return the parts it completes, in order."""
        if len(delta) == 1:  # the common delta: one field
            for key, value in delta.items():
                if type(value) is not str:
                    break  # blocks, details, tool calls: the general path
                if not value:
                    return []
                if key == "content":
                    out: list[Part] = []
                    self._scan(value, out)
                    return out
                if key in _REASONING_FIELDS:
                    self._structured = True
                    if self._implicit:
                        self._end_implicit()
                    return [Reasoning(value)]
        out = []
        get = delta.get
        details = get("reasoning_details")
        if not (details and type(details) is list and self._details(details, out)):
            text = get("reasoning_content") or get("reasoning") or get("thinking")
            if text and type(text) is str:
                self._structured = True
                if self._implicit:
                    self._end_implicit()
                out.append(Reasoning(text))
        summary = get("reasoning_summary")
        if summary and type(summary) is str:
            self._reasoning_field(Summary(summary), out)
        content = get("content")
        if content:
            if type(content) is str:
                self._scan(content, out)
            elif type(content) is list:
                self._blocks(content, out)
        return out

    def flush(self) -> list[Part]:
        """End of stream: release a held-back partial marker as ordinary text."""
        out: list[Part] = []
        held, self._held = self._held, ""
        if held:
            self._emit(held, out)
        return out

    # -- internals -------------------------------------------------------------------

    def _details(self, details: list[Any], out: list[Part]) -> bool:
        """OpenRouter ``reasoning_details``: True when any item carried text."""
        found = False
        for detail in details:
            if not isinstance(detail, Mapping):
                continue
            kind = detail.get("type")
            if kind == "reasoning.text":
                text = detail.get("text")
                if text and isinstance(text, str):
                    self._reasoning_field(Reasoning(text), out)
                    found = True
            elif kind == "reasoning.summary":
                text = detail.get("summary")
                if text and isinstance(text, str):
                    self._reasoning_field(Summary(text), out)
                    found = True
        return found

    def _reasoning_field(
        self, part: Reasoning | Summary, out: list[Part], *, field: bool = True
    ) -> None:
        if field:
            self._structured = True
        if self._implicit:
            self._end_implicit()
        _append(out, part)

    def _end_implicit(self) -> None:
        # The provider separates reasoning itself: content is answer after all.
        self._implicit = False
        self._in_think = False
        self._skip_reasoning_ws = False

    def _blocks(self, blocks: Iterable[Any], out: list[Part]) -> None:
        for block in blocks:
            if isinstance(block, str):
                self._scan(block, out)
                continue
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind in _REASONING_BLOCKS:
                text = _block_text(block)
                if text:
                    self._reasoning_field(Reasoning(text), out, field=False)
            elif kind in _TEXT_BLOCKS or kind is None:
                value = block.get("text")
                if isinstance(value, str):
                    self._scan(value, out)

    def _scan(self, text: str, out: list[Part]) -> None:
        self._implicit = False
        if self._held:
            text = self._held + text
            self._held = ""
        elif "<" not in text and "\u25c1" not in text:  # the common case: no marker here
            self._emit(text, out)
            return
        pos = 0
        for match in _MARKER.finditer(text):
            self._emit(text[pos : match.start()], out)
            pos = match.end()
            marker = match.group()
            if marker in _OPEN:
                if not self._in_think:
                    self._mark_break()
                self._in_think = True
                self._skip_reasoning_ws = True
            elif marker in _CLOSE:
                self._in_think = False
                self._skip_answer_ws = self._answer_empty or self._answer_ends_ws
                self._mark_break()
            else:
                self._mark_break()
        rest = text[pos:]
        keep = _held_length(rest)
        if keep:
            self._held = rest[-keep:]
            rest = rest[:-keep]
        self._emit(rest, out)

    def _mark_break(self) -> None:
        # Removed text between two answer words must not glue them (or a marker) together.
        self._need_break = not self._answer_empty and not self._answer_ends_ws

    def _emit(self, text: str, out: list[Part]) -> None:
        if not text:
            return
        if self._in_think:
            if self._structured:
                return  # the provider already sent this reasoning in a field
            if self._skip_reasoning_ws:
                text = text.lstrip()
                if not text:
                    return
                self._skip_reasoning_ws = False
            _append(out, Reasoning(text))
            return
        if self._skip_answer_ws:
            text = text.lstrip()
            if not text:
                return
            self._skip_answer_ws = False
        if self._need_break:
            if not text[0].isspace():
                text = " " + text
            self._need_break = False
        self._answer_empty = False
        self._answer_ends_ws = text[-1].isspace()
        _append(out, Answer(text))


def _block_text(block: Mapping[str, Any]) -> str:
    """Text of a reasoning/thinking block: a string, or (Mistral) a list of text chunks."""
    for key in _REASONING_BLOCK_KEYS:
        value = block.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return "".join(
                item if isinstance(item, str) else str(item.get("text") or "")
                for item in value
                if isinstance(item, str) or (isinstance(item, Mapping) and "text" in item)
            )
    return ""


def _append(out: list[Part], part: Part) -> None:
    if out and type(out[-1]) is type(part):
        out[-1] = type(part)(out[-1].text + part.text)
    else:
        out.append(part)


def strip_reasoning(text: str) -> str:
    """Remove inline reasoning (and a leading ``…</think>``) from a finished text.

    Uses the extractor's rules; a text with no marker at all is returned unchanged.
    """
    first = _MARKER.search(text)
    if first is None:
        return text
    extractor = ReasoningExtractor(open_at_start=first.group() in _CLOSE)
    parts = extractor.feed({"content": text}) + extractor.flush()
    return "".join(p.text for p in parts if isinstance(p, Answer))
