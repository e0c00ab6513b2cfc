"""Cut reasoning text into steps: a pure function plus a streaming wrapper.

A step is one coherent thought, normally a paragraph. :func:`segment` cuts a whole
reasoning text; :class:`StepSegmenter` does the same while the text streams in.

Cutting rules (both forms):

1. A blank line (a newline, optional spaces/tabs/CR, a newline) ends a step.
2. A step never exceeds ``max_bytes`` UTF-8 bytes (default :data:`STEP_MAX_BYTES`, so a
   ReasoningStep envelope fits one packet). A longer paragraph is cut greedily: each
   piece is the longest prefix within ``max_bytes`` that ends at a sentence end, else at
   a word boundary (whitespace), else at a character boundary.
3. Steps are whitespace-stripped and never empty.

A *sentence end* is one of ``. ! ? …`` followed by optional closing quotes/brackets and
then whitespace, or an ideographic full stop or full-width ``!``/``?`` with optional
closers (CJK text has no spaces).

Streaming: ``push()`` returns steps closed by rules 1-2; ``close()`` returns the open
step (end of reasoning, or a tool call is coming). Without :meth:`StepSegmenter.poll`,
any split of a text through ``push()``/``close()`` yields exactly ``segment(text)``.

Time rule (only through :meth:`StepSegmenter.due` / :meth:`StepSegmenter.poll`), so a
step reaches clients within a bounded delay even if the model writes one endless
paragraph. Let *t0* be the arrival time of the oldest text in the open step.

* once ``now >= t0 + max_delay`` and the open step contains a sentence end, it is cut
  after its last sentence end;
* once ``now >= t0 + 2 * max_delay`` and it contains no sentence end, it is cut at its
  last whitespace, and if it has no whitespace at all (one endless word, CJK without
  punctuation) all of it is emitted.

``due()`` returns the earliest such time for the current open step (``t0 + max_delay``
if it holds a sentence end, else ``t0 + 2 * max_delay``); ``poll()`` applies the rule.

The text left over starts a new open step whose *t0* is the arrival time of its own
oldest character. So, if the caller polls at ``due()``, every reasoning character is in
an emitted step at most ``2 * max_delay`` after it was pushed. Only whitespace is
dropped, never text, and no empty step is ever emitted.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from alicia.protocol import TEXT_BUDGET_BYTES

__all__ = ["STEP_MAX_BYTES", "StepSegmenter", "segment"]

STEP_MAX_BYTES: Final = TEXT_BUDGET_BYTES
"""Largest step text (UTF-8 bytes) so that a ReasoningStep envelope fits one packet."""

_BLANK_LINE: Final = re.compile(r"\n[ \t\r\f\v]*\n")
_ENDS: Final = ".!?\u2026\u3002\uff01\uff1f"
_MAYBE_END: Final = re.compile(f"[{_ENDS}]")
# Closing quotes and brackets that may follow terminal punctuation.
_CLOSERS: Final = "\"')]}\u00bb\u201d\u2019\u300d\u300f\uff09\u3011"
_ENDS_AND_CLOSERS: Final = _ENDS + _CLOSERS
_FULL_WIDTH_ENDS: Final = "\u3002\uff01\uff1f"  # ideographic full stop, full-width ! and ?
# A sentence end: terminal punctuation, optional closers, then (for ASCII-style
# terminators) one whitespace character, which the match includes.
_SENTENCE_END: Final = re.compile(
    rf"(?:[.!?\u2026][{re.escape(_CLOSERS)}]*\s|[{_FULL_WIDTH_ENDS}][{re.escape(_CLOSERS)}]*)"
)


def _utf8_len(text: str) -> int:
    return len(text.encode())


def _window(text: str, max_bytes: int) -> int:
    """Number of leading characters of ``text`` that fit ``max_bytes`` UTF-8 bytes."""
    return len(text.encode()[:max_bytes].decode("utf-8", errors="ignore"))


def _last_sentence_end(text: str, limit: int, start: int = 0) -> int:
    """End index (exclusive, punctuation and closers only) of the last sentence end whose
    punctuation lies within ``text[start:limit]``; 0 if none. May look at ``text[limit]``."""
    best = 0
    for match in _SENTENCE_END.finditer(text, start, min(len(text), limit + 1)):
        end = match.end()
        if text[end - 1].isspace():
            end -= 1
        if end <= limit:
            best = end
    return best


def _last_whitespace(text: str, limit: int) -> int:
    """Index of the last whitespace character in ``text[1:limit+1]``; 0 if none."""
    for i in range(min(limit, len(text) - 1), 0, -1):
        if text[i].isspace():
            return i
    return 0


def _trailing_whitespace(text: str, end: int) -> int:
    """Number of whitespace characters right before ``text[end]``."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    return end - i


def _cut_point(text: str, max_bytes: int) -> int:
    """Where to cut a left-stripped ``text`` longer than ``max_bytes`` (rule 2)."""
    limit = _window(text, max_bytes)
    cut = _last_sentence_end(text, limit)
    if cut == 0:
        cut = _last_whitespace(text, limit)
    if cut == 0:
        cut = max(limit, 1)
    return cut


def _split_paragraph(paragraph: str, max_bytes: int, steps: list[str]) -> None:
    rest = paragraph.strip()
    while _utf8_len(rest) > max_bytes:
        cut = _cut_point(rest, max_bytes)
        steps.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        steps.append(rest)


def segment(text: str, *, max_bytes: int = STEP_MAX_BYTES) -> list[str]:
    """Cut a whole reasoning text into step texts (blank lines, then the size bound)."""
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4 (one UTF-8 character)")
    steps: list[str] = []
    for paragraph in _BLANK_LINE.split(text):
        _split_paragraph(paragraph, max_bytes, steps)
    return steps


class StepSegmenter:
    """Streaming form of :func:`segment`, plus the time rule (see the module docstring).

    Memory is bounded: after a push the open step holds at most ``max_bytes`` of text
    (plus trailing whitespace). Each push costs time proportional to its own length
    (plus the trailing whitespace of the open step), not to the open step's length.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_bytes",
        "_clock",
        "_due",
        "_due_known",
        "_last_end",
        "_max_bytes",
        "_max_delay",
        "_pushes",
    )

    def __init__(
        self,
        *,
        max_bytes: int = STEP_MAX_BYTES,
        max_delay: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``max_delay`` seconds drive the time rule; ``clock`` is injectable for tests."""
        if max_bytes < 4:
            raise ValueError("max_bytes must be at least 4 (one UTF-8 character)")
        if max_delay <= 0:
            raise ValueError("max_delay must be positive")
        self._max_bytes = max_bytes
        self._max_delay = max_delay
        self._clock = clock
        self._buf = ""
        # UTF-8 length of self._buf.
        self._bytes = 0
        # End of a sentence end in self._buf (0: none, -1: not computed); only its
        # truth is used.
        self._last_end = 0
        # Absolute offset (in characters since the start) of self._buf[0].
        self._base = 0
        # (absolute offset where a push started, its clock time), oldest first.
        self._pushes: deque[tuple[int, float]] = deque()
        # What due() returns, kept until the open step's start or its sentence end
        # changes (it is asked after every token).
        self._due: float | None = None
        self._due_known = True

    def push(self, text: str) -> list[str]:
        """Feed reasoning text; return the steps it closes (blank line or size bound)."""
        if not text:
            return []
        old_buf = self._buf
        old_len = len(old_buf)
        old_base = self._base
        self._pushes.append((old_base + old_len, self._clock()))
        self._buf = old_buf + text
        if not old_len:  # a new open step: its start time
            self._due_known = False
        ascii_text = text.isascii()
        self._bytes += len(text) if ascii_text else _utf8_len(text)
        steps: list[str] = []
        if "\n" in text:  # a blank line needs a newline from this push
            # The open step had no blank line: a new one starts in its trailing whitespace.
            start = old_len - _trailing_whitespace(self._buf, old_len)
            while (match := _BLANK_LINE.search(self._buf, start)) is not None:
                _split_paragraph(self._buf[: match.start()], self._max_bytes, steps)
                self._consume(match.end())
                start = 0
        if not old_len and text[0].isspace():  # leading whitespace starts no step
            self._consume(0)
        if self._bytes > self._max_bytes:
            while self._rstripped_bytes() > self._max_bytes:
                cut = _cut_point(self._buf, self._max_bytes)
                steps.append(self._buf[:cut].rstrip())
                self._consume(cut)
        if self._base != old_base or self._last_end:
            # Consumed (recomputed when needed), or a sentence end is known already:
            # ``due`` only asks whether there is one.
            return steps
        # Nothing consumed: only punctuation in this push, or a closer or whitespace
        # right after older punctuation, can make a new sentence end.
        if ascii_text:
            maybe = "." in text or "?" in text or "!" in text
        else:
            maybe = _MAYBE_END.search(text) is not None
        if not maybe and not (
            old_len
            and old_buf[-1] in _ENDS_AND_CLOSERS
            and (text[0].isspace() or text[0] in _CLOSERS)
        ):
            return steps
        start = old_len
        buf = self._buf
        while start > 0 and buf[start - 1] in _CLOSERS:
            start -= 1
        found = _last_sentence_end(buf, len(buf), max(0, start - 1))
        if found:
            self._last_end = found
            self._due_known = False
        return steps

    def close(self) -> list[str]:
        """End of reasoning or a tool call is coming: return the open step if non-empty."""
        steps: list[str] = []
        _split_paragraph(self._buf, self._max_bytes, steps)
        self._consume(len(self._buf))
        return steps

    def due(self) -> float | None:
        """Clock time by which the open step must be cut; None if nothing is open."""
        if self._due_known:
            return self._due
        due: float | None = None
        if self._buf:
            t0 = self._open_since()
            if self._last_end < 0:
                self._last_end = _last_sentence_end(self._buf, len(self._buf))
            due = t0 + (self._max_delay if self._last_end else 2 * self._max_delay)
        self._due, self._due_known = due, True
        return due

    def poll(self) -> list[str]:
        """Cut the open step now if ``due()`` has passed (at a sentence or word boundary)."""
        if not self._buf:
            return []
        now = self._clock()
        t0 = self._open_since()
        if now < t0 + self._max_delay:
            return []
        cut = _last_sentence_end(self._buf, len(self._buf))
        if cut == 0:
            if now < t0 + 2 * self._max_delay:
                return []
            cut = _last_whitespace(self._buf, len(self._buf)) or len(self._buf)
        step = self._buf[:cut].rstrip()
        self._consume(cut)
        return [step] if step else []

    @property
    def pending(self) -> str:
        """The open step's text so far (left-stripped)."""
        return self._buf

    def _open_since(self) -> float:
        pushes = self._pushes
        # The push holding self._buf[0] is the last one starting at or before _base.
        while len(pushes) > 1 and pushes[1][0] <= self._base:
            pushes.popleft()
        return pushes[0][1]

    def _rstripped_bytes(self) -> int:
        trailing = _trailing_whitespace(self._buf, len(self._buf))
        if not trailing:
            return self._bytes
        return self._bytes - _utf8_len(self._buf[-trailing:])

    def _consume(self, count: int) -> None:
        """Drop ``count`` characters from the open step, then its leading whitespace."""
        rest = self._buf[count:]
        stripped = rest.lstrip()
        self._base += count + len(rest) - len(stripped)
        self._buf = stripped
        self._bytes = _utf8_len(stripped)
        self._last_end = -1 if stripped else 0
        self._due_known = False
        if not self._buf:
            self._pushes.clear()
