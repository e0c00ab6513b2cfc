"""The reasoning level comes from the join token, end to end: real livekit-server, the
real worker, the recorded LLM over HTTP.

One room, six participants that all ask for reasoning steps: tokens granting ``full``,
``summary``, ``encrypted`` and ``none``, one token with no grant, and one that may update
its own attributes and sets itself ``alicia.reasoning=full``. A phrase of the recorded
reasoning is the canary: it reaches, in plaintext, only the ``full`` participant; the
``summary`` one gets summaries and the encrypted step, the ``encrypted`` one only the
encrypted step (both open to exactly the step with the deployment's key).
"""

from __future__ import annotations

import base64
import contextlib

import pytest
from livekit import api, rtc

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.llm.summary import extractive_summary
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.protocol import AssistantSentence, Configuration, ReasoningStep, UserMessage, new_id
from bench.progress import SHAPE, pace
from tests.e2e.worker import running_worker
from tests.support.livekit_rooms import ProtocolClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def token(server: LiveKitServer, room: str, identity: str, level: str | None, *, own: bool) -> str:
    grants = api.VideoGrants(room_join=True, room=room, can_update_own_metadata=own)
    tok = api.AccessToken(server.api_key, server.api_secret).with_identity(identity)
    if level is not None:
        tok = tok.with_attributes({"alicia.reasoning": level})
    return tok.with_grants(grants).to_jwt()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", ["runner", "agent_session"])
async def test_each_participant_gets_exactly_the_level_its_token_grants(
    livekit_server: LiveKitServer, llm: RecordedLLM, source: str
) -> None:
    """The same rules whoever runs the turns: the worker's own runner (text rooms) or an
    AgentSession with the reasoning bridge (voice rooms, ``ALICIA_VOICE=offline``)."""
    room = new_id("conv")
    spec = llm.spec("deepseek_reasoning_content")
    who = {
        "full": ("full", False),
        "summary": ("summary", False),
        "encrypted": ("encrypted", False),
        "none": ("none", False),
        "no-grant": (None, False),
        "self-made": (None, True),
    }
    key = base64.b64encode(bytes(range(32))).decode()
    env = {"ALICIA_LOAD_THRESHOLD": "inf", "ALICIA_REASONING_KEYS": f"k1={key}"}
    if source == "agent_session":
        env["ALICIA_VOICE"] = "offline"
    async with (
        running_worker(livekit_server, llm.base_url, env=env) as w,
        contextlib.AsyncExitStack() as stack,
    ):
        clients: dict[str, ProtocolClient] = {}
        for name, (level, own) in who.items():
            r = rtc.Room()
            await r.connect(livekit_server.url, token(livekit_server, room, name, level, own=own))
            stack.push_async_callback(r.disconnect)
            clients[name] = ProtocolClient(r, room)
        # The participant allowed to change its attributes raises its own level.
        await clients["self-made"].room.local_participant.set_attributes(
            {"alicia.reasoning": "full"}
        )
        try:
            for c in clients.values():
                await c.wait_for_agent()
                await c.handshake()  # every one asks for reasoning_step_display
            question = UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user)
            llm.script("deepseek_reasoning_content")
            await clients["full"].send(question)
            # A voice room speaks its answer in real time before its last sentence is
            # final, and runs in a niced lane: its job process started 39 s late once
            # and its loop stood still 7 s (fO). Who gets what is tested, not how soon.
            within = 90.0 if source == "agent_session" else 30.0
            for c in clients.values():
                await c.wait_for(AssistantSentence, within=within, is_final=True)
        except BaseException as exc:
            got = "\n".join(f"{name}: {c.got()}" for name, c in clients.items())
            raise AssertionError(f"{exc!r}\n{got}\n{w.log()}") from exc
    canary = "classic trap"  # in the second sentence of the first step: never summarised
    assert canary in spec.steps[0]
    steps = {name: c.of(ReasoningStep) for name, c in clients.items()}
    n = len(spec.steps)
    got = {"full": n, "summary": n, "encrypted": n}
    assert {name: len(s) for name, s in steps.items()} == {name: got.get(name, 0) for name in who}
    assert [s.content for s in steps["full"]] == list(spec.steps)
    sealer = ReasoningSealer([("k1", bytes(range(32)))])
    for s, text in zip(steps["summary"], spec.steps, strict=True):
        assert s.content == extractive_summary(text)
        assert s.encrypted_value is not None and sealer.open(s.encrypted_value, room) == text
    for s, text in zip(steps["encrypted"], spec.steps, strict=True):
        assert s.content == "" and s.encrypted_value is not None
        assert sealer.open(s.encrypted_value, room) == text
    plaintext = {name for name, c in clients.items() if any(canary in repr(e.body) for e in c.box)}
    assert plaintext == {"full"}
    features = {name: c.of(Configuration)[0].features or [] for name, c in clients.items()}
    assert {name for name, f in features.items() if "reasoning_steps" in f} == {"full"}
    assert {name for name, f in features.items() if "reasoning_summary" in f} == {"summary"}
    encrypted = {name for name, f in features.items() if "reasoning_encrypted" in f}
    assert encrypted == {"summary", "encrypted"}
    answers = {
        name: " ".join(s.text for s in c.of(AssistantSentence)) for name, c in clients.items()
    }
    assert all(a.split() == spec.answer.split() for a in answers.values())  # answers: all


async def test_a_grant_lowered_by_the_server_mid_turn_holds_from_the_next_step(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """An operator lowers a participant's grant (the server API's UpdateParticipant) while
    the model reasons: the steps after it go only to those still entitled; the answer
    still reaches everyone."""
    room = new_id("conv")
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", Play(SHAPE, chunk_delay=pace(6.0)))
    env = {"ALICIA_LOAD_THRESHOLD": "inf"}
    async with (
        running_worker(livekit_server, llm.base_url, env=env) as w,
        contextlib.AsyncExitStack() as stack,
        api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk,
    ):
        clients: dict[str, ProtocolClient] = {}
        for name in ("lowered", "witness"):
            r = rtc.Room()
            await r.connect(
                livekit_server.url, token(livekit_server, room, name, "full", own=False)
            )
            stack.push_async_callback(r.disconnect)
            clients[name] = ProtocolClient(r, room)
        lowered, witness = clients["lowered"], clients["witness"]
        try:
            for c in clients.values():
                await c.wait_for_agent()
                await c.handshake()
            await lowered.send(
                UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user)
            )
            await lowered.wait_for(ReasoningStep, within=30)
            await lk.room.update_participant(
                api.UpdateParticipantRequest(
                    room=room, identity="lowered", attributes={"alicia.reasoning": "none"}
                )
            )
            seen_then = len(lowered.of(ReasoningStep))
            witness_then = len(witness.of(ReasoningStep))
            for c in clients.values():
                await c.wait_for(AssistantSentence, within=60, is_final=True)
        except BaseException as exc:
            raise AssertionError(f"{exc!r}\n{w.log()}") from exc
    assert len(witness.of(ReasoningStep)) - witness_then >= 2  # the model kept reasoning
    assert len(lowered.of(ReasoningStep)) - seen_then <= 1  # at most one on its way
    answers = [" ".join(s.text for s in c.of(AssistantSentence)) for c in clients.values()]
    assert all(a.split() == spec.answer.split() for a in answers)
