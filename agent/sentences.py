"""Cut streamed answer text into sentences for AssistantSentence and TTS.

Sentence boundaries come from BlingFire (``livekit.blingfire``, the splitter
livekit-agents itself ships). :class:`SentenceStream` only decides *when* a sentence is
complete: a sentence is released once text of the next sentence has arrived, so the
text still held at the end of the stream is always the last sentence. Short sentences
(under ``min_chars``) are merged with the next one, and every released piece fits one
packet (longer ones are cut with :func:`protocol.split_text`).
"""

from __future__ import annotations

from livekit import blingfire

from protocol import TEXT_BUDGET_BYTES, split_text

__all__ = ["SentenceStream"]


class SentenceStream:
    """Push answer text, get whole sentences back; ``flush`` returns the rest."""

    __slots__ = ("_buf", "_max_bytes", "_min_chars")

    def __init__(self, *, min_chars: int = 20, max_bytes: int = TEXT_BUDGET_BYTES) -> None:
        """``min_chars``: shorter sentences wait for the next; ``max_bytes``: size cap."""
        self._buf = ""
        self._min_chars = min_chars
        self._max_bytes = max_bytes

    def push(self, text: str) -> list[str]:
        """Add answer text; return the sentences it completes (maybe none)."""
        self._buf += text
        if not self._buf.strip():
            return []
        _, spans = blingfire.text_to_sentences_with_offsets(self._buf)
        out: list[str] = []
        start = 0
        # The last span is still open: it may grow or merge with what comes next.
        for _, end in spans[:-1]:
            piece = self._buf[start:end].strip()
            if len(piece) >= self._min_chars:
                out.extend(_pieces(piece, self._max_bytes))
                start = end
        if start:
            self._buf = self._buf[start:].lstrip()
        if len(self._buf.encode()) > 2 * self._max_bytes:
            # One endless sentence: release all but the last packet's worth.
            pieces = split_text(self._buf, self._max_bytes)
            out.extend(_pieces("".join(pieces[:-1]), self._max_bytes))
            self._buf = pieces[-1]
        return out

    def flush(self) -> list[str]:
        """End of the answer: the remaining text as the last sentence(s)."""
        rest, self._buf = self._buf, ""
        return _pieces(rest, self._max_bytes)


def _pieces(text: str, max_bytes: int) -> list[str]:
    """``text`` stripped and cut to packet-sized, non-empty pieces."""
    text = text.strip()
    if not text:
        return []
    return [p.strip() for p in split_text(text, max_bytes) if p.strip()]
