"""Prefixed NanoIDs for stored entities: ``<prefix>_<21 URL-safe random characters>``.

Ids are opaque: code must never parse a prefix to learn what an id is.
"""

from __future__ import annotations

from typing import Final

from nanoid import generate  # type: ignore[import-untyped]

__all__ = [
    "COMMENTARY",
    "CONVERSATION",
    "ERROR",
    "MEMORY",
    "MEMORY_TRACE",
    "MESSAGE",
    "REASONING_STEP",
    "SENTENCE",
    "TOOL_USE",
    "TOOL_USE_RESULT",
    "new_id",
]

CONVERSATION: Final = "conv"
"""Conversation / room (spec examples use ``conv_``)."""
MESSAGE: Final = "msg"
"""User message, final transcription, StartAnswer / AssistantMessage."""
SENTENCE: Final = "sent"
"""AssistantSentence chunk."""
REASONING_STEP: Final = "rs"
"""ReasoningStep."""
TOOL_USE: Final = "toolreq"
"""ToolUseRequest (its id is the result's ``requestId``)."""
TOOL_USE_RESULT: Final = "toolres"
"""ToolUseResult's own optional id."""
ERROR: Final = "err"
"""ErrorMessage."""
MEMORY_TRACE: Final = "memtr"
"""MemoryTrace record."""
MEMORY: Final = "mem"
"""A memory item."""
COMMENTARY: Final = "cmt"
"""Commentary."""

NANOID_SIZE: Final = 21


def new_id(prefix: str) -> str:
    """A new id ``<prefix>_<NanoID>`` (21 URL-safe characters, ~126 bits of randomness)."""
    return f"{prefix}_{generate(size=NANOID_SIZE)}"
