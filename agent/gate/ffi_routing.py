"""Routing livekit's FFI events to many rooms in one process: O(1) per event, batched.

livekit (rtc 1.1.x) runs every room of a process through one native library. Each FFI
event (a room's event, a ``publish_data`` completion, ...) comes up on a native thread
and is offered to *every* subscriber of the process-wide fan-out: each connected room
and each pending ``publish_data`` call runs a filter on it, and every taker is woken
with its own cross-thread ``call_soon_threadsafe`` (a socket write and an event-loop
wake-up per event per taker). With one room per process that is harmless; with a
hundred rooms in one process (the thread job executor) it costs rooms x events filter
calls and wake-ups, on the native threads that should be moving packets.

:class:`FfiRouter` replaces that fan-out, once per process, for the rooms handed to
:func:`route_room`:

* a room's own events go to that room only (a dict lookup by room handle);
* the completions of :func:`publish`, of :class:`TextStream` (``lk.transcription``) and
  of :func:`set_attributes` settle their caller directly (by async id), and are never
  offered to rooms. The SDK's own calls for these subscribe a temporary queue that every
  FFI event of the process is delivered to until the call completes: rooms x events
  wake-ups at a hundred rooms;
* RPC invocations and track publish callbacks go to each routed room whose original
  filter wants them, as before; other request callbacks are left to the requesting
  call's own subscription (see :data:`_ROOM_WANTS`);
* deliveries to one event loop are batched: one wake-up carries every event queued for
  that loop since its last wake-up, in order.

Everything else (temporary subscriptions of the SDK's own request calls, media streams)
keeps the SDK's fan-out untouched. This relies on SDK internals; :meth:`FfiRouter.get`
checks them once and returns None if they differ, and callers then use the public API.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from livekit import rtc
from livekit.rtc.participant import PublishDataError

__all__ = [
    "FfiRouter",
    "TextStream",
    "publish",
    "route_room",
    "set_attributes",
    "stop_capturing_native_logs",
]

logger = logging.getLogger("alicia.ffi")

_ROOM_WANTS: Final = frozenset({"rpc_method_invocation", "publish_track", "unpublish_track"})
"""Event kinds besides its own room events that a room's listener acts on (rtc 1.1.x:
``Room._listen_task`` handles RPC invocations and hands publish/unpublish callbacks to
``LocalParticipant``). Every other callback (``disconnect``, ``get_stats``, ...) is awaited
by the requesting call's own temporary subscription, which the SDK's fan-out still serves.
The native library emits one such callback per ``publish_data`` besides its completion, so
offering them to every room would cost rooms x packets wake-ups."""

_BY_ASYNC_ID: Final = frozenset(
    {
        "publish_data",
        "text_stream_open",
        "text_stream_writer_write",
        "text_stream_writer_close",
        "set_local_attributes",
    }
)
"""Completions settled by async id (the caller awaits its own; no room is offered them)."""

_EARLY_LIMIT: Final = 4096
"""Completions that arrived before their caller registered, kept by async id (bounded)."""


class _LoopInbox:
    """Calls to run on one event loop, posted from any thread; one wake-up per batch."""

    __slots__ = ("_items", "_lock", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[Callable[[Any], object], Any]] = []
        self._scheduled = False

    def post(self, fn: Callable[[Any], object], arg: Any) -> None:
        """Run ``fn(arg)`` on the loop, after everything posted before it."""
        with self._lock:
            self._items.append((fn, arg))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            with self._lock:
                self._items.clear()
                self._scheduled = False

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for fn, arg in items:
            try:
                fn(arg)
            except Exception:
                logger.exception("FFI event delivery failed")


@dataclass(frozen=True, slots=True)
class _Route:
    """One room's subscription, moved out of the SDK's fan-out."""

    queue: asyncio.Queue[Any]
    inbox: _LoopInbox
    wants: Callable[[Any], bool] | None


class FfiRouter:
    """The process-wide router over the SDK's FFI fan-out (see the module doc)."""

    _instance: FfiRouter | None = None
    _unavailable = False
    _create_lock = threading.Lock()

    def __init__(self, fanout: Any, request_type: Any, client: Any) -> None:
        self._fanout = fanout
        self._fanout_put: Callable[[Any], None] = fanout.put
        self._fanout_unsubscribe: Callable[[Any], None] = fanout.unsubscribe
        self._lock: Any = fanout._lock  # the fan-out's own (re-entrant) lock
        self._request_type = request_type
        self._client = client
        self._rooms: dict[int, list[_Route]] = {}
        self._routes: dict[int, tuple[int, _Route]] = {}  # id(queue) -> (handle, route)
        self._inboxes: dict[asyncio.AbstractEventLoop, _LoopInbox] = {}
        self._waiting: dict[int, tuple[_LoopInbox, asyncio.Future[Any]]] = {}
        self._early: OrderedDict[int, Any] = OrderedDict()

    @classmethod
    def get(cls) -> FfiRouter | None:
        """The process-wide router (installed on first use), or None without SDK support."""
        if cls._instance is not None or cls._unavailable:
            return cls._instance
        with cls._create_lock:
            if cls._instance is None and not cls._unavailable:
                try:
                    from livekit.rtc._ffi_client import FfiClient
                    from livekit.rtc._proto import ffi_pb2

                    client: Any = FfiClient.instance
                    fanout = client.queue
                    if not isinstance(fanout._subscribers, list):
                        raise TypeError("unexpected FFI fan-out")
                    router = cls(fanout, ffi_pb2.FfiRequest, client)
                    fanout.put = router._put
                    fanout.unsubscribe = router._unsubscribe
                    cls._instance = router
                except (AttributeError, ImportError, TypeError):
                    cls._unavailable = True
                    logger.info("FFI events use the SDK's own fan-out")
        return cls._instance

    # -- registration -------------------------------------------------------------------

    def route(self, room: rtc.Room) -> bool:
        """Move ``room``'s subscription out of the fan-out into the router; True if done."""
        try:
            queue = room._ffi_queue
            owned = room._ffi_handle
        except AttributeError:
            return False
        if owned is None:
            return False
        handle = owned.handle
        with self._lock:
            subscribers: list[Any] = self._fanout._subscribers
            for i, entry in enumerate(subscribers):
                if isinstance(entry, tuple) and len(entry) == 3 and entry[0] is queue:
                    _, loop, wants = entry
                    route = _Route(queue, self._inbox(loop), wants)
                    self._rooms.setdefault(handle, []).append(route)
                    self._routes[id(queue)] = (handle, route)
                    del subscribers[i]
                    return True
        return False

    def routed(self, room: rtc.Room) -> bool:
        """Whether ``room``'s events currently go through the router."""
        return id(getattr(room, "_ffi_queue", None)) in self._routes

    def _inbox(self, loop: asyncio.AbstractEventLoop) -> _LoopInbox:
        inbox = self._inboxes.get(loop)
        if inbox is None:
            for old in [lp for lp in self._inboxes if lp.is_closed()]:
                del self._inboxes[old]
            inbox = self._inboxes[loop] = _LoopInbox(loop)
        return inbox

    def _unsubscribe(self, queue: Any) -> None:
        with self._lock:
            found = self._routes.pop(id(queue), None)
            if found is not None:
                handle, route = found
                routes = [r for r in self._rooms.get(handle, []) if r is not route]
                if routes:
                    self._rooms[handle] = routes
                else:
                    self._rooms.pop(handle, None)
            self._fanout_unsubscribe(queue)

    # -- the FFI callback thread --------------------------------------------------------

    def _put(self, event: Any) -> None:
        kind = event.WhichOneof("message")
        with self._lock:
            if kind == "room_event":
                for route in self._rooms.get(event.room_event.room_handle, ()):
                    route.inbox.post(route.queue.put_nowait, event)
            elif kind in _BY_ASYNC_ID:
                self._settle(getattr(event, kind).async_id, event)
            elif kind in _ROOM_WANTS:
                for routes in self._rooms.values():
                    for route in routes:
                        if route.wants is None or _wants(route.wants, event):
                            route.inbox.post(route.queue.put_nowait, event)
            self._fanout_put(event)  # the SDK's remaining (non-room) subscribers

    def _settle(self, async_id: int, event: Any) -> None:
        waiter = self._waiting.pop(async_id, None)
        if waiter is None:  # completed before the caller registered (or not ours)
            self._early[async_id] = event
            while len(self._early) > _EARLY_LIMIT:
                self._early.popitem(last=False)
            return
        inbox, done = waiter
        inbox.post(_settle_future, (done, event))

    # -- publishing ---------------------------------------------------------------------

    async def request(self, req: Any, field: str) -> Any:
        """Send the FFI request ``req`` (``field``: its request and response field) and
        return its completion (the FFI event's message)."""
        resp = self._client.request(req)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        async_id = getattr(resp, field).async_id
        with self._lock:
            if async_id in self._early:
                done.set_result(self._early.pop(async_id))
            else:
                self._waiting[async_id] = (self._inbox(loop), done)
        try:
            event = await done
        finally:
            with self._lock:
                self._waiting.pop(async_id, None)
        return getattr(event, event.WhichOneof("message"))

    def new_request(self) -> Any:
        """An empty FFI request."""
        return self._request_type()

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
        try:
            done = await self.request(req, "publish_data")
        finally:
            del buffer  # the FFI reads the packet until its completion
        return str(done.error)


def _wants(wants: Callable[[Any], bool], event: Any) -> bool:
    try:
        return bool(wants(event))
    except Exception:  # the SDK's fan-out delivers on a filter error too
        return True


def _settle_future(item: tuple[asyncio.Future[Any], Any]) -> None:
    done, error = item
    if not done.done():
        done.set_result(error)


def route_room(room: rtc.Room) -> bool:
    """Route ``room``'s FFI events through the process's :class:`FfiRouter`; True if done."""
    router = FfiRouter.get()
    return router is not None and router.route(room)


async def publish(room: rtc.Room, data: bytes, destinations: list[str], topic: str) -> None:
    """Publish one reliable packet on ``topic``; raise ``PublishDataError`` if refused.

    Uses the router's completion path when available, else the SDK's ``publish_data``.
    """
    router = FfiRouter.get()
    if router is None:
        await room.local_participant.publish_data(
            data, reliable=True, destination_identities=destinations, topic=topic
        )
        return
    error = await router.publish(room, data, destinations, topic)
    if error:
        raise PublishDataError(error)


async def set_attributes(room: rtc.Room, attributes: dict[str, str]) -> None:
    """Set attributes on the room's local participant (the SDK's ``set_attributes``)."""
    router = FfiRouter.get()
    if router is None:
        await room.local_participant.set_attributes(attributes)
        return
    participant: Any = room.local_participant
    req = router.new_request()
    req.set_local_attributes.local_participant_handle = participant._ffi_handle.handle
    for key, value in attributes.items():
        entry = req.set_local_attributes.attributes.add()
        entry.key, entry.value = key, value
    done = await router.request(req, "set_local_attributes")
    if done.error:
        raise RuntimeError(f"attributes not set: {done.error}")


class TextStream:
    """One outgoing text stream (the SDK's ``stream_text`` writer): opened by the first
    :meth:`write`, closed by :meth:`aclose`; through the router when it is available."""

    def __init__(self, room: rtc.Room, *, topic: str, attributes: dict[str, str]) -> None:
        """Nothing is sent before the first :meth:`write`."""
        self._room = room
        self._topic = topic
        self._attributes = attributes
        self._router = FfiRouter.get()
        self._writer: rtc.TextStreamWriter | None = None
        self._handle: Any = None
        """The native writer (FfiHandle) while the stream is open through the router."""

    async def write(self, text: str) -> None:
        """Send ``text`` as the stream's next chunk (opening the stream first)."""
        router = self._router
        if router is None:
            if self._writer is None:
                self._writer = await self._room.local_participant.stream_text(
                    topic=self._topic, attributes=self._attributes
                )
            await self._writer.write(text)
            return
        if self._handle is None:
            await self._open(router)
        req = router.new_request()
        req.text_stream_write.writer_handle = self._handle.handle
        req.text_stream_write.text = text
        _raise_stream_error(await router.request(req, "text_stream_write"))

    async def aclose(self, attributes: dict[str, str] | None = None) -> None:
        """Close the stream (nothing if it was never opened), with trailer ``attributes``."""
        router, handle = self._router, self._handle
        if router is None:
            if self._writer is not None:
                await self._writer.aclose(attributes=attributes)
            return
        if handle is None:
            return
        self._handle = None
        req = router.new_request()
        req.text_stream_close.writer_handle = handle.handle
        if attributes:
            req.text_stream_close.attributes.update(attributes)
        self._opened().pop(handle.handle, None)
        handle.mark_consumed()  # the close hands the native writer back
        _raise_stream_error(await router.request(req, "text_stream_close"))

    async def _open(self, router: FfiRouter) -> None:
        from livekit.rtc._ffi_client import FfiHandle

        participant: Any = self._room.local_participant
        req = router.new_request()
        options = req.text_stream_open.options
        req.text_stream_open.local_participant_handle = participant._ffi_handle.handle
        options.topic = self._topic
        options.attributes.update(self._attributes)
        options.sender_identity = participant.identity
        done = await router.request(req, "text_stream_open")
        _raise_stream_error(done)
        self._handle = FfiHandle(done.writer.handle.id)
        self._opened()[self._handle.handle] = self._handle

    def _opened(self) -> MutableMapping[int, Any]:
        """The participant's open writers, which the SDK drops when the room disconnects
        (a stream left open by a cancelled task is released then, as the SDK's are)."""
        opened: MutableMapping[int, Any] = getattr(
            self._room.local_participant, "_open_stream_writers", {}
        )
        return opened


def _raise_stream_error(done: Any) -> None:
    if done.HasField("error"):
        raise rtc.StreamError(done.error.description)


_logs_released = False
_logs_lock = threading.Lock()


def stop_capturing_native_logs() -> bool:
    """Leave the native library's log records native (``RUST_LOG``, stderr); True if done.

    The SDK initialises its native library with log capture on: every record, at every
    level, becomes an FFI event that a native thread hands to Python (taking the GIL) to
    be filtered there. libwebrtc logs a hex dump of each SCTP packet at debug level, so
    that is several GIL round trips per data packet, all discarded. Initialising again
    with capture off (the library's documented switch) keeps them native. Once per process.
    """
    global _logs_released
    with _logs_lock:
        if _logs_released:
            return True
        try:
            from livekit.rtc import _ffi_client
            from livekit.rtc.version import __version__

            client: Any = _ffi_client.FfiClient.instance
            client._ffi_lib.livekit_ffi_initialize(
                _ffi_client.ffi_event_callback, False, b"python", __version__.encode("ascii")
            )
        except (AttributeError, ImportError, TypeError):
            logger.info("native logs stay captured (unexpected livekit SDK internals)")
            return False
        _logs_released = True
        return True
