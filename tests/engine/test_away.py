"""A turn whose asker left while it ran is named to it, once, when it resumes (.away)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alicia.agent.engine.away import KEPT, CutWhileAway
from alicia.protocol import ErrorMessage


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


async def told(away: CutWhileAway, identity: str) -> list[ErrorMessage]:
    sent: list[tuple[Any, list[str]]] = []

    async def emit(body: Any, to: list[str], meta: Any) -> None:
        sent.append((body, to))

    await away.tell(identity, "conv_1", emit)
    assert all(to == [identity] for _, to in sent)
    return [body for body, _ in sent]


async def test_the_running_turns_of_who_left_are_told_once_as_recoverable_503s() -> None:
    away = CutWhileAway()
    turns = [turn("alice", "msg_a"), turn("bob", "msg_b"), turn("alice", "msg_old", ended=True)]
    away.note("alice", turns)
    away.note("alice", turns)  # left twice while the stop was under way: one error still
    [error] = await told(away, "alice")
    assert (error.code, error.recoverable, error.originating_id) == (503, True, "msg_a")
    assert error.conversation_id == "conv_1"
    assert await told(away, "alice") == []  # once
    away.note("alice", turns)  # left again before the stopped turn had ended: not again
    assert await told(away, "alice") == []
    assert await told(away, "bob") == []  # bob never left


async def test_it_keeps_a_bounded_number_of_identities_and_turns() -> None:
    away = CutWhileAway()
    for i in range(KEPT + 3):
        away.note(f"p{i}", [turn(f"p{i}", f"msg_{i}")])
    away.note("p_last", [turn("p_last", f"msg_x{i}") for i in range(KEPT + 3)])
    assert await told(away, "p0") == []  # the oldest identities are forgotten
    assert len(await told(away, "p_last")) == KEPT
