"""Moving protocol packets between the worker and the clients in a room.

:class:`Transport` is the interface the turn runner sees: ``send`` bytes to some
participants, iterate incoming packets (and departures), ``aclose``. One envelope is one
packet; the transport neither encodes nor decodes. :class:`RoomTransport` implements it
on a connected ``livekit.rtc.Room`` (reliable data packets on one topic);
``tests/fakes.py`` has an in-memory one.

Exception tree::

    Exception
    └── TransportError   a send failed (LiveKit's error is the cause, or its text)

Using a closed transport, or opening one twice, raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol

from livekit import rtc

from protocol import DATA_TOPIC

__all__ = ["Incoming", "Left", "Packet", "RoomTransport", "Transport", "TransportError"]

logger = logging.getLogger("alicia.transport")

DEFAULT_MAX_PENDING: Final = 4096


class TransportError(Exception):
    """Sending failed; the underlying LiveKit error is chained as ``__cause__``."""


@dataclass(frozen=True, slots=True)
class Packet:
    """One data packet received from ``sender`` (a participant identity)."""

    sender: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Left:
    """``identity`` left the room: forget its state."""

    identity: str


Incoming = Packet | Left


class Transport(Protocol):
    """Packets to and from the participants of one room."""

    async def send(self, data: bytes, *, to: Sequence[str] | None = None) -> None:
        """Send one packet reliably to the identities in ``to`` (``None``: everyone).

        Raises :class:`TransportError` if it could not be sent.
        """
        ...

    def __aiter__(self) -> AsyncIterator[Incoming]:
        """Incoming packets and departures, in arrival order; ends when the room closes."""
        ...

    async def aclose(self) -> None:
        """Stop receiving; iteration ends."""
        ...


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


_END: Final = object()


class RoomTransport:
    """:class:`Transport` over a connected ``rtc.Room``: reliable packets on ``topic``.

    Use as an async context manager (or call :meth:`start` / :meth:`aclose`). Incoming
    packets wait in a queue of at most ``max_pending``; past that they are dropped and
    counted in :attr:`dropped` (the turn runner's per-participant limits normally keep
    the queue short).
    """

    def __init__(
        self,
        room: rtc.Room,
        *,
        topic: str = DATA_TOPIC,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        """Wrap ``room`` (already connected); nothing is registered until :meth:`start`."""
        self._room = room
        self._topic = topic
        self._max_pending = max_pending
        self._queue: asyncio.Queue[Incoming | object] = asyncio.Queue()
        self._state = _State.NEW
        self.dropped = 0
        """Incoming packets dropped because the queue was full."""
        self.unattributed = 0
        """Incoming packets dropped because the SDK did not know their sender yet."""

    def start(self) -> RoomTransport:
        """Start listening to the room's data packets and departures."""
        if self._state is not _State.NEW:
            raise RuntimeError(f"RoomTransport is {self._state.value}; it can be opened once")
        self._room.on("data_received", self._on_data)
        self._room.on("participant_disconnected", self._on_left)
        self._room.on("disconnected", self._on_disconnected)
        self._state = _State.OPEN
        if not narrow_ffi_events(self._room):
            logger.info("room FFI events not narrowed (unexpected livekit SDK internals)")
        return self

    async def aclose(self) -> None:
        """Stop listening; iteration ends. Idempotent."""
        if self._state is _State.OPEN:
            self._room.off("data_received", self._on_data)
            self._room.off("participant_disconnected", self._on_left)
            self._room.off("disconnected", self._on_disconnected)
            self._queue.put_nowait(_END)
        self._state = _State.CLOSED

    async def __aenter__(self) -> RoomTransport:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def send(self, data: bytes, *, to: Sequence[str] | None = None) -> None:
        """Publish ``data`` as one reliable packet on the topic."""
        if self._state is not _State.OPEN:
            raise RuntimeError(f"RoomTransport is {self._state.value}")
        destinations = list(to) if to is not None else []
        completions = _PublishCompletions.get()
        try:
            if completions is None:
                await self._room.local_participant.publish_data(
                    data, reliable=True, destination_identities=destinations, topic=self._topic
                )
                return
            error = await completions.publish(self._room, data, destinations, self._topic)
        except Exception as exc:  # the FFI raises PublishDataError or plain errors
            raise TransportError(f"publish_data failed: {exc}") from exc
        if error:
            raise TransportError(f"publish_data failed: {error}")

    def __aiter__(self) -> AsyncIterator[Incoming]:
        if self._state is _State.NEW:
            raise RuntimeError("RoomTransport is not started")
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Incoming]:
        while True:
            item = await self._queue.get()
            if item is _END:
                self._queue.put_nowait(_END)  # later iterators end too
                return
            assert isinstance(item, Packet | Left)
            yield item

    # -- room callbacks (event loop thread) -----------------------------------------

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != self._topic:
            return
        if packet.participant is None:
            # livekit-server may deliver a new participant's first packets before the
            # participant_connected event; the SDK then cannot name the sender (its
            # identity is empty), so the packet cannot be answered. Clients repeat their
            # Configuration until it is answered (see DECISIONS in the worker report).
            self.unattributed += 1
            logger.warning("data packet from an unknown participant dropped")
            return
        if self._queue.qsize() >= self._max_pending:
            self.dropped += 1
            logger.warning("incoming packet dropped", extra={"dropped": self.dropped})
            return
        self._queue.put_nowait(Packet(packet.participant.identity, packet.data))

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        self._queue.put_nowait(Left(participant.identity))

    def _on_disconnected(self, *_: object) -> None:
        # The room is gone: iteration ends; sends fail with TransportError from now on.
        self._queue.put_nowait(_END)


def narrow_ffi_events(room: rtc.Room) -> bool:
    """Deliver to ``room``'s event loop only the FFI events it can use; True if done.

    In livekit (rtc 1.1.x) every FFI event of the process (every room's events, every
    publish_data completion) is handed to every connected room's event queue, and each
    room wakes up for it and forwards it internally before ignoring it. With one room
    per process that is harmless; with many rooms in one process (the thread job
    executor) the work grows with rooms x events, in cross-thread wake-ups. This
    tightens the filter of this room's own subscription: room events of other rooms and
    publish_data completions (always consumed by the publishing call's own queue) are
    no longer delivered to it; every other event passes as before. Relies on SDK
    internals, checked here; on any mismatch nothing is changed and False is returned.
    """
    try:
        from livekit.rtc._ffi_client import FfiClient

        queue = room._ffi_queue
        owned = room._ffi_handle
        if owned is None:
            return False
        handle = owned.handle
        fanout: Any = FfiClient.instance.queue
        subscribers: list[Any] = fanout._subscribers
        lock = fanout._lock
    except (AttributeError, ImportError):
        return False
    with lock:
        for i, entry in enumerate(subscribers):
            if isinstance(entry, tuple) and len(entry) == 3 and entry[0] is queue:
                _, loop, previous = entry
                subscribers[i] = (queue, loop, _room_filter(handle, previous))
                return True
    return False


def _room_filter(handle: int, previous: Callable[[Any], bool] | None) -> Callable[[Any], bool]:
    def wanted(event: Any) -> bool:
        kind = event.WhichOneof("message")
        if kind == "room_event":
            if event.room_event.room_handle != handle:
                return False
        elif kind == "publish_data":
            return False
        return previous is None or bool(previous(event))

    return wanted


class _PublishCompletions:
    """``publish_data`` for many rooms in one process, without per-call subscriptions.

    ``LocalParticipant.publish_data`` (rtc 1.1.x) subscribes a fresh queue to the
    process-wide FFI event fan-out for every packet and waits there for its completion;
    while it waits, every FFI event of every room in the process is copied into that
    queue across threads. This does the same request, but routes completions through
    one filter installed once per process: it runs on the FFI callback thread, hands
    each ``publish_data`` completion to the waiting call's loop and delivers nothing
    else. Same request fields, same ordering (FFI request order), same error reporting.
    Relies on SDK internals, checked once; ``get()`` returns None (use the public
    method) if they do not match.
    """

    _instance: _PublishCompletions | None = None
    _unavailable = False
    _create_lock = threading.Lock()
    _EARLY_LIMIT: Final = 4096

    def __init__(self, client: Any, request_type: Any) -> None:
        self._client = client
        self._request_type = request_type
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[str]]] = {}
        self._early: OrderedDict[int, str] = OrderedDict()

    @classmethod
    def get(cls) -> _PublishCompletions | None:
        """The process-wide instance (created on first use), or None without SDK support."""
        if cls._instance is not None or cls._unavailable:
            return cls._instance
        with cls._create_lock:
            if cls._instance is None and not cls._unavailable:
                try:
                    from livekit.rtc._ffi_client import FfiClient
                    from livekit.rtc._proto import ffi_pb2

                    client: Any = FfiClient.instance
                    instance = cls(client, ffi_pb2.FfiRequest)
                    client.queue.subscribe(asyncio.get_running_loop(), filter_fn=instance._route)
                    cls._instance = instance
                except (AttributeError, ImportError, TypeError):
                    cls._unavailable = True
                    logger.info("publish completions use the SDK's own path")
        return cls._instance

    async def publish(
        self, room: rtc.Room, data: bytes, destinations: list[str], topic: str
    ) -> str:
        """Publish one reliable packet; return the FFI's error text ("" = sent)."""
        participant: Any = room.local_participant
        req = self._request_type()
        req.publish_data.local_participant_handle = participant._ffi_handle.handle
        buffer = (ctypes.c_byte * len(data)).from_buffer_copy(data)
        req.publish_data.data_ptr = ctypes.addressof(buffer)
        req.publish_data.data_len = len(data)
        req.publish_data.reliable = True
        req.publish_data.topic = topic
        req.publish_data.destination_identities.extend(destinations)
        resp = self._client.request(req)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        async_id = resp.publish_data.async_id
        with self._lock:
            if async_id in self._early:
                done.set_result(self._early.pop(async_id))
            else:
                self._waiting[async_id] = (loop, done)
        try:
            return await done
        finally:
            with self._lock:
                self._waiting.pop(async_id, None)
            del buffer  # the FFI reads the packet until its completion

    def _route(self, event: Any) -> bool:
        """FFI callback thread: settle the waiting publish; never enqueue anything."""
        if event.WhichOneof("message") != "publish_data":
            return False
        async_id, error = event.publish_data.async_id, event.publish_data.error
        with self._lock:
            waiter = self._waiting.pop(async_id, None)
            if waiter is None:  # completed before the caller registered
                self._early[async_id] = error
                while len(self._early) > self._EARLY_LIMIT:
                    self._early.popitem(last=False)
                return False
        loop, done = waiter
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, done, error)
        return False


def _settle(done: asyncio.Future[str], error: str) -> None:
    if not done.done():
        done.set_result(error)
