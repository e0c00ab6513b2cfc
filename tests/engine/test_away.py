"""A turn whose asker left while it ran is named to it, once (.away)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alicia.agent.engine.away import KEPT, CutWhileAway


@dataclass
class _Request:
    requester: str
    user_id: str


@dataclass
class _Turn:
    request: _Request
    ended: bool = False


def turn(who: str, user_id: str, *, ended: bool = False) -> Any:
    return _Turn(_Request(who, user_id), ended)


async def test_the_running_turns_of_who_left_are_named_once_as_recoverable_503s() -> None:
    away = CutWhileAway()
    turns = [turn("alice", "msg_a"), turn("bob", "msg_b"), turn("alice", "msg_old", ended=True)]
    assert away.note("alice", turns) == ["msg_a"]
    assert away.note("alice", turns) == []  # left twice while the stop was under way: once
    assert away.note("bob", turns) == ["msg_b"]
    error = away.error("conv_1", "msg_a")
    assert (error.code, error.recoverable, error.originating_id) == (503, True, "msg_a")
    assert error.conversation_id == "conv_1"


def test_it_remembers_a_bounded_number_of_turns() -> None:
    away = CutWhileAway()
    assert len(away.note("p", [turn("p", f"msg_x{i}") for i in range(KEPT + 3)])) == KEPT
    for i in range(KEPT * KEPT + 1):
        away.note(f"p{i}", [turn(f"p{i}", f"msg_{i}")])
    assert away.note("p0", [turn("p0", "msg_0")]) == ["msg_0"]  # the oldest is forgotten
