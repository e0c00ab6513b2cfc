"""The engine side of LiveKit's conventions, without LiveKit: typed input and the observer port.

Typed input (:class:`~alicia.agent.engine.transport.Typed`, what the room transport makes
of ``lk.chat``) is a user turn under a UserMessage's rules, shown to protocol clients as a
final Transcription. An :class:`~alicia.agent.engine.observer.AnswerObserver` sees each
turn's opening, answer and end, and never its reasoning (the canary).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alicia.agent.engine.events import TurnStatus
from alicia.agent.engine.participants import TurnRequest
from alicia.agent.engine.transport import UNKNOWN_PEER, Peer, Typed
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    TEXT_BUDGET_BYTES,
    AssistantSentence,
    Configuration,
    ErrorMessage,
    ReasoningStep,
    StartAnswer,
    Transcription,
)
from tests.engine.room import SHOW, room
from tests.support.fakes import MemoryTransport

CANARY = "classic trap"  # in the recorded reasoning of deepseek_reasoning_content, step 1


@dataclass
class Seen:
    """An AnswerObserver that writes down what it is told."""

    calls: list[tuple[str, ...]] = field(default_factory=list)

    def turn_opened(self, answer_id: str, request: TurnRequest) -> None:
        self.calls.append(("opened", answer_id, request.user_id, request.requester))

    def answer_opened(self, answer_id: str) -> None:
        self.calls.append(("answer", answer_id))

    def answer_sentence(self, answer_id: str, text: str) -> None:
        self.calls.append(("sentence", answer_id, text))

    def turn_closed(self, answer_id: str, status: TurnStatus) -> None:
        self.calls.append(("closed", answer_id, status))


def typed(transport: MemoryTransport, sender: str, text: str, peer: Peer = UNKNOWN_PEER) -> None:
    """``sender`` types ``text`` (as the room transport hands on an ``lk.chat`` message)."""
    transport._queue.put_nowait(Typed(sender, text, peer))


async def test_typed_input_is_a_user_turn_and_the_observer_sees_only_the_answer(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    assert CANARY in spec.steps[0]
    seen = Seen()
    async with room(llm) as r:
        r.conversation.session.observers.append(seen)
        alice = r.client("alice")
        alice.send(Configuration(features=SHOW))
        await alice.wait_for(lambda b: any(isinstance(e.body, Configuration) for e in b))
        llm.script("deepseek_reasoning_content")
        typed(r.transport, "viewer", spec.user)
        box = await alice.wait_for(
            lambda b: any(isinstance(e.body, AssistantSentence) and e.body.is_final for e in b)
        )
        assert r.transport.inbox("viewer") == []  # not a protocol client: nothing for it

    transcript = next(e.body for e in box if isinstance(e.body, Transcription))
    start = next(e.body for e in box if isinstance(e.body, StartAnswer))
    assert (transcript.text, transcript.final) == (spec.user, True)
    assert start.previous_id == transcript.id
    assert any(CANARY in e.body.content for e in box if isinstance(e.body, ReasoningStep))
    assert seen.calls[0] == ("opened", start.id, transcript.id, "viewer")
    assert seen.calls[1] == ("answer", start.id)
    assert seen.calls[-1] == ("closed", start.id, "complete")
    sentences = [c[2] for c in seen.calls if c[0] == "sentence"]
    assert " ".join(sentences).split() == spec.answer.split()
    assert CANARY not in repr(seen.calls)
    stored = [env for env in r.sink.envelopes if isinstance(env.body, Transcription)]
    assert stored and stored[0].meta == {"alicia.from": "viewer"}


async def test_typed_input_from_an_agent_too_long_or_empty_starts_no_turn(
    llm: RecordedLLM,
) -> None:
    seen = Seen()
    async with room(llm) as r:
        r.conversation.session.observers.append(seen)
        typed(r.transport, "other-agent", "hello", Peer(kind="agent"))
        typed(r.transport, "viewer", "   ")
        typed(r.transport, "viewer", "x" * (TEXT_BUDGET_BYTES + 1))
        box = await r.transport.wait_for(
            "viewer", lambda b: any(isinstance(e.body, ErrorMessage) for e in b)
        )
    assert [e.body.code for e in box] == [101]
    assert r.conversation.refused["from_agent"] == 1
    assert seen.calls == [] and list(llm.requests) == []
