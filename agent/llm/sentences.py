"""Cut streamed answer text into sentences for AssistantSentence and TTS.

:func:`sentence_ends` finds sentence boundaries with a few rules, like livekit-agents's
basic tokenizer: a run of ``.``, ``!``, ``?`` or ``…`` (closing quotes and brackets
included) followed by white space and more text ends a sentence, unless the word before
is a title or a common abbreviation (``Dr.``, ``e.g.``) or a single letter (an
initial). Decimal numbers (``3.5``) never hold a boundary: no space follows their point.

:class:`SentenceStream` only decides *when* a sentence is complete: a sentence is
released once text of the next sentence has arrived, so the text still held at the end
of the stream is always the last sentence. Short sentences (under ``min_chars``) are
merged with the next one, and every released piece fits one packet (longer ones are
cut with :func:`alicia.protocol.split_text`).
"""

from __future__ import annotations

import re
from typing import Final

from alicia.protocol import TEXT_BUDGET_BYTES, split_text

__all__ = ["SentenceStream", "sentence_ends"]

_CLOSERS: Final = "\"'\u201d\u2019)]"
_OPENERS: Final = "\"'\u201c\u2018("
_END: Final = re.compile(r"[.!?\u2026]+[" + re.escape(_CLOSERS) + r"]*(?=\s+\S)")
_END_PUNCTUATION: Final = re.compile("[.!?\u2026]")
_WORD_BEFORE: Final = re.compile(r"(\S+)$")
_ABBREVIATIONS: Final = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "fig",
        "no",
        "vol",
        "approx",
        "dept",
        "est",
        "inc",
        "ltd",
        "co",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)


def sentence_ends(text: str) -> list[int]:
    """Offsets in ``text`` just after each sentence-ending punctuation run."""
    ends: list[int] = []
    for match in _END.finditer(text):
        word = _WORD_BEFORE.search(text, 0, match.start())
        if match.group().startswith(".") and word is not None:
            stem = word.group(1).lstrip(_OPENERS).lower()
            if stem in _ABBREVIATIONS or (len(stem) == 1 and stem.isalpha()):
                continue
        ends.append(match.end())
    return ends


class SentenceStream:
    """Push answer text, get whole sentences back; ``flush`` returns the rest."""

    __slots__ = ("_buf", "_max_bytes", "_min_chars", "_punctuated")

    def __init__(self, *, min_chars: int = 20, max_bytes: int = TEXT_BUDGET_BYTES) -> None:
        """``min_chars``: shorter sentences wait for the next; ``max_bytes``: size cap."""
        self._buf = ""
        self._min_chars = min_chars
        self._max_bytes = max_bytes
        self._punctuated = False
        """The held text has sentence-ending punctuation (else it holds no boundary)."""

    def push(self, text: str) -> list[str]:
        """Add answer text; return the sentences it completes (maybe none)."""
        self._buf += text
        if not self._punctuated:
            self._punctuated = _has_end_punctuation(text)
        if not self._punctuated or self._buf.isspace():
            out: list[str] = []
        else:
            out = self._release()
        if len(self._buf) > self._max_bytes // 2 and len(self._buf.encode()) > 2 * self._max_bytes:
            # One endless sentence: release all but the last packet's worth.
            pieces = split_text(self._buf, self._max_bytes)
            out.extend(_pieces("".join(pieces[:-1]), self._max_bytes))
            self._buf = pieces[-1]
            self._punctuated = _has_end_punctuation(self._buf)
        return out

    def _release(self) -> list[str]:
        out: list[str] = []
        start = 0
        # Text after the last boundary is still open: it may grow or merge with what
        # comes next; so is a boundary at the very end (the next word decides).
        for end in sentence_ends(self._buf):
            piece = self._buf[start:end].strip()
            if len(piece) >= self._min_chars:
                out.extend(_pieces(piece, self._max_bytes))
                start = end
        if start:
            self._buf = self._buf[start:].lstrip()
            self._punctuated = _has_end_punctuation(self._buf)
        return out

    def flush(self) -> list[str]:
        """End of the answer: the remaining text as the last sentence(s)."""
        rest, self._buf = self._buf, ""
        return _pieces(rest, self._max_bytes)


def _has_end_punctuation(text: str) -> bool:
    if text.isascii():
        return "." in text or "!" in text or "?" in text
    return _END_PUNCTUATION.search(text) is not None


def _pieces(text: str, max_bytes: int) -> list[str]:
    """``text`` stripped and cut to packet-sized, non-empty pieces."""
    text = text.strip()
    if not text:
        return []
    return [p.strip() for p in split_text(text, max_bytes) if p.strip()]
