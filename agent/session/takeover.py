"""An AgentSession that takes a conversation over (failover): what it starts from.

The bridge's :class:`~alicia.agent.engine.session.ProtocolSession` restores the conversation
from storage before its first packet (:mod:`alicia.agent.engine.takeover`): the numbering,
the finished exchanges (answers only, never reasoning, with who asked) and the cut turn
closed. :func:`continue_history` then gives those exchanges to the session's agent, so its
next answer follows the conversation the people in the room had with the agent before.
:class:`Lease` is what the bridge needs of the room's lease.
"""

from __future__ import annotations

import time
from typing import Any, Final, Protocol

from livekit.agents import AgentSession, llm

from alicia.agent.engine.outbox import Tenure
from alicia.agent.engine.session import ProtocolSession
from alicia.agent.storage.leases import Fence

__all__ = ["Lease", "continue_history"]

_LEADING: Final = ("system", "developer")


class Lease(Tenure, Protocol):
    """The room's lease held by this agent (failover): checked before every send, and the
    fence every storage write is conditional on."""

    @property
    def fence(self) -> Fence:
        """The epoch storage writes are conditional on."""
        ...


async def continue_history(agent_session: AgentSession[Any], session: ProtocolSession) -> None:
    """Once ``session`` has restored its conversation, put its finished exchanges into the
    agent's chat context, before anything said since (nothing when none were stored)."""
    await session.restored.wait()
    exchanges = list(session.history)
    if not exchanges:
        return
    agent = agent_session.current_agent
    ctx = agent.chat_ctx.copy()
    lead = [i for i in ctx.items if getattr(i, "role", None) in _LEADING]
    rest = [i for i in ctx.items if i not in lead]
    after = max((i.created_at for i in lead), default=0.0)
    before = min((i.created_at for i in rest), default=time.time())
    if before <= after:
        before = after + 1.0
    step = (before - after) / (2 * len(exchanges) + 1)
    at = after
    for exchange in exchanges:
        for said in (
            llm.ChatMessage(role="user", content=[exchange.user_text]),
            llm.ChatMessage(role="assistant", content=[exchange.answer_text]),
        ):
            at += step
            said.created_at = at
            ctx.insert(said)
    await agent.update_chat_ctx(ctx)
