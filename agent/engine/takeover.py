"""Failover: an agent takes a conversation over from storage, and replays from it.

With failover on, every envelope an agent sends is stored (and logged as sent) before it
leaves (:mod:`.outbox`). So when a worker dies, the agent that takes its room over finds
in storage everything any client received:

* :func:`restore` (before the first packet): the numbering goes on after the last
  logged stanza; the finished exchanges come back as history (answers only, with who
  asked, so the one authorisation rule still holds); a turn the previous agent did not
  finish is closed — its streamed answer gets its final (empty) sentence, or a partial
  AssistantMessage if it never began, it is stored as partial, and every client gets a
  recoverable ErrorMessage (503) naming the user message, so it can regenerate it;
* :func:`replay_stored`: a client that resumes beyond what the agent keeps in memory
  (a takeover, or more than ``ALICIA_REPLAY_KEEP`` envelopes missed) is replayed from the
  log, under the same rules and byte budget as the in-memory replay.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Final, Protocol

from alicia.protocol import (
    AssistantMessage,
    AssistantSentence,
    ErrorMessage,
    decode,
    error_body,
    new_id,
)
from alicia.protocol import ids as id_prefix

from .outbox import MAX_REPLAY_GAP, UNLOGGED_MAX, Outbox, ReplayBudget, ReplayGap, entitled
from .participants import Participant, TurnCut
from .sealing import ReasoningSealer
from .sink import ConversationStore, StoredConversation, StoredTurn
from .turn import Exchange

__all__ = ["TakeoverHost", "open_sealed", "replay_stored", "restore", "seal_for"]

logger = logging.getLogger("alicia.conversation")

RESTORE_WITHIN_S: Final = 10.0
"""How long a takeover tries to read the stored conversation before it serves without it
(the worst case is unchanged: one read used to wait as long)."""
ANNOUNCED_WITHIN_S: Final = 2.0
"""How long a takeover reads the end of the sent log for an earlier agent's notice that
the turn was cut."""
_CLOSE_ENVELOPES: Final = 8
"""Logged envelopes read back for that notice (an interrupted close logs at most three)."""


class TakeoverHost(Protocol):
    """What a takeover and a stored replay need of their conversation (the port
    :class:`~alicia.agent.engine.session.ProtocolSession` implements)."""

    @property
    def id(self) -> str:
        """The conversation id."""

    @property
    def outbox(self) -> Outbox:
        """Where envelopes leave (and its store)."""

    @property
    def history(self) -> list[Exchange]:
        """Finished exchanges, oldest first."""

    @property
    def data_sealer(self) -> ReasoningSealer | None:
        """Seals with the conversation's own data key."""

    def remember(self, message_id: str) -> None:
        """Note ``message_id`` as used."""


def seal_for(session: TakeoverHost) -> None:
    """Let the session's outbox log plaintext reasoning sealed with the data key (ZDR)."""
    sealer, cid = session.data_sealer, session.id
    if sealer is not None:
        session.outbox.seal_sent = lambda data: sealer.seal(cid, base64.b64encode(data).decode())


def open_sealed(session: TakeoverHost, value: str) -> bytes:
    """The bytes :func:`seal_for`'s sealer sealed (raises if they cannot be opened)."""
    if session.data_sealer is None:
        raise ValueError("no data key to open a sealed record with")
    return base64.b64decode(session.data_sealer.open(value, session.id))


async def restore(session: TakeoverHost) -> None:
    """Take the conversation over from storage, once, before any packet (failover only)."""
    store = session.outbox.store
    if store is None:
        return
    stored = await _load(store, session.id)
    if stored is None:
        return
    # Past what the last agent may have sent before storage had it (UNLOGGED_MAX).
    session.outbox.continue_after(stored.last_stanza + UNLOGGED_MAX)
    cut: StoredTurn | None = None
    for turn in stored.turns:
        session.remember(turn.user_id)
        if turn.answer_id is not None:
            session.remember(turn.answer_id)
        if turn.state in ("complete", "failed") and turn.answer_id is not None:
            exchange = Exchange(
                turn.user_id, turn.user_text, turn.answer_id, turn.answer_text, turn.requester or ""
            )
            session.history.append(exchange)
        elif turn is stored.turns[-1]:
            cut = turn
    if cut is not None:
        await _close_cut(session, cut, stored.last_stanza)
    if stored.last_stanza or stored.turns:
        logger.info(
            "conversation restored",
            extra={
                "conversation": session.id,
                "stanza": stored.last_stanza,
                "exchanges": len(session.history),
                "cut": cut is not None,
            },
        )


async def _load(store: ConversationStore, conversation_id: str) -> StoredConversation | None:
    """The stored conversation, read again after a failure (a connection the server
    ended, a busy machine) until :data:`RESTORE_WITHIN_S`; None if it cannot be read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RESTORE_WITHIN_S
    pause = 0.25
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                return await store.load_conversation(conversation_id, limit=200)
        except Exception as exc:
            if loop.time() + pause >= deadline:
                logger.error(
                    "conversation not restored: numbering starts again",
                    extra={"conversation": conversation_id, "error": repr(exc)},
                )
                return None
            logger.warning(
                "conversation not read yet: trying again",
                extra={"conversation": conversation_id, "error": repr(exc)},
            )
        await asyncio.sleep(pause)
        pause *= 2


async def _close_cut(session: TakeoverHost, turn: StoredTurn, last: int) -> None:
    """Close a turn the previous agent could not finish (see the module docstring).

    The turn's ErrorMessage is logged before the partial AssistantMessage that marks it
    closed (a later agent reads the mark as "closed"), and is not sent again when an
    earlier agent's is in the log already (``last``: the last logged stanza): an agent can
    be fenced between any two envelopes (two agents dispatched to a room at once, the
    database slow), and the next one then closes the turn again. Before, an agent fenced
    between the mark and the ErrorMessage left a turn closed that no client was told to
    regenerate."""
    out, cid = session.outbox, session.id
    announced = await _announced(session, turn, last)
    if turn.state == "streaming" and turn.answer_id is not None:
        answer_id = turn.answer_id
        if not announced:
            final = AssistantSentence(
                id=new_id(id_prefix.SENTENCE),
                previous_id=answer_id,
                conversation_id=cid,
                sequence=turn.sentences + 1,
                text="",
                is_final=True,
            )
            await out.send(final, [], everyone=True)
            await _announce_cut(session, turn)
        partial = AssistantMessage(
            id=answer_id,
            previous_id=turn.user_id,
            conversation_id=cid,
            content=turn.answer_text,
            state="partial",
        )
        await out.send(partial, [])  # stored only: the answer is marked partial
    else:
        if not announced:
            await _announce_cut(session, turn)
        answer_id = new_id(id_prefix.MESSAGE)
        session.remember(answer_id)
        partial = AssistantMessage(
            id=answer_id, previous_id=turn.user_id, conversation_id=cid, content="", state="partial"
        )
        await out.send(partial, [], everyone=True)
    exchange = Exchange(
        turn.user_id, turn.user_text, answer_id, turn.answer_text, turn.requester or ""
    )
    session.history.append(exchange)


async def _announced(session: TakeoverHost, turn: StoredTurn, last: int) -> bool:
    """An earlier agent's TurnCut ErrorMessage for ``turn`` is among the last logged
    envelopes (it was fenced before it stored the mark). Unknown (the log cannot be read
    in time): False, as a second notice is better than none."""
    store = session.outbox.store
    if store is None:
        return False
    try:
        async with asyncio.timeout(ANNOUNCED_WITHIN_S):
            records = await store.sent_after(
                session.id, max(0, last - _CLOSE_ENVELOPES), limit=_CLOSE_ENVELOPES
            )
    except Exception:
        return False
    for record in records:
        if record.data is None:  # sealed: a step rendition, never an ErrorMessage
            continue
        try:
            body = decode(record.data).body
        except Exception:
            continue
        if (
            isinstance(body, ErrorMessage)
            and body.originating_id == turn.user_id
            and body.code == TurnCut.code
        ):
            return True
    return False


async def _announce_cut(session: TakeoverHost, turn: StoredTurn) -> None:
    """Every client gets a recoverable ErrorMessage (503) naming the cut turn's message."""
    body = error_body(
        TurnCut("the agent was replaced while answering: regenerate for the whole answer"),
        id=new_id(id_prefix.ERROR),
        conversation_id=session.id,
        originating_id=turn.user_id,
    )
    await session.outbox.send(body, [], everyone=True)


async def replay_stored(
    session: TakeoverHost, seen: int, p: Participant, *, max_bytes: int
) -> list[bytes]:
    """The logged envelopes after ``seen`` for ``p`` (its level's steps only), then what
    the agent sent since and keeps in memory; :class:`ReplayGap` if they cannot all be
    replayed. Call with the outbox lock held."""
    out = session.outbox
    assert out.store is not None
    last = out.last
    if seen > last:
        raise ReplayGap(f"server message {seen} was never sent here (last is {last})")
    if last - seen > MAX_REPLAY_GAP:
        raise ReplayGap(f"cannot replay server messages after {seen}: {last - seen} missed")
    try:
        records = await out.store.sent_after(session.id, seen, limit=MAX_REPLAY_GAP + 1)
    except Exception as exc:
        raise ReplayGap(f"the stored messages after {seen} cannot be read now") from exc
    replay: list[bytes] = []
    size = 0
    newest = seen
    for r in records:
        newest = max(newest, r.stanza)
        if r.to is not None and p.identity not in r.to:
            continue
        if not entitled(r.level, p.step_level, p.visibility):
            continue
        data = r.data
        if data is None and r.sealed is not None:
            try:
                data = open_sealed(session, r.sealed)
            except Exception as exc:
                raise ReplayGap(f"stored message {r.stanza} cannot be opened") from exc
        if data is None:
            continue
        replay.append(data)
        size += len(data)
    # What was sent but not yet stored (the database was slow) is still in memory.
    memory = out.replay(
        newest,
        p.identity,
        p.step_level,
        visibility=p.visibility,
        max_bytes=max_bytes,
        kept_only=True,
    )
    size += sum(len(d) for d in memory)
    if size > max_bytes:
        raise ReplayBudget(
            f"cannot replay server messages after {seen}: {size} bytes missed, "
            f"over the {max_bytes}-byte replay budget"
        )
    return replay + memory
