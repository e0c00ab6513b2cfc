"""ControlVariation (PROTOCOL.md §4.7): edit, regenerate, retry and continue.

:func:`on_variation` serves one authorised variation for a
:class:`~alicia.agent.engine.session.ProtocolSession` (``protocol/DECISIONS.md`` row 14):

* ``edit``: the next UserMessage (or ``newContent`` inline) replaces the target;
* ``regenerate`` and ``retry`` (the same): a new answer to the target, the old one superseded;
* ``continue``: the model is asked to continue the answer it left (stopped or partial).
  The request holds the conversation up to that answer, the answer last, then one user
  message, :data:`CONTINUE_PROMPT` (no assistant prefill: several providers refuse a
  trailing assistant message). What it writes is a new assistant message whose
  ``previousId`` (StartAnswer, AssistantMessage) is the answer it continues; in the history
  sent to the model later, both are one answer (:func:`~.projection.merge`).

``targetId`` may name the user message or one of its answers (other implementations send
the answer's id): the user message's latest answer is the one continued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final, Protocol

from alicia.protocol import Acknowledgement, ControlVariation, ProtocolError, new_id
from alicia.protocol import ids as id_prefix

from .options import EngineOptions
from .outbox import Outbox
from .participants import InvalidState, NotPermitted, Participant, TurnRequest
from .projection import TurnProjection
from .source import TurnSource
from .turn import Exchange

__all__ = ["CONTINUE_PROMPT", "VariationHost", "continuation", "on_variation", "user_text"]

logger = logging.getLogger("alicia.conversation")

CONTINUE_PROMPT: Final = (
    "Continue your previous answer from where it stopped, without repeating it."
)
"""The user message that asks the model to continue its last answer (``continue``)."""

_SETTLE_S: Final = 5.0
"""Longest wait for a stopped answer to be closed before its continuation starts."""


class VariationHost(Protocol):
    """What variations need of their conversation (the port
    :class:`~alicia.agent.engine.session.ProtocolSession` implements)."""

    @property
    def id(self) -> str:
        """The conversation id."""

    @property
    def options(self) -> EngineOptions:
        """The conversation's options."""

    @property
    def history(self) -> list[Exchange]:
        """Finished exchanges, oldest first."""

    @property
    def turns(self) -> Sequence[TurnProjection]:
        """Turns being served, oldest first."""

    @property
    def outbox(self) -> Outbox:
        """Where envelopes leave."""

    @property
    def source(self) -> TurnSource:
        """Who runs the turns."""

    def owner(self, message_id: str) -> str | None:
        """The identity whose message (or turn) ``message_id`` is."""

    def may_act_for(self, p: Participant, owner: str | None) -> bool:
        """The one authorisation rule."""

    def refuse(self, reason: str, sender: str, **extra: object) -> None:
        """Count (and log) a refusal."""

    def remember(self, message_id: str) -> None:
        """Note ``message_id`` as used."""

    async def error(
        self, p: Participant, exc: ProtocolError, originating_id: str | None = None
    ) -> None:
        """Answer ``p`` with an ErrorMessage."""


def _answers(s: VariationHost) -> list[tuple[str, str]]:
    """(answer id, user message id) of every known answer, oldest first."""
    out = [(ex.answer_id, ex.user_id) for ex in s.history]
    return out + [(t.answer_id, t.request.user_id) for t in s.turns]


def _resolve(s: VariationHost, target: str) -> tuple[str, str | None]:
    """The user message ``target`` names (itself, or the one an answer answers) and its
    latest answer (``target`` itself when it is an answer), if any."""
    answers = _answers(s)
    for answer_id, user_id in answers:
        if answer_id == target:
            return user_id, answer_id
    latest = [answer_id for answer_id, user_id in answers if user_id == target]
    return target, latest[-1] if latest else None


def user_text(s: VariationHost, user_id: str) -> str | None:
    """The text of the user message ``user_id`` (None: not in this conversation)."""
    for ex in reversed(s.history):
        if ex.user_id == user_id:
            return ex.user_text
    for turn in s.turns:
        if turn.request.user_id == user_id and turn.request.continues is None:
            return turn.request.text
    return None


async def on_variation(
    s: VariationHost, p: Participant, body: ControlVariation, stanza_id: int
) -> None:
    """Serve ``p``'s ControlVariation (refusals raise a ProtocolError for ``p``)."""
    target, answer_id = _resolve(s, body.target_id)
    text = user_text(s, target)
    if text is None:
        raise InvalidState(f"no user message {body.target_id!r} in this conversation")
    owner = s.owner(target)
    if not s.may_act_for(p, owner):
        s.refuse("not_permitted", p.identity, action=body.mode)
        raise NotPermitted(f"{body.target_id!r} is another participant's message")
    requester = owner or p.identity
    request: TurnRequest | None = None
    if body.mode == "continue":
        if answer_id is None:
            raise InvalidState(f"no answer to {body.target_id!r} to continue")
        request = TurnRequest(target, CONTINUE_PROMPT, requester, continues=answer_id)
    elif body.mode in ("regenerate", "retry"):
        request = TurnRequest(target, text, requester, replaces=target)
    elif body.new_content is not None:
        request = TurnRequest(new_id(id_prefix.MESSAGE), body.new_content, requester, target)
    for turn in s.turns:  # continue: the answer continued ends where it is
        if body.mode == "continue":
            if turn.answer_id == answer_id:
                turn.stop()
        elif turn.request.user_id == target:
            turn.stop()
    ack = Acknowledgement(
        conversation_id=s.id, acknowledged_stanza_id=stanza_id, acknowledged_message_id=target
    )
    await s.outbox.send(ack, [p.identity])
    if request is not None:
        try:
            await s.source.submit(p, request)
        except ProtocolError as exc:
            await s.error(p, exc)
        else:
            s.remember(request.user_id)
        return
    p.pending_edit = target
    if p.edit_timer is not None:
        p.edit_timer.cancel()
    p.edit_timer = asyncio.create_task(_edit_timeout(s, p, target))


async def _edit_timeout(s: VariationHost, p: Participant, target: str) -> None:
    await asyncio.sleep(s.options.edit_timeout_s)
    if p.pending_edit == target:
        p.pending_edit = None
        p.edit_timer = None
        await s.error(p, InvalidState(f"no UserMessage followed the edit of {target!r}"))


async def continuation(s: VariationHost, request: TurnRequest) -> tuple[list[Exchange], str] | None:
    """The history and user text of a ``continue`` turn: the conversation up to the answer
    it continues, then :data:`CONTINUE_PROMPT` (an empty answer is answered anew: the
    user's own text). Waits (bounded) while that answer is still being closed; None if it
    is gone (regenerated meanwhile)."""
    assert request.continues is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _SETTLE_S
    # A stop is immediate; the turn closes once its answer went out (no event to wait on).
    while any(t.answer_id == request.continues for t in s.turns) and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    for i, ex in enumerate(s.history):
        if ex.answer_id == request.continues:
            text = request.text if ex.answer_text.strip() else ex.user_text
            return s.history[: i + 1], text
    logger.info("nothing left to continue", extra={"answer": request.continues})
    return None
