"""A deterministic, extractive summary of one reasoning step (the fallback source).

:func:`extractive_summary` keeps the step's first sentence (cut at a word to at most
``max_chars``, with an ellipsis when anything was left out). It reads only the step it
is given, so a summary can never carry another step's (or another user's) text.
"""

from __future__ import annotations

from typing import Final

from .sentences import sentence_ends

__all__ = ["extractive_summary"]

_ELLIPSIS: Final = "…"


def extractive_summary(text: str, *, max_chars: int = 160) -> str:
    """The first sentence of ``text``, at most ``max_chars`` characters."""
    text = " ".join(text.split())
    if not text:
        return ""
    ends = sentence_ends(text + " .")  # a sentence followed by more text ends there
    first = text[: ends[0]].strip() if ends else text
    if len(first) > max_chars:
        cut = first[: max_chars - 1].rsplit(" ", 1)[0] or first[: max_chars - 1]
        return cut.rstrip(" ,;:") + _ELLIPSIS
    return first if len(first) == len(text) else first + " " + _ELLIPSIS
