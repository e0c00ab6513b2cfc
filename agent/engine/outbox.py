"""Everything a conversation sends goes out here: numbered, stored, kept, transmitted.

:class:`Outbox` gives each envelope the next server ``stanzaId``, hands it to the
:class:`~alicia.agent.engine.sink.StepSink`, keeps the last ``keep`` envelopes as sent (bytes,
recipients, reasoning level) for replay on resume (PROTOCOL.md §4.9), and sends it over
the :class:`~alicia.agent.engine.transport.Transport`. One lock orders it all, so stanza ids
leave in the order they were given.

With failover on (:attr:`Outbox.store` set), every envelope is also logged as sent (its
bytes, recipients and level, in the stored copy's ``alicia.sent`` meta; under zero data
retention every rendition of a step only sealed with the conversation's data key) and
is stored before it is transmitted, so whatever a client received is in the database
for the agent that takes the room over: it numbers on after the last logged stanza and
replays from the log. The agent's :class:`Tenure` fences it: once storage refuses its
writes (:class:`~alicia.agent.engine.sink.Fenced`: another agent took the room over), or
its tenure cannot be confirmed after the process stalled, nothing more is sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import msgspec

from alicia.protocol import Body, Envelope, StanzaCounter, encode, envelope
from alicia.protocol.errors import EncodeError

from .participants import InvalidState, Visibility
from .sink import META_SENT, ConversationStore, Fenced, StepSink
from .transport import Transport, TransportError

__all__ = [
    "MAX_REPLAY_GAP",
    "SUMMARY_REMARK",
    "UNLOGGED_MAX",
    "Outbox",
    "ReplayBudget",
    "ReplayGap",
    "Tenure",
    "entitled",
]

logger = logging.getLogger("alicia.conversation")

MAX_REPLAY_GAP: Final = 1000
"""Server envelopes a resuming client may have missed at most."""
SUMMARY_REMARK: Final = "remark:summary"
"""The level an envelope made from the reasoning at the ``summary`` level is sent and
kept at (a spoken remark's Commentary): only participants granted ``summary`` or
``full`` get it, live or replayed."""
UNCONFIRMED_POLL_S: Final = 0.25
"""While the lease is not confirmed, how often sending is tried again."""
DURABLE_TIMEOUT_S: Final = 2.0
"""Longest wait for storage before an envelope leaves anyway (the database is down:
the conversation goes on; a takeover may then miss what was not stored)."""
DURABLE_PAUSE_S: Final = 5.0
"""After such a timeout, envelopes leave without waiting for this long (no stall per
envelope while the database is away)."""
UNLOGGED_MAX: Final = 100
"""Envelopes an agent sends at most before storage has them (the database slow or away);
then it holds the next until storage catches up. An agent that takes the conversation
over numbers on past the last logged stanza plus this many, so that nothing it sends
has a stanzaId its predecessor already gave an envelope that was never logged (the
client would drop it as a duplicate: a kill -9 test's cut-turn ErrorMessage was)."""


class Tenure(Protocol):
    """This agent's hold on the conversation (failover: its room lease)."""

    async def held(self) -> bool:
        """Whether the agent may still send (cheap unless it must be confirmed)."""
        ...

    @property
    def taken(self) -> bool:
        """Another agent holds the conversation (known for sure)."""
        ...

    def lose(self) -> None:
        """Storage refused the agent's writes: another agent holds the conversation."""
        ...


class ReplayGap(InvalidState):
    """A resuming client missed more than the kept envelopes (or over 1000): 202, fatal."""

    recoverable = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Kept:
    """One sent envelope as it went out, for replay on resume (§4.9)."""

    seq: int
    """|stanzaId|."""
    data: bytes
    to: tuple[str, ...] | None
    """Recipients; ``None`` = every client in the room."""
    level: str | None
    """The reasoning level of a ReasoningStep (replayed only to clients of that level),
    :data:`SUMMARY_REMARK`, or ``None`` for every other type."""


def entitled(level: str | None, step_level: Visibility | None, visibility: Visibility) -> bool:
    """An envelope sent at ``level`` may go to a participant who gets steps at
    ``step_level`` and is granted ``visibility``."""
    if level is None:
        return True
    if level == SUMMARY_REMARK:
        return visibility in ("full", "summary")
    return level == step_level


class Outbox:
    """The sending side of one conversation (see the module docstring)."""

    def __init__(
        self, conversation_id: str, *, transport: Transport, sink: StepSink, keep: int
    ) -> None:
        """Nothing is sent until :meth:`send`."""
        self.conversation_id = conversation_id
        self.lock = asyncio.Lock()
        """Held while an envelope is numbered and sent (and across a resume's replay)."""
        self.sink = sink
        self._transport = transport
        self._stanza = StanzaCounter("server")
        self._kept: deque[_Kept] = deque(maxlen=keep)
        self._evicted = 0
        """|stanzaId| of the newest envelope pushed out of ``_kept`` (0: none yet)."""
        self.store: ConversationStore | None = None
        """Failover: log every envelope as sent and store it before it leaves."""
        self._unstored_until = 0.0
        """Loop time until which envelopes leave without waiting for storage."""
        self.zdr = False
        """Zero data retention: every step rendition is logged only sealed (:attr:`seal_sent`)."""
        self.seal_sent: Callable[[bytes], str] | None = None
        """How a step rendition's logged bytes are sealed (no data key: it is not logged)."""
        self.tenure: Tenure | None = None
        """Failover: the agent's hold on the room, checked before every transmission."""
        self.fenced = False
        """Another agent holds the conversation: nothing more is stored or sent."""
        self._holding = False
        """Sending waits for the lease to be confirmed (logged once per wait)."""
        self.unlogged = 0
        """Envelopes sent since storage last had everything (at most :data:`UNLOGGED_MAX`)."""

    def continue_after(self, last: int) -> None:
        """Number from ``|last| + 1`` on (a conversation stored before; before any send).

        Everything up to ``last`` counts as no longer kept in memory: a resume that
        needs it is served from storage."""
        if self._stanza.last:
            raise RuntimeError("the outbox has numbered envelopes already")
        self._stanza = StanzaCounter("server", last=-abs(last))
        self._evicted = abs(last)

    @property
    def last(self) -> int:
        """|stanzaId| of the last envelope numbered (0: none yet)."""
        return abs(self._stanza.last)

    async def send(
        self,
        body: Body,
        to: Sequence[str],
        *,
        meta: dict[str, Any] | None = None,
        everyone: bool = False,
        store: bool = True,
        level: str | None = None,
        store_meta: dict[str, Any] | None = None,
    ) -> None:
        """Number, store, keep and send one envelope (to nobody if ``to`` is empty).

        ``everyone``: ``to`` is every client in the room; a resuming client gets it too
        (if :func:`entitled` to ``level``).
        ``store``: hand it to the sink (a step's other renditions are not stored again).
        ``level``: the reasoning level of a ReasoningStep rendition, or
        :data:`SUMMARY_REMARK`.
        ``store_meta``: meta for the stored copy only (analytics), never sent.
        """
        async with self.lock:
            await self.emit(
                body, to, meta, everyone=everyone, store=store, level=level, store_meta=store_meta
            )

    async def emit(
        self,
        body: Body,
        to: Sequence[str],
        meta: dict[str, Any] | None,
        *,
        everyone: bool = False,
        store: bool = True,
        level: str | None = None,
        store_meta: dict[str, Any] | None = None,
    ) -> None:
        """:meth:`send` with :attr:`lock` already held."""
        if self.fenced:
            return
        cid = self.conversation_id
        env = envelope(body, stanza_id=self._stanza.next(), conversation_id=cid, meta=meta)
        addressed = bool(to) or everyone
        data: bytes | None = None
        if addressed or self.store is not None:
            try:
                data = encode(env)
            except EncodeError:
                logger.exception("envelope not encodable", extra={"type": env.type})
        if self.store is not None and data is not None:
            self._log(env, data, None if everyone else tuple(to), level, store, store_meta)
            if not await self._stored():
                return
        elif store:
            if store_meta:
                stored_meta = {**(meta or {}), **store_meta}
                self.sink.submit(
                    envelope(body, stanza_id=env.stanza_id, conversation_id=cid, meta=stored_meta)
                )
            else:
                self.sink.submit(env)
        if not addressed or data is None:
            return
        kept = _Kept(-env.stanza_id, data, None if everyone else tuple(to), level)
        if len(self._kept) == self._kept.maxlen:
            self._evicted = self._kept[0].seq
        self._kept.append(kept)
        if to:
            await self.transmit(data, to, env.type)

    def _log(
        self,
        env: Envelope[Any],
        data: bytes,
        to: tuple[str, ...] | None,
        level: str | None,
        rows: bool,
        store_meta: dict[str, Any] | None,
    ) -> None:
        """Hand ``env`` to storage with how it was sent (the sent log)."""
        sent: dict[str, Any] = {
            "to": None if to is None else list(to),
            "level": level,
            "rows": rows,
        }
        body = env.body
        if self.zdr and level is not None:
            # Every rendition of a step under zero data retention: the step, its summary
            # (an extractive one is the step's first sentence) and its encrypted value
            # (sealed with the master key when the data key could not be loaded) are
            # logged only sealed with the data key, so an erase shreds them all.
            if self.seal_sent is None:
                return
            sent["sealed"] = self.seal_sent(data)
            if level == SUMMARY_REMARK:  # a remark made from a summary: sealed too
                body = msgspec.structs.replace(body, content="")
            else:
                body = msgspec.structs.replace(body, content="", encrypted_value=None)
        else:
            sent["data"] = data
        meta = {**(env.meta or {}), **(store_meta or {}), META_SENT: sent}
        self.sink.submit(
            envelope(body, stanza_id=env.stanza_id, conversation_id=env.conversation_id, meta=meta)
        )

    async def _stored(self) -> bool:
        """Wait (bounded) until storage holds everything handed to it so far; False once
        this agent is fenced (see :class:`Tenure`)."""
        assert self.store is not None
        loop = asyncio.get_running_loop()
        held = False
        while not self.fenced:
            if loop.time() >= self._unstored_until or self.unlogged >= UNLOGGED_MAX:
                try:
                    async with asyncio.timeout(DURABLE_TIMEOUT_S):
                        await self.store.durable()
                except Fenced:
                    self._fence()
                    break
                except Exception as exc:  # the database is away: the conversation goes on
                    self._unstored_until = loop.time() + DURABLE_PAUSE_S
                    if self.unlogged < UNLOGGED_MAX:
                        logger.warning("sent before it was stored", extra={"error": repr(exc)})
                else:
                    self.unlogged = 0
                    break
            if self.unlogged < UNLOGGED_MAX:
                self.unlogged += 1  # this one leaves before storage has it
                break
            if not held:  # a successor numbers past this many at most: wait for storage
                held = True
                logger.warning(
                    "storage is behind: holding messages until it has them",
                    extra={"conversation": self.conversation_id, "unlogged": self.unlogged},
                )
            await asyncio.sleep(UNCONFIRMED_POLL_S)
        if held and not self.fenced:
            logger.info("storage caught up", extra={"conversation": self.conversation_id})
        while not self.fenced and self.tenure is not None and not await self.tenure.held():
            if self.tenure.taken:
                self._fence()
                break
            # Not confirmed (renewals failing: the database is away from this agent, or
            # the process stalled): nothing leaves until a renewal confirms the lease.
            if not self._holding:
                self._holding = True
                logger.warning(
                    "lease not confirmed: holding messages until a renewal succeeds",
                    extra={"conversation": self.conversation_id},
                )
            await asyncio.sleep(UNCONFIRMED_POLL_S)
        if self._holding and not self.fenced:
            self._holding = False
            logger.info("lease confirmed again", extra={"conversation": self.conversation_id})
        return not self.fenced

    def _fence(self) -> None:
        if not self.fenced:
            logger.warning(
                "fenced: another agent holds the conversation; sending nothing more",
                extra={"conversation": self.conversation_id},
            )
        self.fenced = True
        if self.tenure is not None:
            self.tenure.lose()

    async def transmit(self, data: bytes, to: Sequence[str], what: object) -> None:
        """Send encoded bytes as they are (a failed send is logged, never raised)."""
        if self.fenced:
            return
        try:
            await self._transport.send(data, to=to)
        except TransportError as exc:
            logger.warning("send failed", extra={"type": what, "error": str(exc)})

    def covers(self, seen: int) -> bool:
        """Everything after ``seen`` is still kept in memory."""
        return self._evicted <= seen

    def replay(
        self,
        seen: int,
        identity: str,
        level: Visibility | None,
        *,
        visibility: Visibility,
        max_bytes: int,
        kept_only: bool = False,
    ) -> list[bytes]:
        """The kept envelopes after ``seen`` addressed to ``identity`` (steps only of its
        ``level``, remarks only if ``visibility`` is :func:`entitled` to them); raises
        :class:`ReplayGap` when they cannot all be replayed (``kept_only``: whatever is
        kept, no checks). Call with :attr:`lock` held."""
        last = self.last
        if kept_only:
            return [
                k.data
                for k in self._kept
                if k.seq > seen
                and (k.to is None or identity in k.to)
                and entitled(k.level, level, visibility)
            ]
        if seen > last:
            raise ReplayGap(f"server message {seen} was never sent here (last is {last})")
        if self._evicted > seen or last - seen > MAX_REPLAY_GAP:
            raise ReplayGap(
                f"cannot replay server messages after {seen}: {last - seen} missed, "
                f"only those after {self._evicted} are kept"
            )
        replay = [
            k.data
            for k in self._kept
            if k.seq > seen
            and (k.to is None or identity in k.to)
            and entitled(k.level, level, visibility)
        ]
        size = sum(len(d) for d in replay)
        if size > max_bytes:
            raise ReplayBudget(
                f"cannot replay server messages after {seen}: {size} bytes missed, "
                f"over the {max_bytes}-byte replay budget"
            )
        return replay


class ReplayBudget(ReplayGap):
    """The envelopes to replay are over the per-resume byte budget: 202, fatal."""
