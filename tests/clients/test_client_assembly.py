"""TurnAssembler: envelopes from the server fold into ordered, de-duplicated turns."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from alicia.client import (
    AnswerDone,
    AnswerStarted,
    ErrorReceived,
    OtherReceived,
    SentenceReceived,
    StepReceived,
    ToolRequested,
    ToolResulted,
    TurnAssembler,
)
from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Configuration,
    Envelope,
    ErrorMessage,
    ReasoningStep,
    Severity,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
    decode,
    envelope,
)

CONV = "conv_test"
_n = 0


def env(body: Any) -> Envelope[Any]:
    global _n
    _n += 1
    return envelope(body, stanza_id=-_n, conversation_id=CONV)


def user(mid: str = "msg_u1", text: str = "why?") -> UserMessage:
    return UserMessage(id=mid, conversation_id=CONV, content=text)


def step(i: int, *, prev: str = "msg_u1", sid: str | None = None, total: int | None = None) -> Any:
    return ReasoningStep(
        id=sid or f"rs_{prev}_{i}",
        conversation_id=CONV,
        previous_id=prev,
        content=f"thought {i}",
        step_index=i,
        total_steps=total,
    )


def sentence(n: int, *, answer: str = "msg_a1", final: bool = False) -> AssistantSentence:
    return AssistantSentence(
        previous_id=answer, conversation_id=CONV, sequence=n, text=f"S{n}.", is_final=final
    )


def test_full_streamed_turn_yields_events_in_order_and_the_answer() -> None:
    a = TurnAssembler()
    turn = a.start(user())
    bodies: list[Any] = [
        step(1, total=2),
        ToolUseRequest(
            id="toolreq_1",
            previous_id="msg_u1",
            tool_name="calc",
            parameters={"x": 1},
            execution="server",
        ),
        ToolUseResult(request_id="toolreq_1", success=True, result={"y": 2}),
        step(2, total=2),
        StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CONV),
        sentence(1),
        sentence(2, final=True),
    ]
    kinds = [type(e).__name__ for b in bodies for e in a.feed(env(b))]
    assert kinds == [
        "StepReceived",
        "ToolRequested",
        "ToolResulted",
        "StepReceived",
        "AnswerStarted",
        "SentenceReceived",
        "SentenceReceived",
        "AnswerDone",
    ]
    assert [s.step_index for s in turn.steps] == [1, 2]
    assert turn.total_steps == 2
    assert turn.answer == "S1. S2."
    assert turn.finished and turn.answer_id == "msg_a1"
    assert turn.tool_requests[0].tool_name == "calc"
    assert turn.tool_results[0].result == {"y": 2}


def test_steps_are_ordered_by_index_and_deduplicated_by_id() -> None:
    a = TurnAssembler()
    turn = a.start(user())
    events = []
    for b in (step(3), step(1), step(2), step(1), step(3)):
        events += a.feed(env(b))
    assert [s.step_index for s in turn.steps] == [1, 2, 3]
    assert len(events) == 3  # the two duplicates produce nothing


def test_steps_linked_to_the_answer_id_alias_land_in_the_same_turn() -> None:
    a = TurnAssembler()
    turn = a.start(user())
    a.feed(env(StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CONV)))
    # Other implementations link steps by messageId = the assistant message id, 0-based.
    wire = msgpack.packb(
        {
            "stanzaId": -999,
            "conversationId": CONV,
            "type": 5,
            "body": {
                "id": "rs_alias",
                "conversationId": CONV,
                "messageId": "msg_a1",
                "content": "aliased",
                "sequence": 0,
            },
        },
        use_bin_type=True,
    )
    (ev,) = a.feed(decode(wire))
    assert isinstance(ev, StepReceived) and ev.turn is turn
    assert turn.steps[0].step_index == 1 and turn.steps[0].content == "aliased"


def test_hidden_reasoning_keeps_steps_but_marks_them_not_shown() -> None:
    a = TurnAssembler(show_reasoning=False)
    turn = a.start(user())
    (ev,) = a.feed(env(step(1)))
    assert isinstance(ev, StepReceived) and not ev.shown
    assert turn.hidden_steps == 1 and len(turn.steps) == 1
    a.show_reasoning = True
    (ev,) = a.feed(env(step(2)))
    assert isinstance(ev, StepReceived) and ev.shown
    assert turn.hidden_steps == 1


def test_sentences_out_of_order_are_sorted_and_repeats_dropped() -> None:
    a = TurnAssembler()
    turn = a.start(user())
    a.feed(env(StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CONV)))
    a.feed(env(sentence(2)))
    a.feed(env(sentence(1)))
    assert a.feed(env(sentence(1))) == []
    events = a.feed(env(sentence(3, final=True)))
    assert [type(e) for e in events] == [SentenceReceived, AnswerDone]
    assert turn.answer == "S1. S2. S3."


def test_non_streamed_answer_finishes_the_turn() -> None:
    a = TurnAssembler()
    turn = a.start(user())
    msg = AssistantMessage(id="msg_a1", previous_id="msg_u1", conversation_id=CONV, content="42")
    (ev,) = a.feed(env(msg))
    assert isinstance(ev, AnswerDone)
    assert turn.answer == "42" and turn.finished


def test_error_ends_the_turn_it_names_and_no_other() -> None:
    a = TurnAssembler()
    t1 = a.start(user("msg_u1"))
    t2 = a.start(user("msg_u2"))
    err = ErrorMessage(
        id="err_1",
        conversation_id=CONV,
        code=501,
        message="boom",
        severity=Severity.ERROR,
        recoverable=True,
        originating_id="msg_u1",
    )
    events = a.feed(env(err))
    assert [type(e) for e in events] == [ErrorReceived, AnswerDone]
    assert t1.finished and t1.error is not None and not t2.finished
    err2 = ErrorMessage(
        id="err_2",
        conversation_id=CONV,
        code=503,
        message="busy",
        severity=Severity.WARNING,
        recoverable=True,
    )
    events = a.feed(env(err2))
    assert [type(e) for e in events] == [ErrorReceived]
    assert isinstance(events[0], ErrorReceived) and events[0].turn is None
    assert not t2.finished  # an error naming no turn ends none ("latest open" is forgeable)


def test_error_with_no_turn_is_reported_without_one() -> None:
    a = TurnAssembler()
    err = ErrorMessage(
        id="e",
        conversation_id=CONV,
        code=201,
        message="nope",
        severity=Severity.ERROR,
        recoverable=False,
    )
    (ev,) = a.feed(env(err))
    assert isinstance(ev, ErrorReceived) and ev.turn is None


def test_unrelated_envelopes_pass_through_as_other() -> None:
    a = TurnAssembler()
    a.start(user())
    ack = Acknowledgement(conversation_id=CONV, acknowledged_stanza_id=1)
    (ev,) = a.feed(env(ack))
    assert isinstance(ev, OtherReceived)
    (cfg,) = a.feed(env(Configuration(conversation_id=CONV, features=["streaming"])))
    assert cfg.config.features == ["streaming"]  # type: ignore[union-attr]
    orphan_result = ToolUseResult(request_id="toolreq_unknown", success=True)
    assert isinstance(a.feed(env(orphan_result))[0], OtherReceived)
    stray = AssistantSentence(
        id="sent_x", previous_id="msg_nothing", conversation_id=CONV, sequence=1, text="x"
    )
    assert isinstance(a.feed(env(stray))[0], OtherReceived)


def test_each_users_turn_gets_its_own_answer_never_the_latest_open_one() -> None:
    """Another user's answer in the room opens that user's turn; it never fills ours."""
    a = TurnAssembler()
    mine = a.start(user("msg_mine"))
    theirs_start = StartAnswer(
        id="msg_their_answer", previous_id="msg_theirs", conversation_id=CONV
    )
    (ev,) = a.feed(env(theirs_start))
    assert isinstance(ev, AnswerStarted) and not ev.turn.own
    theirs = ev.turn
    for seq, text in ((1, "Their answer."), (2, "Done.")):
        a.feed(
            env(
                AssistantSentence(
                    id=f"sent_t{seq}",
                    previous_id="msg_their_answer",
                    conversation_id=CONV,
                    sequence=seq,
                    text=text,
                    is_final=True if seq == 2 else None,
                )
            )
        )
    assert theirs.answer == "Their answer. Done." and theirs.finished
    assert mine.answer == "" and not mine.finished and mine.own
    assert [t.user_message_id for t in a.turns] == ["msg_mine", "msg_theirs"]


def test_tool_result_finds_its_request_turn() -> None:
    a = TurnAssembler()
    t1 = a.start(user("msg_u1"))
    req = ToolUseRequest(
        id="toolreq_9", previous_id="msg_u1", tool_name="t", parameters={}, execution="server"
    )
    (ev,) = a.feed(env(req))
    assert isinstance(ev, ToolRequested)
    a.start(user("msg_u2"))
    (ev2,) = a.feed(env(ToolUseResult(request_id="toolreq_9", success=False, error_code="x")))
    assert isinstance(ev2, ToolResulted) and ev2.turn is t1


def test_turns_are_bounded() -> None:
    a = TurnAssembler(max_turns=2)
    for i in range(5):
        a.start(user(f"msg_{i}"))
    assert [t.user_message_id for t in a.turns] == ["msg_3", "msg_4"]
    assert a.turn("msg_0") is None
    with pytest.raises(ValueError):
        TurnAssembler(max_turns=0)


def test_answer_started_event_carries_the_start() -> None:
    a = TurnAssembler()
    a.start(user())
    (ev,) = a.feed(env(StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CONV)))
    assert isinstance(ev, AnswerStarted) and ev.start.id == "msg_a1"
