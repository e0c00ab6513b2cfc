"""One conversation served entirely by the engine: a protocol session and its turn runner.

:class:`Conversation` is the :class:`~alicia.agent.engine.session.ProtocolSession` (the Alicia
protocol with every client: handshake, authorisation, visibility, replay, storage)
fed by the engine's own :class:`~alicia.agent.engine.runner.TurnRunner` (a queue per
participant, :class:`~alicia.agent.engine.turn.Turn`, stop, variations). The LiveKit worker
serves text rooms with it; an AgentSession feeds the same protocol session through its
bridge instead (``agent/session/bridge.py``).

This module knows nothing of LiveKit; front ends hand it a
:class:`~alicia.agent.engine.transport.Transport`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import openai

from .options import EngineOptions
from .projection import META_CLOSED_AT, META_MODEL
from .runner import TurnRunner
from .sealing import DataKeys
from .session import ProtocolSession
from .sink import StepSink
from .tools import ToolBox
from .transport import Transport

__all__ = ["META_CLOSED_AT", "META_MODEL", "Conversation"]


class Conversation:
    """One room's conversation with every protocol client in it."""

    def __init__(
        self,
        *,
        conversation_id: str,
        options: EngineOptions,
        transport: Transport,
        sink: StepSink,
        llm: openai.AsyncOpenAI,
        tools: ToolBox | None = None,
        keys: DataKeys | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Wire the parts; nothing runs until :meth:`run`."""
        self.id = conversation_id
        self.session = ProtocolSession(
            conversation_id=conversation_id,
            options=options,
            transport=transport,
            sink=sink,
            keys=keys,
            llm=llm,
            clock=clock,
        )
        self.runner = TurnRunner(self.session, llm=llm, tools=tools)

    @property
    def refused(self) -> Counter[str]:
        """Incoming packets refused or dropped, by reason."""
        return self.session.refused

    @property
    def late_summaries(self) -> int:
        """Model summaries dropped because the answer had started."""
        return self.session.late_summaries

    async def run(self) -> None:
        """Serve the room until the transport ends, then stop every task."""
        await self.session.run()

    async def aclose(self) -> None:
        """Cancel running turns and timers and wait for them. Idempotent."""
        await self.session.aclose()
