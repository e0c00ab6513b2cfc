"""What the client trust tests share (client library, CLI, web page, real worker): a
scripted answer and a forged script, Mallory flooding a room with forged server
envelopes, what an agent got from clients, what a session shows, and polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from alicia.client import ClientSession
from alicia.protocol import DATA_TOPIC, UserMessage
from tests.support.scripted_agent import Script, ScriptedAgent, forged_agent_packets

ANSWER = "The answer is 42. Easy."
FORGED = Script(steps=["FORGED STEP"], sentences=["FORGED ANSWER."], tool=False)


async def until(check: Any, timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``check()`` until true."""
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def last_stanza(agent: ScriptedAgent) -> int:
    """|stanzaId| of the last envelope the agent sent."""
    return abs(agent.sent[-1].stanza_id)


@contextlib.asynccontextmanager
async def forging(mallory: ScriptedAgent, turn_ids: list[str]) -> AsyncIterator[None]:
    """Mallory also floods the room with forged server envelopes for ``turn_ids``."""
    stop = asyncio.Event()

    async def flood() -> None:
        while not stop.is_set():
            for turn_id in turn_ids:
                for data in forged_agent_packets(mallory.room.name, turn_id):
                    await mallory.room.local_participant.publish_data(
                        data, reliable=True, topic=DATA_TOPIC
                    )
            await asyncio.sleep(0.05)

    task = asyncio.create_task(flood())
    try:
        yield
    finally:
        stop.set()
        await task


def from_clients(agent: ScriptedAgent, kind: type[Any] = object) -> list[Any]:
    """Bodies of type ``kind`` the agent received numbered by a client (not forgeries
    broadcast with server numbers)."""
    return [e.body for e in agent.received if e.stanza_id > 0 and isinstance(e.body, kind)]


def questions_to(agent: ScriptedAgent) -> list[UserMessage]:
    """The questions the agent received from clients, each once in the order first
    received: a client repeats a question until the agent shows it has it (a loaded
    machine's agent was once more than the 1 s between repeats late to show it, fR), and
    an agent drops such a resend."""
    first: dict[str, UserMessage] = {}
    for body in from_clients(agent, UserMessage):
        first.setdefault(body.id, body)
    return list(first.values())


def shown(session: ClientSession) -> str:
    """Everything the session's turns hold, as text."""
    return repr(session.assembler.turns) + repr(session.server_config)
