"""Persistence of protocol traffic: a bounded, batched, asynchronous writer.

The worker calls :func:`open_sink` once and then ``sink.submit(env)`` for every envelope
it sends and every valid one it receives. ``submit`` only appends to an in-memory queue
and returns; a background task (owned by the writer, stopped by :meth:`aclose`) turns
queued envelopes into rows and writes them in batches, one transaction per batch:

* every row is keyed by its protocol id and written with ``INSERT … ON CONFLICT``, so
  re-delivering an envelope (a replay, a retried batch) never duplicates anything;
* rows a record refers to (the conversation, the user message a step's ``previousId``
  names) are created first in the same transaction, as placeholders if needed, so a
  step is stored even when its message is not (yet) known; the real message fills the
  placeholder in when it arrives;
* on PostgreSQL, a batch of steps is one ``COPY`` inside a savepoint, or ``INSERT …
  SELECT FROM unnest(…) ON CONFLICT DO NOTHING`` when a row is already there (dialect).

When the database is unreachable the failed batch is kept on disk (a spill segment) and
retried with exponential backoff while new envelopes keep queueing in memory (bounded by
``max_memory_records`` / ``max_memory_bytes``); past that the oldest queued records move to
fsync'd spill segments (:mod:`alicia.agent.storage.spill`), written back oldest first.
:meth:`StorageWriter.aclose` flushes for up to ``close_timeout_s``, spills the rest (the
next writer on the spill root replays it first) and logs its counters. Records the
database refuses are isolated by bisecting the batch and kept in ``dead-letter/``.

Exception tree (SQLAlchemy/asyncpg/sqlite errors are mapped at this boundary)::

    Exception
    └── StorageError                 a database operation failed
        ├── StorageUnavailableError  cannot reach the database (any cause): retried
        └── StorageRejectedError     the database refused the data (constraint, bad value)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from alicia.agent.engine.sink import (
    Fenced,
    NullSink,
    SentRecord,
    StepSink,
    StoredConversation,
    StoredMessage,
)
from alicia.agent.telemetry.instruments import FENCED, watch_queue
from alicia.protocol import (
    Envelope,
    ReasoningStep,
    ToolUseRequest,
    Transcription,
    UnknownBody,
    UserMessage,
)

from .batch import write_batch
from .dialect import Dialect, StepConflictError
from .engine import IDLE_TXN_TIMEOUT_S, is_postgres, release_engine, shared_engine
from .errors import (
    StorageError,
    StorageRejectedError,
    StorageUnavailableError,
    _mapped,
)
from .history import load_conversation, sent_after, stored_message
from .leases import Fence
from .migrate import migrate, migrate_once
from .options import WriterOptions, WriterStats, default_spill_root
from .spill import Item, Segment, SpillDir
from .tables import reasoning_steps as STEPS

__all__ = [
    "StorageError",
    "StorageRejectedError",
    "StorageUnavailableError",
    "StorageWriter",
    "WriterOptions",
    "WriterStats",
    "default_spill_root",
    "migrate",
    "open_sink",
]

logger = logging.getLogger("alicia.storage")


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


def _weight(body: Any) -> int:
    text = getattr(body, "content", None) or getattr(body, "text", None)
    return 128 + (len(text) if isinstance(text, str) else 256)


class StorageWriter:
    """The :class:`~alicia.agent.engine.sink.StepSink` that stores traffic in PostgreSQL or SQLite.

    ``async with StorageWriter(url) as w`` or :func:`open_sink`; ``submit`` after close raises.
    """

    def __init__(self, url: str, options: WriterOptions | None = None) -> None:
        self.url = url
        self.options = opts = options or WriterOptions()
        self.stats = WriterStats()
        self._postgres = is_postgres(url)
        self._engine: AsyncEngine | None = None
        self._dialect = Dialect(self._postgres, opts.copy_min_rows)
        self._spill = SpillDir(opts.spill_dir or default_spill_root(url))
        self._state = _State.NEW
        self._mem: deque[Item] = deque()
        self._mem_bytes = 0
        self._seq = 0
        self._done_seq = 0
        self._inflight: list[Item] = []
        self._inflight_seg: Segment | None = None
        self._inflight_fence = opts.fence  # an adopted segment's: the fence it was queued under
        self._lock = asyncio.Lock()  # orders spilling against batch taking
        self._wake = asyncio.Event()
        self._spill_wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._closing = asyncio.Event()
        self._migrated = not opts.migrate
        self._turns: OrderedDict[str, str] = OrderedDict()
        self._known: OrderedDict[str, None] = OrderedDict()  # message ids stored by us
        self._steps: OrderedDict[str, int] = OrderedDict()
        self._write_atask: asyncio.Task[None] | None = None
        self._spill_atask: asyncio.Task[None] | None = None
        self._deadline: float | None = None
        self._durable: list[tuple[int, asyncio.Future[None]]] = []
        """(seq, future) of :meth:`durable` callers, resolved as batches are stored."""
        self._fenced = False
        """Another agent took the conversation over (``options.fence``): drop everything."""
        watch_queue("storage", self, lambda w: w.queued)

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> StorageWriter:
        """Adopt leftover spill segments, open the engine and start the background tasks."""
        if self._state is not _State.NEW:
            raise RuntimeError("StorageWriter can only be started once")
        adopted = await asyncio.to_thread(self._spill.open)
        if adopted:
            await asyncio.to_thread(self._index_segments, adopted)
            logger.info(
                "adopted spilled records",
                extra={"segments": len(adopted), "spill_dir": str(self._spill.root)},
            )
        self._engine = shared_engine(
            self.url,
            pool_size=self.options.pool_size,
            # Only a fenced writer's transaction holds a lock a takeover waits on.
            idle_txn_timeout_s=IDLE_TXN_TIMEOUT_S if self.options.fence else None,
        )
        self._state = _State.RUNNING
        self._write_atask = asyncio.create_task(self._write_loop(), name="alicia-storage-writer")
        self._spill_atask = asyncio.create_task(self._spill_loop(), name="alicia-storage-spill")
        return self

    async def __aenter__(self) -> StorageWriter:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Write what can be written within ``close_timeout_s``, spill the rest, stop."""
        if self._state in (_State.CLOSING, _State.CLOSED):
            return
        if self._state is _State.NEW:
            self._state = _State.CLOSED
            return
        self._state = _State.CLOSING
        self._deadline = time.monotonic() + self.options.close_timeout_s
        self._closing.set()
        self._wake.set()
        self._spill_wake.set()
        tasks = [t for t in (self._write_atask, self._spill_atask) if t is not None]
        try:
            await asyncio.wait_for(
                asyncio.gather(*tasks, return_exceptions=True),
                self.options.close_timeout_s + 5.0,
            )
        except TimeoutError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        left = list(self._inflight if self._inflight_seg is None else [])
        left.extend(self._mem)
        self._mem.clear()
        self._inflight = []
        try:
            if left:
                left.sort(key=lambda it: it.seq)
                for i in range(0, len(left), self.options.spill_chunk):
                    self._spill.write(
                        left[i : i + self.options.spill_chunk], fence=self.options.fence
                    )
                self.stats.spilled += len(left)
                logger.warning(
                    "records left in the spill file at close",
                    extra={"records": len(left), "spill_dir": str(self._spill.own)},
                )
        except OSError as exc:
            logger.error(
                "records lost: spill write failed at close",
                extra={"records": len(left), "error": str(exc)},
            )
        finally:
            self._spill.close()
            if self._engine is not None:
                await release_engine(self._engine)
            self._state = _State.CLOSED
            for _, future in self._durable:
                if not future.done():
                    future.set_exception(RuntimeError("StorageWriter closed"))
            self._durable = []
            logger.info("storage writer closed", extra=dataclasses.asdict(self.stats))

    # -- StepSink -----------------------------------------------------------------

    def submit(self, env: Envelope[Any]) -> None:
        """Queue ``env`` and return at once (never blocks, never raises for the database)."""
        if self._state is not _State.RUNNING:
            raise RuntimeError(f"StorageWriter is {self._state.value}")
        if self._fenced:
            return
        body = env.body
        kind = type(body)
        turn = None
        if kind is ReasoningStep:
            self._note_step(body.previous_id, body.step_index)
            self._note_turn(env.conversation_id, body.previous_id)
        elif kind is UserMessage or (kind is Transcription and body.final):
            self._note_turn(env.conversation_id, body.id)
        elif kind is ToolUseRequest and not body.previous_id:
            turn = self._turns.get(env.conversation_id)
        elif kind is UnknownBody:
            return
        self._seq += 1
        self._mem.append(Item(self._seq, time.time(), env, turn))
        self._mem_bytes += _weight(body)
        self.stats.submitted += 1
        self._wake.set()
        opts = self.options
        if len(self._mem) > opts.max_memory_records or self._mem_bytes > opts.max_memory_bytes:
            self._spill_wake.set()

    async def last_step_index(self, previous_id: str) -> int:
        """Highest ``stepIndex`` of the chain: stored, queued or spilled (0 if none).

        If the database does not answer within ``query_timeout_s`` the queued/spilled
        part alone is returned (logged); a later duplicate index supersedes, never loses.
        """
        local = self._steps.get(previous_id, 0)
        if self._engine is None:
            return local
        t = STEPS
        try:
            async with (
                asyncio.timeout(self.options.query_timeout_s),
                _mapped(),
                self._engine.connect() as conn,
            ):
                stored = await conn.scalar(
                    select(func.max(t.c.sequence_number)).where(
                        t.c.message_id == previous_id, t.c.deleted_at.is_(None)
                    )
                )
        except (StorageError, TimeoutError) as exc:
            logger.warning("step index query failed", extra={"error": str(exc)})
            return local
        return max(local, int(stored or 0))

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until everything submitted so far (and every adopted segment) is stored."""
        target = self._seq
        async with asyncio.timeout(timeout):
            while self._done_seq < target or any(
                s.dir_key != self._spill.own.name for s in self._spill.segments
            ):
                if self._state is not _State.RUNNING:
                    raise RuntimeError(f"StorageWriter is {self._state.value}")
                self._progress.clear()
                await self._progress.wait()

    async def durable(self) -> None:
        """Return once everything submitted so far is stored in the database (not only
        queued or spilled); with ``linger_s=0`` (failover) a batch goes out at once."""
        target = self._seq
        if self._fenced:
            raise Fenced("the conversation was taken over: nothing more is stored")
        if self._done_seq >= target:
            return
        if self._state is not _State.RUNNING:
            raise RuntimeError(f"StorageWriter is {self._state.value}")
        future = asyncio.get_running_loop().create_future()
        self._durable.append((target, future))
        self._wake.set()
        await future

    def _release_durable(self) -> None:
        done = self._done_seq
        waiting = []
        for target, future in self._durable:
            if target <= done:
                if not future.done():
                    future.set_result(None)
            elif not future.done():
                waiting.append((target, future))
        self._durable = waiting

    async def load_conversation(self, conversation_id: str, *, limit: int) -> StoredConversation:
        """The conversation's last logged server stanza and its last ``limit`` turns."""
        async with self._reading(self.options.query_timeout_s * 5) as conn:
            return await load_conversation(conn, conversation_id, limit=limit)

    async def sent_after(self, conversation_id: str, after: int, *, limit: int) -> list[SentRecord]:
        """Logged server envelopes with ``|stanzaId| > after``, in order."""
        async with self._reading(self.options.query_timeout_s * 5) as conn:
            return await sent_after(conn, conversation_id, after, limit=limit)

    async def index_ready(self) -> None:
        """Return once the schema is in place for look-ups (checked once per process)."""
        await self._ready_engine()

    async def stored_message(self, message_id: str) -> StoredMessage | None:
        """The stored message with ``message_id`` (None: the id is free)."""
        async with self._reading(self.options.query_timeout_s) as conn:
            return await stored_message(conn, message_id)

    @contextlib.asynccontextmanager
    async def _reading(self, timeout_s: float) -> AsyncIterator[AsyncConnection]:
        engine = await self._ready_engine()
        async with asyncio.timeout(timeout_s), _mapped(), engine.connect() as conn:
            # No transaction: the idle-transaction timeout must not end a busy process's read.
            yield await conn.execution_options(isolation_level="AUTOCOMMIT")

    async def _ready_engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("StorageWriter not started")
        if not self._migrated:
            await migrate_once(self._engine)
            self._migrated = True
        return self._engine

    @property
    def queued(self) -> int:
        """Records not yet stored: in memory, in flight and in spill segments."""
        spilled = sum(max(s.count, 1) for s in self._spill.segments)
        inflight = len(self._inflight) if self._inflight_seg is None else 0
        return len(self._mem) + inflight + spilled

    # -- bookkeeping -------------------------------------------------------------

    def _note_step(self, previous_id: str, index: int) -> None:
        steps = self._steps
        if steps.get(previous_id, 0) < index:
            steps[previous_id] = index
        steps.move_to_end(previous_id)
        if len(steps) > self.options.step_chains:
            steps.popitem(last=False)

    def _note_turn(self, conversation_id: str, message_id: str) -> None:
        turns = self._turns
        turns[conversation_id] = message_id
        turns.move_to_end(conversation_id)
        if len(turns) > 10_000:
            turns.popitem(last=False)

    def _index_segments(self, segments: Sequence[Segment]) -> None:
        for seg in segments:
            try:
                items = self._spill.read(seg).items
            except (OSError, msgspec.DecodeError, KeyError, ValueError):
                continue
            for it in items:
                body = it.env.body
                if isinstance(body, ReasoningStep):
                    self._note_step(body.previous_id, body.step_index)

    # -- background: spilling ---------------------------------------------------------

    async def _spill_loop(self) -> None:
        opts = self.options
        while True:
            await self._spill_wake.wait()
            self._spill_wake.clear()
            if self._closing.is_set():
                return
            while (
                len(self._mem) > opts.max_memory_records or self._mem_bytes > opts.max_memory_bytes
            ):
                async with self._lock:
                    n = min(opts.spill_chunk, len(self._mem))
                    chunk = [self._mem[i] for i in range(n)]
                    try:
                        await asyncio.to_thread(self._spill.write, chunk, fence=opts.fence)
                    except OSError as exc:
                        logger.error("spill write failed", extra={"error": str(exc)})
                        await asyncio.sleep(1.0)
                        continue
                    for _ in range(n):
                        self._mem_bytes -= _weight(self._mem.popleft().env.body)
                    self.stats.spilled += n
                logger.warning(
                    "database behind: records spilled to disk",
                    extra={"records": n, "spill_dir": str(self._spill.own)},
                )

    # -- background: writing ----------------------------------------------------------

    async def _next_batch(self) -> bool:
        """Fill ``_inflight`` (a spilled segment first, else memory); False when done."""
        opts = self.options
        while True:
            if self._out_of_time():
                return False
            async with self._lock:
                seg = self._spill.oldest()
                if seg is not None:
                    try:
                        items, fence = await asyncio.to_thread(self._spill.read, seg)
                    except (OSError, msgspec.DecodeError, KeyError, ValueError) as exc:
                        logger.error(
                            "unreadable spill segment moved aside", extra={"error": str(exc)}
                        )
                        self._spill.quarantine(seg)
                        continue
                    if seg.dir_key == self._spill.own.name:
                        fence = opts.fence  # ours: the fence as it is now
                    elif fence is not None:
                        fence = fence.for_adoption()
                    self._inflight, self._inflight_seg, self._inflight_fence = items, seg, fence
                    return True
                if self._mem:
                    n = min(opts.batch_size, len(self._mem))
                    batch = [self._mem.popleft() for _ in range(n)]
                    self._mem_bytes -= sum(_weight(it.env.body) for it in batch)
                    self._inflight, self._inflight_seg = batch, None
                    self._inflight_fence = opts.fence
                    return True
            if self._closing.is_set():
                return False
            self._wake.clear()
            await self._wake.wait()
            if len(self._mem) < opts.batch_size and not self._closing.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), opts.linger_s)

    async def _write_loop(self) -> None:
        while await self._next_batch():
            done = await self._write_resilient(self._inflight, self._inflight_fence)
            if not done:
                return  # closing with the database still down: aclose spills the rest
            if self._inflight_seg is not None:
                self._spill.remove(self._inflight_seg)
                self.stats.replayed += len(self._inflight)
                if self._inflight_seg.dir_key == self._spill.own.name:
                    self._done_seq = max(self._done_seq, self._inflight[-1].seq)
            else:
                self._done_seq = max(self._done_seq, self._inflight[-1].seq)
            self._inflight, self._inflight_seg = [], None
            self._progress.set()
            self._release_durable()

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    async def _write_resilient(self, items: list[Item], fence: Fence | None) -> bool:
        """Store ``items`` under ``fence``, retrying while the database is away; False if
        closing first.

        A batch the database refuses (or that hits a bug while being converted) is cut in
        halves until the offending records are alone; those go to ``dead-letter/``.
        """
        delay = self.options.retry_initial_s
        while True:
            try:
                await self._write(items, fence)
            except Fenced as exc:  # dropped: written by nobody
                if fence is self.options.fence:
                    self._fence_lost(exc)
                else:  # an adopted segment of an agent whose room was taken over
                    FENCED.add(1)
                    logger.warning(
                        "spilled records of a room taken over dropped",
                        extra={"records": len(items), "error": str(exc)},
                    )
                return True
            except (StorageRejectedError, StepConflictError) as exc:
                return await self._isolate(items, fence, exc)
            except StorageError as exc:
                self.stats.retries += 1
                self.stats.last_error = str(exc)
                logger.warning(
                    "database write failed, will retry",
                    extra={"error": str(exc), "retry_in_s": delay, "records": len(items)},
                )
                if items is self._inflight and self._inflight_seg is None:
                    await self._persist_inflight()
                if self._out_of_time():
                    return False
                if self._closing.is_set():  # the last tries before the deadline, paced
                    assert self._deadline is not None
                    pace = min(delay, self.options.retry_initial_s)
                    await asyncio.sleep(min(pace, self._deadline - time.monotonic()))
                else:  # closing cuts the wait short: one more try at once
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), delay)
                if self._closing.is_set() and self._out_of_time():
                    return False
                delay = min(delay * 2, self.options.retry_max_s)
            except Exception as exc:
                logger.exception("records could not be converted or written")
                return await self._isolate(items, fence, exc)
            else:
                self.stats.written += len(items)
                self.stats.batches += 1
                return True

    def _fence_lost(self, exc: Fenced) -> None:
        """Drop what is queued and fail every :meth:`durable` caller (see ``fence``)."""
        if not self._fenced:
            logger.warning("storage fenced: another agent took the room over", exc_info=exc)
            FENCED.add(1)
        self._fenced = True
        self._mem.clear()
        self._mem_bytes = 0
        for _, future in self._durable:
            if not future.done():
                future.set_exception(Fenced(str(exc)))
        self._durable = []

    async def _isolate(self, items: list[Item], fence: Fence | None, exc: Exception) -> bool:
        if len(items) == 1:
            await asyncio.to_thread(self._spill.dead_letter, items)
            self.stats.dead_lettered += 1
            logger.error(
                "record refused, kept in dead-letter",
                extra={"error": str(exc), "stanza_id": items[0].env.stanza_id},
            )
            return True
        mid = len(items) // 2
        return await self._write_resilient(items[:mid], fence) and await self._write_resilient(
            items[mid:], fence
        )

    async def _persist_inflight(self) -> None:
        """Keep a batch that could not be written on disk while it is retried."""
        async with self._lock:
            try:
                seg = await asyncio.to_thread(
                    self._spill.write, self._inflight, fence=self._inflight_fence
                )
            except OSError as exc:
                logger.error("spill write failed", extra={"error": str(exc)})
                return
        self._inflight_seg = seg
        self.stats.spilled += len(self._inflight)

    async def _write(self, items: Sequence[Item], fence: Fence | None) -> None:
        engine = self._engine
        if engine is None:
            raise RuntimeError("StorageWriter not started")
        if not self._migrated:
            await migrate_once(engine)
            self._migrated = True
        await write_batch(engine, self._dialect, items, fence, self._known)


async def open_sink(url: str | None, options: WriterOptions | None = None) -> StepSink:
    """A started :class:`StorageWriter` for ``url``; :class:`NullSink` if ``url`` is empty."""
    if not url:
        return NullSink()
    return await StorageWriter(url, options).start()
