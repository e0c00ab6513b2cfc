"""ControlStop, ControlVariation and bad or excess input, through the turn runner over an
in-memory transport and the recorded-stream LLM (real HTTP).

Every test drives :class:`alicia.agent.engine.conversation.Conversation` through
:class:`tests.support.fakes.MemoryTransport` (:func:`tests.engine.room.room`) with the
real ``openai`` client against ``alicia.harness.recorded_llm.RecordedLLM`` on 127.0.0.1,
and asserts what each client receives: types, order, ids, indexes, texts and errors.
"""

from __future__ import annotations

import asyncio
import time

import msgpack

from alicia.harness.recorded_llm import ENDLESS, Play, RecordedLLM
from alicia.protocol import (
    MAX_PACKET_BYTES,
    Acknowledgement,
    AssistantSentence,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    ErrorMessage,
    MessageType,
    ReasoningStep,
    StartAnswer,
    UnknownBody,
    UserMessage,
    encode,
    envelope,
    new_id,
)
from tests.engine.room import (
    CONV,
    SHOW,
    count,
    final_sentence,
    handshake,
    of,
    room,
    turn_of,
    user_message,
)

T = MessageType


async def test_control_stop_mid_reasoning_closes_the_turn_and_the_llm_stream(
    llm: RecordedLLM,
) -> None:
    async with room(llm, step_max_delay_s=0.2) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play(ENDLESS, chunk_delay=0.005))
        msg = user_message("think forever")
        alice.send(msg)
        await alice.wait_for(count(ReasoningStep, 2))
        stop_sid = alice.send(ControlStop(conversation_id=CONV))
        t0 = time.monotonic()
        box = await alice.wait_for(
            lambda box: any(e.type == T.ACKNOWLEDGEMENT for e in box), within=2
        )
        elapsed = time.monotonic() - t0
        steps_at_stop = len(of(box, ReasoningStep))
        await asyncio.sleep(0.3)
        after = alice.inbox()
        async with asyncio.timeout(2):
            while llm.disconnects < 1:
                await asyncio.sleep(0.01)

    # The promise: a stop ends an endless stream at once, not at the turn's end; 1.5 s
    # leaves a loaded 2-core machine its margin (the endless turn never ends by itself).
    assert elapsed < 1.5
    tail = turn_of(box)[-2:]
    assert [e.type for e in tail] == [T.START_ANSWER, T.ASSISTANT_SENTENCE]
    assert tail[1].body.is_final and tail[1].body.sequence == 1
    assert tail[1].body.previous_id == tail[0].body.id
    ack = box[-1]
    assert ack.type == T.ACKNOWLEDGEMENT and ack.body.acknowledged_stanza_id == stop_sid
    assert ack.body.acknowledged_message_id == tail[0].body.id
    # Nothing more after the end: the stream really stopped.
    assert len(of(after, ReasoningStep)) == steps_at_stop and len(after) == len(box)


async def test_control_stop_mid_answer_keeps_sent_text_and_ends_with_a_final_chunk(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("vllm_reasoning")
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play("vllm_reasoning", chunk_delay=0.02))
        alice.send(user_message(spec.user))
        await alice.wait_for(count(AssistantSentence, 1))
        alice.send(ControlStop(conversation_id=CONV, stop_type="all"))
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
    sentences: list[AssistantSentence] = of(box, AssistantSentence)
    assert sentences[-1].is_final and len(sentences) >= 2
    assert [s.sequence for s in sentences] == list(range(1, len(sentences) + 1))
    text = " ".join(s.text for s in sentences)
    assert spec.answer.startswith(text[:40]) and len(text) < len(spec.answer)


async def test_stop_with_nothing_running_is_acknowledged(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        sid = alice.send(ControlStop(conversation_id=CONV))
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
    assert box[-1].body.acknowledged_stanza_id == sid


async def test_stop_naming_a_queued_turn_drops_it_before_it_starts(llm: RecordedLLM) -> None:
    async with room(llm, queue_size=2) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play(ENDLESS, chunk_delay=0.01))
        first = user_message("one")
        alice.send(first)
        await alice.wait_for(count(ReasoningStep, 1))
        queued = user_message("two")
        alice.send(queued)  # waits behind the running turn
        sid = alice.send(ControlStop(conversation_id=CONV, target_id=queued.id))
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
        ack = box[-1].body
        alice.send(ControlStop(conversation_id=CONV))  # now end the running turn
        box = await alice.wait_for(count(Acknowledgement, 2))
        await asyncio.sleep(0.3)
        box = alice.inbox()
    assert ack.acknowledged_stanza_id == sid
    assert ack.notes == "queued turn dropped before it started"
    answered = {s.previous_id for s in of(box, StartAnswer)}
    assert answered == {first.id}  # the dropped turn never opened an answer
    asked = [m["content"] for req in llm.requests for m in req["messages"] if m["role"] == "user"]
    assert "two" not in asked


async def test_regenerate_answers_again_with_a_new_id_and_continues_step_indexes(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("vllm_reasoning")
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("vllm_reasoning", "vllm_reasoning")
        msg = user_message(spec.user)
        alice.send(msg)
        await alice.wait_for(final_sentence)
        sid = alice.send(
            ControlVariation(conversation_id=CONV, target_id=msg.id, mode="regenerate")
        )
        box = await alice.wait_for(
            lambda box: (
                len(of(box, StartAnswer)) == 2
                and box[-1].type == T.ASSISTANT_SENTENCE
                and box[-1].body.is_final
            )
        )
    acks = [e for e in box if e.type == T.ACKNOWLEDGEMENT]
    assert acks[0].body.acknowledged_stanza_id == sid
    first, second = of(box, StartAnswer)
    assert first.id != second.id and second.previous_id == msg.id
    steps: list[ReasoningStep] = of(box, ReasoningStep)
    assert [s.step_index for s in steps] == list(range(1, 9))
    assert {s.previous_id for s in steps} == {msg.id}
    # The regenerated request does not contain the superseded answer.
    assert [m["role"] for m in llm.requests[1]["messages"]] == ["system", "user"]


async def test_edit_then_new_user_message_replaces_the_old_turn(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("plain_no_reasoning", "plain_no_reasoning", "plain_no_reasoning")
        first = user_message("first question")
        alice.send(first)
        await alice.wait_for(final_sentence)
        second = user_message("second question")
        alice.send(second)
        await alice.wait_for(lambda box: len(of(box, StartAnswer)) == 2)
        await alice.wait_for(
            lambda box: sum(bool(s.is_final) for s in of(box, AssistantSentence)) == 2
        )
        alice.send(ControlVariation(conversation_id=CONV, target_id=second.id, mode="edit"))
        await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
        edited = user_message("second question, edited")
        alice.send(edited)
        box = await alice.wait_for(
            lambda box: sum(bool(s.is_final) for s in of(box, AssistantSentence)) == 3
        )
    assert box[-1].type == T.ASSISTANT_SENTENCE
    assert of(box, StartAnswer)[-1].previous_id == edited.id
    contents = [m["content"] for m in llm.requests[2]["messages"] if m["role"] == "user"]
    assert contents == ["first question", "second question, edited"]


async def test_edit_without_a_new_message_times_out_with_an_error(llm: RecordedLLM) -> None:
    async with room(llm, edit_timeout_s=0.2) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("plain_no_reasoning")
        msg = user_message("question")
        alice.send(msg)
        await alice.wait_for(final_sentence)
        alice.send(ControlVariation(conversation_id=CONV, target_id=msg.id, mode="edit"))
        box = await alice.wait_for(count(ErrorMessage, 1))
    assert of(box, ErrorMessage)[0].code == 202


async def test_variation_of_an_unknown_message_is_an_error(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        alice.send(ControlVariation(conversation_id=CONV, target_id="msg_nope", mode="regenerate"))
        box = await alice.wait_for(count(ErrorMessage, 1))
    error: ErrorMessage = of(box, ErrorMessage)[0]
    assert error.code == 202 and error.recoverable


async def test_bad_input_gets_an_error_to_the_sender_only_and_others_keep_their_turn(
    llm: RecordedLLM,
) -> None:
    async with room(llm, step_max_delay_s=30.0) as r:  # steps are paragraphs here
        alice, mallory = r.client("alice"), r.client("mallory")
        await handshake(alice)
        await handshake(mallory)
        llm.script(Play("vllm_reasoning", chunk_delay=0.005))
        alice.send(user_message("eggs"))
        mallory.send_raw(b"\xc1\xff not msgpack")  # undecodable
        mallory.send_raw(b"\x00" * (MAX_PACKET_BYTES + 1))  # oversize
        bad = {"stanzaId": 50, "conversationId": CONV, "type": 2, "body": {"id": 1, "content": 2}}
        mallory.send_raw(msgpack.packb(bad))  # wrong types
        mallory.send(
            Commentary(
                id="cmt_1", conversation_id=CONV, target_id=None, author_role="user", content="x"
            ),
            stanza_id=1,
        )  # stanza order
        mallory.send(UserMessage(id="msg_x", conversation_id="conv_other", content="x"))
        box = await mallory.wait_for(count(ErrorMessage, 5))
        a = await alice.wait_for(final_sentence)

    errors: list[ErrorMessage] = of(box, ErrorMessage)
    assert [e.code for e in errors] == [101, 101, 101, 202, 201]
    assert all(e.recoverable and e.conversation_id == CONV for e in errors)
    assert "over the" in errors[1].message
    assert of(a, ErrorMessage) == []
    assert len(of(a, ReasoningStep)) == 4 and final_sentence(a)


async def test_a_resent_configuration_is_answered_again_and_other_bytes_under_its_id_refused(
    llm: RecordedLLM,
) -> None:
    """Clients repeat an unanswered Configuration verbatim (same stanzaId) each second:
    a repeat that crossed the reply (received before it went out) is ignored, one
    received after it is answered again (the reply was lost), neither is an error. Other
    bytes under a stanzaId already seen still break the order: 202."""
    async with room(llm) as r:
        alice = r.client("alice")
        data = encode(envelope(Configuration(features=SHOW), stanza_id=1, conversation_id=CONV))
        alice.send_raw(data)
        alice.send_raw(data)  # at once: it crosses the reply
        await alice.wait_for(count(Configuration, 1))
        await asyncio.sleep(0.2)
        assert len(of(alice.inbox(), Configuration)) == 1
        alice.send_raw(data)  # after the reply went out: it was lost
        await alice.wait_for(count(Configuration, 2))
        alice.send(Configuration(features=[]), stanza_id=1)
        box = await alice.wait_for(count(ErrorMessage, 1))
        llm.script("plain_no_reasoning")
        alice.send(user_message("question"), stanza_id=2)
        box = await alice.wait_for(final_sentence)

    assert [e.type for e in box][:3] == [T.CONFIGURATION, T.CONFIGURATION, T.ERROR_MESSAGE]
    assert len(of(box, Configuration)) == 2
    assert [e.code for e in of(box, ErrorMessage)] == [202]
    assert [-e.stanza_id for e in box] == list(range(1, len(box) + 1))


async def test_flood_is_rate_limited_and_errors_are_limited_too(llm: RecordedLLM) -> None:
    async with room(llm, rate_per_s=5.0, rate_burst=10, error_rate_per_s=1.0, error_burst=3) as r:
        alice, mallory = r.client("alice"), r.client("mallory")
        await handshake(alice)
        for _ in range(300):
            mallory.send(
                Commentary(
                    id=new_id("cmt"),
                    conversation_id=CONV,
                    target_id=None,
                    author_role="user",
                    content="spam",
                )
            )
        llm.script("plain_no_reasoning")
        alice.send(user_message("still there?"))
        a = await alice.wait_for(final_sentence)
        await asyncio.sleep(0.1)
        box = mallory.inbox()
    errors: list[ErrorMessage] = of(box, ErrorMessage)
    assert 1 <= len(errors) <= 4
    assert {e.code for e in errors} == {504}
    assert sum(1 for e in box if e.type == T.ACKNOWLEDGEMENT) == 10  # the burst got through
    assert of(a, ErrorMessage) == []


async def test_a_flood_is_counted_as_it_arrived_however_slowly_it_is_read(
    llm: RecordedLLM,
) -> None:
    """25 packets that arrived at one instant, read one every 10 ms (a busy conversation's
    pace, faster than the 100/s refill would allow): 20 are still refused."""
    async with room(llm, rate_per_s=100.0, rate_burst=5, error_burst=100) as r:
        mallory = r.client("mallory")
        await handshake(mallory)
        await asyncio.sleep(0.1)  # the handshake's token back
        arrived = time.monotonic()
        for _ in range(25):
            body = Commentary(
                id=new_id("cmt"),
                conversation_id=CONV,
                target_id=None,
                author_role="user",
                content="spam",
            )
            data = encode(envelope(body, stanza_id=mallory.counter.next(), conversation_id=CONV))
            r.transport.deliver("mallory", data, mallory.peer, at=arrived)
            await asyncio.sleep(0.01)
        box = await mallory.wait_for(lambda box: len(of(box, ErrorMessage)) >= 20)
        await asyncio.sleep(0.1)
        box = mallory.inbox()
    assert [e.code for e in of(box, ErrorMessage)] == [504] * 20
    assert len(of(box, Acknowledgement)) == 5  # the burst, then nothing


async def test_a_full_queue_answers_504(llm: RecordedLLM) -> None:
    async with room(llm, queue_size=1) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play(ENDLESS, chunk_delay=0.01))
        first = user_message("one")
        alice.send(first)
        await alice.wait_for(count(ReasoningStep, 1))
        alice.send(user_message("two"))  # waits in the queue
        third = user_message("three")
        alice.send(third)  # queue full
        box = await alice.wait_for(count(ErrorMessage, 1))
        alice.send(ControlStop(conversation_id=CONV, target_id=first.id))
    error: ErrorMessage = of(box, ErrorMessage)[0]
    assert error.code == 504 and error.originating_id == third.id


async def test_unknown_types_are_skipped_and_commentary_is_acknowledged(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        raw = envelope(UnknownBody(99, {"x": 1}), stanza_id=2, conversation_id=CONV)
        alice.send_raw(encode(raw))
        alice.counter.next()
        sid = alice.send(
            Commentary(
                id="cmt_1",
                conversation_id=CONV,
                target_id=None,
                author_role="user",
                content="nice",
                rating=5,
            )
        )
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
    assert of(box, ErrorMessage) == []
    assert box[-1].body.acknowledged_stanza_id == sid
    assert box[-1].body.acknowledged_message_id == "cmt_1"
    # Nothing a client sends is stored but accepted user messages (and honoured stops).
    assert [e.type for e in r.sink.envelopes if e.stanza_id > 0] == []
