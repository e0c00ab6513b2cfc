"""A conversation's own data key: fetched (made on first use) as the conversation starts,
and fetched again in the background while the key store cannot give it; under zero data
retention, the steps stored sealed with it, and held for it while it is being fetched.

A key store that is slow or briefly away as a room starts must not leave the whole
conversation without its key, nor the turns before it came without their steps: under
zero data retention no step is stored unsealed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec

from alicia.protocol import ReasoningStep

from .retention import UNSEALED_LIMIT
from .sealing import DataKeys, ReasoningSealer, SealError

__all__ = ["KEY_TIMEOUT_S", "DataKeyLoader", "SealedSteps"]

logger = logging.getLogger("alicia.conversation")

KEY_TIMEOUT_S: Final = 5.0
"""How long one try may take."""
_RETRY_S: Final = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
"""Waits between tries after a failed one; the last repeats."""


class DataKeyLoader:
    """Fetches the data key of ``conversation_id`` from ``keys``; ``on_key`` gets it once."""

    def __init__(
        self, keys: DataKeys, conversation_id: str, on_key: Callable[[bytes], Awaitable[None]]
    ) -> None:
        """Nothing is fetched until :meth:`load`."""
        self._keys = keys
        self._id = conversation_id
        self._on_key = on_key
        self.done = False
        """The key was handed over, or it was erased: nothing more to fetch."""
        self.failures = 0
        """Tries that failed (the first is logged with its traceback, the rest in a line)."""

    async def load(self) -> bool:
        """One try; False if the key store failed (or took over :data:`KEY_TIMEOUT_S`)."""
        if self.done:
            return True
        try:
            async with asyncio.timeout(KEY_TIMEOUT_S):
                key = await self._keys.data_key(self._id)
        except SealError:  # the stored key cannot be opened: as good as erased
            logger.exception("data key unusable", extra={"conversation": self._id})
            key = None
        except Exception as exc:
            self.failures += 1
            extra = {"conversation": self._id, "failures": self.failures}
            if self.failures == 1:
                logger.exception("data key unavailable", extra=extra)
            else:
                logger.warning("data key still unavailable: %r", exc, extra=extra)
            return False
        self.done = True
        if key is None:
            logger.warning(
                "data key erased: reasoning is not stored", extra={"conversation": self._id}
            )
        else:
            await self._on_key(key)
        return True

    def retry(self, tasks: set[asyncio.Task[Any]]) -> None:
        """Keep trying in a background task added to ``tasks`` (its owner cancels it)."""

        async def again() -> None:
            for attempt in itertools.count():
                await asyncio.sleep(_RETRY_S[min(attempt, len(_RETRY_S) - 1)])
                if await self.load():
                    logger.info("data key loaded", extra={"conversation": self._id})
                    return

        task = asyncio.create_task(again(), name="alicia-data-key")
        tasks.add(task)
        task.add_done_callback(tasks.discard)


class SealedSteps:
    """Zero data retention: each step stored only sealed with the conversation's data key
    (``store`` takes the sealed copy and its meta). Steps made while the key is still being
    fetched wait for it in memory, never on disk (at most :data:`UNSEALED_LIMIT`)."""

    def __init__(
        self,
        conversation_id: str,
        store: Callable[[ReasoningStep, dict[str, Any] | None], Awaitable[None]],
    ) -> None:
        """Nothing is stored until the key comes (:meth:`release`)."""
        self._id = conversation_id
        self._store = store
        self._sealer: ReasoningSealer | None = None
        self._held: list[tuple[ReasoningStep, str, dict[str, Any] | None]] = []
        self.dropped = 0
        """Steps never stored: past :data:`UNSEALED_LIMIT` while the key was awaited."""

    async def put(
        self, step: ReasoningStep, text: str, meta: dict[str, Any] | None, *, awaited: bool
    ) -> None:
        """Store ``step`` (its content is ``text``) sealed; without the key, hold it if
        ``awaited`` (the key may still come), else it is not stored."""
        if self._sealer is not None:
            kept = self._sealer.seal(self._id, text, knd="step", ref=step.id)
            await self._store(msgspec.structs.replace(step, content="", encrypted_value=kept), meta)
        elif awaited and len(self._held) < UNSEALED_LIMIT:
            self._held.append((step, text, meta))
        elif awaited:
            self.dropped += 1
            if self.dropped == 1:
                logger.warning(
                    "data key still unavailable: later steps are not stored",
                    extra={"conversation": self._id, "held": UNSEALED_LIMIT},
                )

    async def release(self, sealer: ReasoningSealer | None) -> None:
        """The key came (``sealer`` seals with it): store the held steps, and the next."""
        self._sealer = sealer
        held, self._held = self._held, []
        for step, text, meta in held:
            await self.put(step, text, meta, awaited=False)
        if held:
            logger.info(
                "steps held for the data key stored",
                extra={"conversation": self._id, "steps": len(held)},
            )
