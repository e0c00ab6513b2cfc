"""Resume after a reconnect (PROTOCOL.md §4.9): acknowledgement, Configuration, replay.

A client runs a turn, leaves, rejoins with the same identity and sends a Configuration
naming the conversation with ``lastSequenceSeen``; it must get an Acknowledgement of that
point, the Configuration, then exactly the later server envelopes, byte-identical and in
order (ReasoningSteps left out if it now hides reasoning), or ErrorMessage 202 when the
worker no longer keeps the whole gap.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    Acknowledgement,
    AssistantSentence,
    Configuration,
    ErrorCode,
    ErrorMessage,
    MessageType,
    ReasoningStep,
    decode,
    encode,
    envelope,
)
from tests.engine.room import CONV, SHOW, count, final_sentence, handshake, of, room, user_message
from tests.support.fakes import FakeClient, MemoryTransport


def sent_to(transport: MemoryTransport, identity: str) -> list[bytes]:
    """Raw bytes of every packet sent so far that reaches ``identity``, in order."""
    return [s.data for s in transport.sent if s.reaches(identity)]


def after(packets: list[bytes], seen: int, *, steps: bool = True) -> list[bytes]:
    """The packets whose |stanzaId| is above ``seen`` (ReasoningSteps only if ``steps``)."""
    out = []
    for data in packets:
        env = decode(data)
        if abs(env.stanza_id) > seen and (steps or env.type != MessageType.REASONING_STEP):
            out.append(data)
    return out


async def run_turn(client: FakeClient, llm: RecordedLLM) -> None:
    """Handshake (showing reasoning, streaming) and one full reasoning turn."""
    await handshake(client)
    llm.script("vllm_reasoning")
    client.send(user_message("eggs"))
    await client.wait_for(final_sentence)


async def rejoin(
    transport: MemoryTransport, client: FakeClient, seen: int, features: list[str] = SHOW
) -> int:
    """Leave, come back as the same identity, resume at ``seen``; the inbox length before."""
    before = len(sent_to(transport, client.identity))
    transport.leave(client.identity)
    client.send(Configuration(conversation_id=CONV, features=features, last_sequence_seen=seen))
    return before


async def settled(transport: MemoryTransport, identity: str, n: int) -> list[bytes]:
    """Wait for ``n`` packets to ``identity``, then a moment more: nothing else may follow."""
    await transport.wait_for(identity, lambda box: len(box) >= n)
    await asyncio.sleep(0.2)
    return sent_to(transport, identity)


async def test_resume_replays_later_envelopes_unchanged_after_ack_and_configuration(
    llm: RecordedLLM,
) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await run_turn(alice, llm)
        first = sent_to(r.transport, "alice")
        envs = [decode(d) for d in first]
        mid = [e for e in envs if isinstance(e.body, ReasoningStep)][1]  # a mid-turn step
        seen = abs(mid.stanza_id)
        expected = after(first, seen)
        kinds = {decode(d).type for d in expected}
        assert {MessageType.REASONING_STEP, MessageType.ASSISTANT_SENTENCE} <= kinds
        before = await rejoin(r.transport, alice, seen)
        box = await settled(r.transport, "alice", before + 2 + len(expected))

    new = box[before:]
    assert len(new) == 2 + len(expected)
    ack, conf = decode(new[0]), decode(new[1])
    assert isinstance(ack.body, Acknowledgement) and ack.body.acknowledged_stanza_id == seen
    assert isinstance(conf.body, Configuration) and conf.body.conversation_id == CONV
    assert ack.stanza_id == envs[-1].stanza_id - 1 and conf.stanza_id == ack.stanza_id - 1
    assert new[2:] == expected  # same bytes: original stanzaIds, bodies, ids, in order
    last = decode(new[-1]).body
    assert isinstance(last, AssistantSentence) and last.is_final


async def test_a_resume_repeated_verbatim_is_answered_again_with_its_whole_replay(
    llm: RecordedLLM,
) -> None:
    """Clients repeat an unanswered Configuration verbatim, each second. A resume's reply
    can be lost (after a node's death it went into a link not up yet): a repeat received
    after the answer went out gets the same answer again, the whole replay from what it
    asks. One that crossed the answer (received before it went out) is ignored, and so is
    one past the resume rate (a burst of 3), with no error that would end a client's wait."""
    async with room(llm) as r:
        alice = r.client("alice")
        await run_turn(alice, llm)
        first = sent_to(r.transport, "alice")
        seen = abs(decode(first[2]).stanza_id)
        expected = after(first, seen)
        r.transport.leave("alice")
        body = Configuration(conversation_id=CONV, features=SHOW, last_sequence_seen=seen)
        data = encode(envelope(body, stanza_id=alice.counter.next(), conversation_id=CONV))
        answers = []
        box: list[bytes] = []
        crossed: list[bytes] = []
        for i in range(3):
            asked = time.monotonic()
            sent = sent_to(r.transport, "alice")
            once = {decode(d).stanza_id: d for d in after(sent, seen)}  # replays were resent
            replay = [once[k] for k in sorted(once, reverse=True)]
            alice.send_raw(data)
            box = await settled(r.transport, "alice", len(sent) + 2 + len(replay))
            answers.append((box[len(sent) :], replay))
            if i == 0:  # a repeat sent before that answer went out: it crossed it
                r.transport.deliver("alice", data, alice.peer, at=asked)
                crossed = await settled(r.transport, "alice", len(box))
                assert crossed == box
        alice.send_raw(data)  # a fourth: over the rate, ignored
        after_all = await settled(r.transport, "alice", len(box))

    for new, replay in answers:
        assert len(new) == 2 + len(replay)
        ack, conf = decode(new[0]).body, decode(new[1]).body
        assert isinstance(ack, Acknowledgement) and ack.acknowledged_stanza_id == seen
        assert isinstance(conf, Configuration) and conf.conversation_id == CONV
        assert new[2:] == replay  # the whole replay each time (the turn, earlier answers)
        assert replay[: len(expected)] == expected
    assert crossed and len(crossed) < len(box)
    assert after_all == box
    assert r.conversation.refused["resume_rate"] == 1  # the fourth; the crossed one cost none


async def test_resume_leaves_out_steps_for_a_client_that_now_hides_reasoning(
    llm: RecordedLLM,
) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await run_turn(alice, llm)
        first = sent_to(r.transport, "alice")
        seen = abs(decode(first[0]).stanza_id)  # only the first Configuration was seen
        assert any(decode(d).type == MessageType.REASONING_STEP for d in after(first, seen))
        expected = after(first, seen, steps=False)
        before = await rejoin(r.transport, alice, seen, features=["streaming"])
        box = await settled(r.transport, "alice", before + 2 + len(expected))

    new = box[before:]
    assert [decode(d).type for d in new[:2]] == [
        MessageType.ACKNOWLEDGEMENT,
        MessageType.CONFIGURATION,
    ]
    assert new[2:] == expected
    assert all(decode(d).type != MessageType.REASONING_STEP for d in new)


async def test_resume_replays_the_whole_kept_window_but_not_one_more(llm: RecordedLLM) -> None:
    keep = 4
    async with room(llm, replay_keep=keep) as r:
        alice = r.client("alice")
        await run_turn(alice, llm)
        first = sent_to(r.transport, "alice")
        last = abs(decode(first[-1]).stanza_id)
        assert len(first) > keep + 2
        before = await rejoin(r.transport, alice, last - keep)  # oldest kept is seen + 1
        box = await settled(r.transport, "alice", before + 2 + keep)
        assert box[before + 2 :] == first[-keep:]
        # Now the ack and the Configuration are kept too: the window moved by two.
        assert abs(decode(box[before + 1]).stanza_id) == last + 2
        before = await rejoin(r.transport, alice, last - keep)
        box = await settled(r.transport, "alice", before + 1)

    new = [decode(d) for d in box[before:]]
    assert len(new) == 1
    error = new[0].body
    assert isinstance(error, ErrorMessage)
    assert error.code == ErrorCode.INVALID_STATE and error.recoverable is False
    assert of(new, Acknowledgement) == [] and of(new, Configuration) == []


async def test_no_replay_without_a_resume_point_and_201_for_another_conversation(
    llm: RecordedLLM,
) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await run_turn(alice, llm)
        before = await rejoin(r.transport, alice, 0)
        await alice.wait_for(count(Configuration, 2))
        box = await settled(r.transport, "alice", before + 1)
        assert [decode(d).type for d in box[before:]] == [MessageType.CONFIGURATION]
        other: dict[str, Any] = {"conversation_id": "conv_elsewhere", "last_sequence_seen": 3}
        alice.send(Configuration(**other))
        box = await settled(r.transport, "alice", before + 2)

    new = [decode(d).body for d in box[before + 1 :]]
    assert len(new) == 1 and isinstance(new[0], ErrorMessage)
    assert new[0].code == ErrorCode.CONVERSATION_NOT_FOUND


async def test_resume_past_anything_sent_here_is_202(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        before = await rejoin(r.transport, alice, 50)  # e.g. seen from a worker that restarted
        box = await settled(r.transport, "alice", before + 1)

    new = [decode(d).body for d in box[before:]]
    assert len(new) == 1 and isinstance(new[0], ErrorMessage)
    assert new[0].code == ErrorCode.INVALID_STATE and new[0].recoverable is False
