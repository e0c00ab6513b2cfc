"""The narrow interface between the worker and persistence.

The worker hands every envelope it sends, and every valid one it receives, to a
:class:`StepSink`. ``submit`` never blocks and never raises because of the database:
persistence must not slow or break the realtime path. :class:`NullSink` is the sink
when persistence is off (no ``DATABASE_URL``): nothing is written anywhere.
"""

from __future__ import annotations

from typing import Any, Final, Protocol, runtime_checkable

from alicia.protocol import Envelope

__all__ = [
    "META_FIRST_REASONING_MS",
    "META_USAGE",
    "STORAGE_ONLY_META",
    "NullSink",
    "StepSink",
]

META_USAGE: Final = "alicia.usage"
"""Meta key of a stored AssistantMessage (never sent): the turn's provider-reported token
counts, ``{"promptTokens", "completionTokens", "reasoningTokens"}`` summed over rounds."""
META_FIRST_REASONING_MS: Final = "alicia.firstReasoningMs"
"""Meta key of a stored AssistantMessage (never sent): milliseconds from the turn's first
LLM request to its first reasoning text."""
STORAGE_ONLY_META: Final = (META_USAGE, META_FIRST_REASONING_MS)
"""Meta keys that only the stored copy of an envelope carries."""


@runtime_checkable
class StepSink(Protocol):
    """Where protocol traffic goes to be stored."""

    def submit(self, env: Envelope[Any]) -> None:
        """Queue ``env`` for storage and return at once (direction = sign of stanzaId)."""
        ...

    async def last_step_index(self, previous_id: str) -> int:
        """The highest stored ``stepIndex`` of ``previous_id``'s chain (0 if none)."""
        ...

    async def aclose(self) -> None:
        """Flush what can be flushed (or spill it) and release resources."""
        ...


class NullSink:
    """Persistence off: accepts everything, stores nothing."""

    def submit(self, env: Envelope[Any]) -> None:
        """Drop ``env``."""

    async def last_step_index(self, previous_id: str) -> int:
        """Always 0: nothing is stored."""
        return 0

    async def aclose(self) -> None:
        """Nothing to release."""
