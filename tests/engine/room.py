"""A running Conversation over the in-memory transport, and reading what clients receive.

:func:`room` runs :class:`alicia.agent.engine.conversation.Conversation` with
:class:`tests.support.fakes.MemoryTransport`, a :class:`~tests.support.fakes.RecordingSink`
and the real ``openai`` client on a recorded-stream server; :meth:`Room.client` adds a
:class:`~tests.support.fakes.FakeClient`. The rest reads a client's inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai

from alicia.agent.engine.conversation import Conversation
from alicia.agent.engine.sealing import DataKeys
from alicia.agent.engine.tools import default_tools
from alicia.agent.engine.transport import Peer
from alicia.agent.settings import Settings
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    AssistantSentence,
    Configuration,
    Envelope,
    MessageType,
    UserMessage,
    new_id,
)
from tests.support.fakes import DEBUG_PEER, FakeClient, MemoryTransport, RecordingSink

CONV = "conv_turns_test"
MODEL = "test-model"
SHOW = ["reasoning_step_display", "streaming"]

T = MessageType


def settings_for(llm: RecordedLLM, **changes: Any) -> Settings:
    base = Settings(
        livekit_url="ws://127.0.0.1:1",
        livekit_api_key="key",
        livekit_api_secret="secret",
        llm_base_url=llm.base_url,
        llm_model=MODEL,
    )
    return dataclasses.replace(base, **changes)


@dataclasses.dataclass
class Room:
    transport: MemoryTransport
    sink: RecordingSink
    conversation: Conversation

    def client(self, identity: str, peer: Peer = DEBUG_PEER) -> FakeClient:
        return FakeClient(self.transport, identity, CONV, peer)


@contextlib.asynccontextmanager
async def room(
    llm: RecordedLLM,
    sink: RecordingSink | None = None,
    keys: DataKeys | None = None,
    **changes: Any,
) -> AsyncIterator[Room]:
    """A running Conversation (with data keys from ``keys``); on exit the transport
    closes and the run task ends."""
    settings = settings_for(llm, **changes)
    transport = MemoryTransport()
    sink = sink or RecordingSink()
    client = openai.AsyncOpenAI(base_url=settings.llm_base_url, api_key="test", max_retries=0)
    conversation = Conversation(
        conversation_id=CONV,
        options=settings.engine_options(),
        transport=transport,
        sink=sink,
        llm=client,
        tools=default_tools(),
        keys=keys,
    )
    task = asyncio.create_task(conversation.run())
    try:
        yield Room(transport, sink, conversation)
    finally:
        await transport.aclose()
        await asyncio.wait_for(task, 5)
        await client.close()


def types(box: list[Envelope[Any]]) -> list[int]:
    return [e.type for e in box]


def of(box: list[Envelope[Any]], kind: type[Any]) -> list[Any]:
    return [e.body for e in box if isinstance(e.body, kind)]


def final_sentence(box: list[Envelope[Any]]) -> bool:
    return any(isinstance(e.body, AssistantSentence) and e.body.is_final for e in box)


def count(kind: type[Any], n: int) -> Callable[[list[Envelope[Any]]], bool]:
    return lambda box: len(of(box, kind)) >= n


async def handshake(client: FakeClient, features: list[str] | None = SHOW) -> None:
    client.send(Configuration(features=features))
    await client.wait_for(count(Configuration, 1))


def user_message(text: str) -> UserMessage:
    return UserMessage(id=new_id("msg"), conversation_id=CONV, content=text)


def turn_of(box: list[Envelope[Any]], after: int = 0) -> list[Envelope[Any]]:
    """Envelopes of the turn types (steps, tools, answer), from index ``after``."""
    kinds = {T.REASONING_STEP, T.TOOL_USE_REQUEST, T.TOOL_USE_RESULT, T.START_ANSWER}
    kinds |= {T.ASSISTANT_SENTENCE, T.ASSISTANT_MESSAGE}
    return [e for e in box[after:] if e.type in kinds]
