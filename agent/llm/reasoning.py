"""Split a streamed chat completion into reasoning and answer text, safe across chunk cuts.

Providers put the model's reasoning in different places; :class:`ReasoningExtractor`
reads one streamed choice delta at a time (``chunk.choices[0].delta.model_dump()``) and
returns :class:`Reasoning` and :class:`Answer` parts:

* ``delta.reasoning_content`` (DeepSeek, LiteLLM, vLLM < 0.11) and ``delta.reasoning``
  (vLLM >= 0.11, OpenRouter, Ollama): reasoning. When a delta carries both (vLLM during
  the rename sends the same text twice) only the first non-empty one counts.
* ``delta.content`` as a string: answer text, except text between ``<think>`` and
  ``</think>`` (Qwen3/DeepSeek-R1 without a reasoning parser), which is reasoning. Tags
  may be cut across chunks at any character.
* OpenRouter's ``delta.reasoning_details`` (``reasoning.text``/``reasoning.summary``
  entries) only when neither field above carries text: it repeats ``reasoning``.
* ``delta.content`` as a list of blocks: blocks of type ``reasoning``/``thinking`` are
  reasoning (text under ``text``, ``thinking`` or ``reasoning``, either a string or, as
  Mistral's Magistral sends it, a list of ``{"type": "text", "text": ...}`` chunks);
  ``text`` blocks (and bare strings) go through the same tag scanner as string content;
  other blocks (images, signatures, redacted thinking) are ignored.
* ``tool_calls`` are ignored: the turn runner reads them itself.

Rules (they hold for any split of the stream into deltas):

* Only the exact lower-case tags ``<think>`` and ``</think>`` are markers; text that
  merely starts like one (``<thinking about it``, ``<th>``) is ordinary text. The only
  text ever held back is a suffix that is a proper prefix of a tag (at most 7 chars,
  e.g. ``"<thi"``); it is released as soon as the next character decides it, or by
  :meth:`~ReasoningExtractor.flush`.
* ``<think>`` anywhere in the content opens reasoning, also in the middle of the answer;
  a further ``<think>`` inside reasoning is dropped. A ``</think>`` outside reasoning
  (a stray close) is dropped and its text stays answer.
* ``open_at_start=True`` (Qwen3 ``*-Thinking-2507``: the chat template opens the tag, the
  model only writes ``</think>``): content is reasoning until the first ``</think>``,
  unless the provider sends a reasoning field or block before any content text, which
  shows it separates reasoning itself (then content is answer).
* Whitespace never starts the answer: it is dropped while the answer is still empty and
  right after a ``</think>`` when the answer so far ends in whitespace (Qwen writes
  ``"</think>\\n\\n"``). Likewise whitespace right after ``<think>`` does not start a
  reasoning run. Other whitespace is kept as written.
* Removed reasoning (or a dropped stray tag) between two answer words acts as a word
  break: if neither side has whitespace there, one space is inserted
  (``"Sure.<think>…</think>Done."`` reads ``"Sure. Done."``). So answer text never
  contains a complete tag, not even one glued together around removed text.
* An unclosed ``<think>`` at the end of the stream leaves all text after it as reasoning:
  reasoning is never spoken, even when the model forgets to close it.

:func:`strip_reasoning` applies the same rules to a finished text, for building the chat
context: reasoning is never sent back to the LLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "Answer",
    "Part",
    "Reasoning",
    "ReasoningExtractor",
    "strip_reasoning",
]

THINK_OPEN: Final = "<think>"
THINK_CLOSE: Final = "</think>"

_REASONING_FIELDS: Final = ("reasoning_content", "reasoning")
_REASONING_BLOCKS: Final = frozenset({"reasoning", "thinking"})
_REASONING_BLOCK_KEYS: Final = ("text", "thinking", "reasoning")
_TEXT_BLOCKS: Final = frozenset({"text", "output_text"})
_TAGS: Final = (THINK_OPEN, THINK_CLOSE)


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A fragment of the model's reasoning (never spoken, never sent back to the LLM)."""

    text: str


@dataclass(frozen=True, slots=True)
class Answer:
    """A fragment of the answer: safe for TTS and for the user."""

    text: str


Part = Reasoning | Answer


def _partial_tag_length(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a tag."""
    for length in range(min(len(text), len(THINK_CLOSE) - 1), 0, -1):
        suffix = text[-length:]
        if THINK_OPEN.startswith(suffix) or THINK_CLOSE.startswith(suffix):
            return length
    return 0


class ReasoningExtractor:
    """Stateful splitter of streamed deltas into :class:`Reasoning`/:class:`Answer` parts.

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
    )

    def __init__(self, *, open_at_start: bool = False) -> None:
        """Start outside reasoning, or inside it for models that only write ``</think>``."""
        self._in_think = open_at_start
        self._implicit = open_at_start
        self._held = ""
        self._skip_answer_ws = True
        self._skip_reasoning_ws = open_at_start
        self._answer_empty = True
        self._answer_ends_ws = False
        self._need_break = False

    @property
    def in_reasoning(self) -> bool:
        """True while content text is being read as reasoning (inside ``<think>``)."""
        return self._in_think

    def feed(self, delta: Mapping[str, Any]) -> list[Part]:
        """Read one streamed choice delta; return the parts it completes, in order."""
        out: list[Part] = []
        for key in _REASONING_FIELDS:
            value = delta.get(key)
            if isinstance(value, str) and value:
                self._reasoning_field(value, out)
                break
        else:
            details = delta.get("reasoning_details")
            if isinstance(details, list):
                text = "".join(_detail_text(d) for d in details)
                if text:
                    self._reasoning_field(text, out)
        content = delta.get("content")
        if isinstance(content, str):
            self._scan(content, out)
        elif isinstance(content, list):
            self._blocks(content, out)
        return out

    def flush(self) -> list[Part]:
        """End of stream: release a held-back partial tag as ordinary text."""
        out: list[Part] = []
        held, self._held = self._held, ""
        if held:
            if self._in_think:
                self._emit_reasoning(held, out)
            else:
                self._emit_answer(held, out)
        return out

    # -- internals -------------------------------------------------------------------

    def _reasoning_field(self, text: str, out: list[Part]) -> None:
        if self._implicit:
            # The provider separates reasoning itself: content is answer after all.
            self._implicit = False
            self._in_think = False
            self._skip_reasoning_ws = False
        _append(out, Reasoning(text))

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
                    self._reasoning_field(text, out)
            elif kind in _TEXT_BLOCKS or kind is None:
                value = block.get("text")
                if isinstance(value, str):
                    self._scan(value, out)

    def _scan(self, text: str, out: list[Part]) -> None:
        if not text:
            return
        self._implicit = False
        buf = self._held + text
        self._held = ""
        while buf:
            open_at = buf.find(THINK_OPEN)
            close_at = buf.find(THINK_CLOSE)
            if open_at >= 0 and (close_at < 0 or open_at < close_at):
                self._emit(buf[:open_at], out)
                buf = buf[open_at + len(THINK_OPEN) :]
                if not self._in_think:
                    self._mark_break()
                self._in_think = True
                self._skip_reasoning_ws = True
            elif close_at >= 0:
                self._emit(buf[:close_at], out)
                buf = buf[close_at + len(THINK_CLOSE) :]
                self._in_think = False
                self._skip_answer_ws = self._answer_empty or self._answer_ends_ws
                self._mark_break()
            else:
                keep = _partial_tag_length(buf)
                if keep:
                    self._held = buf[-keep:]
                    buf = buf[:-keep]
                self._emit(buf, out)
                break

    def _mark_break(self) -> None:
        # Removed text between two answer words must not glue them (or a tag) together.
        self._need_break = not self._answer_empty and not self._answer_ends_ws

    def _emit(self, text: str, out: list[Part]) -> None:
        if self._in_think:
            self._emit_reasoning(text, out)
        else:
            self._emit_answer(text, out)

    def _emit_reasoning(self, text: str, out: list[Part]) -> None:
        if self._skip_reasoning_ws:
            text = text.lstrip()
            if not text:
                return
            self._skip_reasoning_ws = False
        if text:
            _append(out, Reasoning(text))

    def _emit_answer(self, text: str, out: list[Part]) -> None:
        if self._skip_answer_ws:
            text = text.lstrip()
            if not text:
                return
            self._skip_answer_ws = False
        if text and self._need_break:
            if not text[0].isspace():
                text = " " + text
            self._need_break = False
        if text:
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


def _detail_text(detail: Any) -> str:
    """Readable text of one OpenRouter ``reasoning_details`` entry (encrypted ones have none)."""
    if not isinstance(detail, Mapping):
        return ""
    kind = detail.get("type")
    if kind == "reasoning.text":
        text = detail.get("text")
    elif kind == "reasoning.summary":
        text = detail.get("summary")
    else:
        return ""
    return text if isinstance(text, str) else ""


def _append(out: list[Part], part: Part) -> None:
    if out and type(out[-1]) is type(part):
        out[-1] = type(part)(out[-1].text + part.text)
    else:
        out.append(part)


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` (and a leading ``…</think>``) from a finished text.

    Uses the extractor's rules; a text with no tag at all is returned unchanged.
    """
    open_at = text.find(THINK_OPEN)
    close_at = text.find(THINK_CLOSE)
    if open_at < 0 and close_at < 0:
        return text
    leading_close = close_at >= 0 and (open_at < 0 or close_at < open_at)
    extractor = ReasoningExtractor(open_at_start=leading_close)
    parts = extractor.feed({"content": text}) + extractor.flush()
    return "".join(p.text for p in parts if isinstance(p, Answer))
