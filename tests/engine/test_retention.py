"""A long conversation's memory stops growing: every store kept per turn is bounded.

One conversation over the in-memory transport and the real recorded LLM (token-level
turns over HTTP) runs past :data:`RETAINED_TURNS`: the history, the remembered message
ids and the ``stepIndex`` chains stay at their caps, the ids of every exchange the model
still sees are refused when reused, and ids older than the window are forgotten.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import openai

from alicia.agent.engine.conversation import Conversation
from alicia.agent.engine.retention import HISTORY_LIMIT, KNOWN_IDS, RETAINED_TURNS, STEP_CHAINS
from alicia.harness.recorded_llm import TOKEN_TURN, Play, RecordedLLM
from alicia.protocol import AssistantSentence, ErrorMessage, StartAnswer, UserMessage, decode
from tests.engine.room import CONV, MODEL, handshake, settings_for, user_message
from tests.support.fakes import FakeClient, MemoryTransport, RecordingSink, Sent


def test_the_caps_cover_what_the_model_and_clients_can_refer_to() -> None:
    assert KNOWN_IDS >= 2 * HISTORY_LIMIT  # every exchange's user message and answer
    assert STEP_CHAINS >= HISTORY_LIMIT


async def test_a_long_conversation_keeps_bounded_state() -> None:
    finals = 0
    errors: list[ErrorMessage] = []
    answers: list[StartAnswer] = []
    changed = asyncio.Event()

    def on_sent(item: Sent) -> None:
        nonlocal finals
        body = decode(item.data).body
        if isinstance(body, AssistantSentence) and body.is_final:
            finals += 1
        elif isinstance(body, ErrorMessage):
            errors.append(body)
        elif isinstance(body, StartAnswer):
            answers.append(body)
        changed.set()

    async def until(done: Callable[[], bool]) -> None:
        async with asyncio.timeout(10):
            while not done():
                changed.clear()
                await changed.wait()

    async with RecordedLLM(max_recorded=1) as llm:
        llm.route_model(MODEL, Play(TOKEN_TURN, chunk_delay=0.0, paragraphs=1))
        settings = dataclasses.replace(settings_for(llm), rate_per_s=10_000.0, rate_burst=10_000)
        transport = MemoryTransport(handler=on_sent)
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        conversation = Conversation(
            conversation_id=CONV,
            options=settings.engine_options(),
            transport=transport,
            sink=RecordingSink(),
            llm=client,
        )
        task = asyncio.create_task(conversation.run())
        try:
            alice = FakeClient(transport, "alice", CONV)
            await handshake(alice)
            session = conversation.session
            sent: list[UserMessage] = []
            turns = RETAINED_TURNS + 30
            full = (0, 0)
            for n in range(1, turns + 1):
                msg = user_message(f"turn {n}")
                sent.append(msg)
                alice.send(msg)
                await until(lambda: finals >= len(sent))
                if n == RETAINED_TURNS:
                    full = (len(session.history), len(session.steps))
            assert full == (HISTORY_LIMIT, STEP_CHAINS)
            assert (len(session.history), len(session.steps)) == full
            assert [e.user_id for e in session.history] == [m.id for m in sent[-HISTORY_LIMIT:]]
            assert errors == []

            # The oldest exchange the model still sees: its id is refused when reused.
            oldest = sent[-HISTORY_LIMIT]
            alice.send(UserMessage(id=oldest.id, conversation_id=CONV, content="again"))
            await until(lambda: len(errors) == 1)
            assert errors[0].code == 204
            # An id from before the window is forgotten: it starts a turn again.
            forgotten = sent[0]
            alice.send(UserMessage(id=forgotten.id, conversation_id=CONV, content="once more"))
            await until(lambda: finals == turns + 1)
            assert answers[-1].previous_id == forgotten.id
            assert (len(session.history), len(session.steps)) == full
        finally:
            await transport.aclose()
            await asyncio.wait_for(task, 5)
            await client.close()
