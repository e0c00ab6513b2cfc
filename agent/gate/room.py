"""A room's doors: every handler of a LiveKit room registered through the table.

:class:`RoomDoors` is the only place where a room's handlers are registered (data
packets, text and byte streams, participant changes); each registration names its row of
:data:`~.doors.DOORS` and gets that row's bounds, enforced before the handler sees
anything:

* a stream is refused as it opens past the sender's rate, past the streams one sender
  (or everyone) may have open, from a door that serves nobody, or once its sender left;
  a refused stream gets no reader at all (disposed of unread, as the SDK does with a
  topic nobody takes), or where the SDK's internals differ its reader is closed at once
  (livekit's reader stays subscribed to every FFI event, its chunks queued without
  bound, until it is closed);
* every incoming stream of a room the worker joins is bounded by the SDK itself to
  :data:`~.doors.MAX_STREAM_BYTES` inflated (:func:`bound_streams`): livekit's SDK
  inflates compressed streams, so without it a few hundred bytes on the wire become any
  size in memory, on any topic a handler takes;
* an admitted stream reaches its handler as a :class:`Bounded` reader: past its bytes or
  its deadline (counted from its opening, read or not) it is closed and its reader raises
  :class:`StreamCut`; when its sender leaves, likewise; whatever its handler does, it is
  closed when it ends;
* livekit-agents' own handlers (RoomIO's pre-connect audio, the session host) are taken
  through their door too: :meth:`RoomDoors.adopt` routes the room's
  ``register_*_stream_handler`` for a topic of the table to :meth:`streams`.

Every refusal is counted and logged at most once per sender, reason and interval
(:mod:`.refusals`); a door's own refusal to the sender (an ErrorMessage) is its
handler's ``on_refused`` callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Generic, TypeAlias, TypeVar

from livekit import rtc

from alicia.agent.engine.participants import TokenBucket
from alicia.agent.engine.rights import Right

from .doors import DOORS, MAX_STREAM_BYTES, Door, Kind
from .refusals import refused

__all__ = [
    "Bounded",
    "RoomDoors",
    "StreamCut",
    "bound_streams",
    "doors_of_room",
    "with_stream_bound",
]

logger = logging.getLogger("alicia.gate")

_Chunk = TypeVar("_Chunk", str, bytes)
_Reader: TypeAlias = rtc.TextStreamReader | rtc.ByteStreamReader
_Handler = Callable[[Any, str], None]
_Wrap = Callable[[_Handler], _Handler]
Refused = Callable[[str, str], None]
"""``on_refused(sender, reason)``: a door's own answer to a refused sender."""

_BY_TOPIC: Final = {d.at: d for d in DOORS if d.kind.streams}


class StreamCut(rtc.StreamError):
    """A stream ended by its door before it was whole: too big, too slow, or its sender
    left. What arrived of it must not be taken as a whole message."""


class Bounded(Generic[_Chunk]):
    """An admitted stream under its door's bounds; iterate it as the reader itself (its
    ``info`` and other attributes are the reader's).

    Its chunks are taken from livekit's reader as they arrive, whether its handler reads
    or not (one task per stream), so its bytes and its deadline hold even for a handler
    that waits before reading (the pre-connect audio waits for a publication): what it
    holds is at most the door's bytes. Its place at the door is kept until its handler
    is done with it (read to the end, or ended)."""

    def __init__(self, reader: _Reader, gate: _StreamGate, sender: str) -> None:
        """Admitted by ``gate`` from ``sender``; the deadline runs from now."""
        self.info: Any = reader.info
        self._reader: _Reader = reader
        self._gate: _StreamGate = gate
        self.sender: str = sender
        self.cut: str | None = None
        """Why the door ended it (``None`` while it may go on, or once it ended whole)."""
        self._ended: bool = False
        self._whole: bool = False
        self._arrived: asyncio.Queue[Any] = asyncio.Queue()
        deadline = gate.door.bounds.deadline_s
        loop = asyncio.get_running_loop()
        self._timer = None if deadline is None else loop.call_later(deadline, self._late)
        self._pump = loop.create_task(self._take(), name="alicia-stream-take")

    async def _take(self) -> None:
        """Take the chunks as they arrive, within the door's bytes."""
        limit = self._gate.door.bounds.bytes_each
        size = 0
        try:
            async for chunk in self._reader:
                if self.cut is not None:
                    return
                size += len(chunk.encode() if isinstance(chunk, str) else chunk)
                if limit is not None and size > limit:
                    self.end("too big")
                    return
                self._arrived.put_nowait(chunk)
            self._whole = self.cut is None
        except Exception:  # the sender aborted it or left, the room went: nothing more
            gone = self.sender not in self._gate.room.remote_participants
            self.end("its sender left" if gone else "aborted")
        finally:
            if self._timer is not None and self.cut is None:
                self._timer.cancel()
            self._arrived.put_nowait(_DONE)

    def _late(self) -> None:
        if not self._whole:
            self.end("too slow")

    def __aiter__(self) -> AsyncIterator[_Chunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[_Chunk]:
        try:
            while (chunk := await self._arrived.get()) is not _DONE and self.cut is None:
                yield chunk
        finally:
            self._finish()
        if self.cut is not None:
            raise StreamCut(f"{self._gate.door.name} stream cut: {self.cut}")

    async def read_all(self) -> _Chunk:
        """The whole stream (within its bounds), joined."""
        parts: list[Any] = [chunk async for chunk in self]
        joined: Any = (
            "".join(parts) if isinstance(self._reader, rtc.TextStreamReader) else b"".join(parts)
        )
        return joined  # type: ignore[no-any-return]

    def end(self, why: str) -> None:
        """Close it now as refused (``why``): nothing more is read or kept; a read waiting
        or to come raises :class:`StreamCut`."""
        if self._ended or self.cut is not None:
            return
        self.cut = why
        refused(self._gate.door, self.sender, why)
        while not self._arrived.empty():  # what arrived is let go at once
            self._arrived.get_nowait()
        self._arrived.put_nowait(_DONE)
        self._finish()

    def _finish(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        self._reader.close()  # a no-op once it ended; wakes the pump's read
        if not self._whole and self.cut is None:
            self._pump.cancel()  # its handler is done before it was whole
            refused(self._gate.door, self.sender, "given up by its handler")
        self._gate.ended(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


_DONE: Final = object()


class _StreamGate:
    """One stream door of one room: who has what open, who opened how fast."""

    def __init__(
        self,
        room: rtc.Room,
        door: Door,
        handler: Callable[[Any, str], None],
        on_refused: Refused | None,
    ) -> None:
        self.room = room
        self.door = door
        self.handler = handler
        self.on_refused = on_refused
        self.open: dict[str, set[Bounded[Any]]] = {}
        self.rates: dict[str, TokenBucket] = {}
        self.closed = False
        self._admitted = False

    def refuse_early(self, sender: str) -> bool:
        """Decide on a stream from its header, before the SDK makes its reader (a reader,
        closed or not, has the SDK inflate what comes for it); True if it is refused."""
        why = self._refusal(sender)
        if why is None:
            self._admitted = True  # the reader the SDK makes next is let in
            return False
        self._refused(sender, why)
        return True

    def _refused(self, sender: str, why: str) -> None:
        refused(self.door, sender, why)
        if self.on_refused is not None:
            self.on_refused(sender, why)

    def __call__(self, reader: _Reader, sender: str) -> None:
        admitted, self._admitted = self._admitted, False
        why = None if admitted else self._refusal(sender)
        if why is not None:
            reader.close()
            self._refused(sender, why)
            return
        bounded: Bounded[Any] = Bounded(reader, self, sender)
        self.open.setdefault(sender, set()).add(bounded)
        try:
            self.handler(bounded, sender)
        except Exception:
            logger.exception("stream handler failed", extra={"door": self.door.name})
            bounded.end("handler failed")

    def _refusal(self, sender: str) -> str | None:
        b = self.door.bounds
        if self.closed:
            return "the door is closed"
        if self.door.right is Right.NOBODY:
            return "nobody may use it"
        if b.rate_per_s is not None:
            bucket = self.rates.get(sender)
            if bucket is None:
                bucket = self.rates[sender] = TokenBucket(b.rate_per_s, b.burst or 1)
            if not bucket.take():
                return "too fast"
        if b.open_each is not None and len(self.open.get(sender, ())) >= b.open_each:
            return "too many open"
        if b.open_all is not None and sum(map(len, self.open.values())) >= b.open_all:
            return "too many open in the room"
        return None

    def ended(self, bounded: Bounded[Any]) -> None:
        mine = self.open.get(bounded.sender)
        if mine is not None:
            mine.discard(bounded)
            if not mine:
                del self.open[bounded.sender]

    def left(self, sender: str) -> None:
        """``sender`` left: its open streams end, its budget is forgotten."""
        self.rates.pop(sender, None)
        for bounded in list(self.open.get(sender, ())):
            bounded.end("its sender left")

    def close(self) -> None:
        self.closed = True
        for streams in list(self.open.values()):
            for bounded in list(streams):
                bounded.end("the door is closed")


class RoomDoors:
    """Every door of one connected room (one per room: :func:`doors_of_room`)."""

    def __init__(self, room: rtc.Room) -> None:
        """For ``room``; nothing is registered until a door is."""
        self._room = room
        self._gates: dict[str, _StreamGate] = {}
        self._register: dict[Kind, Callable[[str, Any], None]] = {
            Kind.TEXT_STREAMS: room.register_text_stream_handler,
            Kind.BYTE_STREAMS: room.register_byte_stream_handler,
        }
        self._unregister: dict[Kind, Callable[[str], None]] = {
            Kind.TEXT_STREAMS: room.unregister_text_stream_handler,
            Kind.BYTE_STREAMS: room.unregister_byte_stream_handler,
        }
        self._adopted = False
        self._wraps: dict[str, _Wrap] = {}
        room.on("participant_disconnected", self._left)
        self._early = _refuse_before_reading(room, self._gates)

    # -- streams ----------------------------------------------------------------------

    def streams(
        self,
        door: Door,
        handler: Callable[[Any, str], None],
        *,
        on_refused: Refused | None = None,
    ) -> Callable[[], None]:
        """Take ``door``'s streams (its topic) with ``handler(bounded, sender)``, under its
        bounds; ``on_refused(sender, reason)`` answers a stream refused as it opened.
        Returns the call that closes the door again (its open streams end)."""
        if not door.kind.streams:
            raise ValueError(f"{door.name} is not a stream door")
        if door.at in self._gates:
            raise ValueError(f"{door.name} already has a handler in this room")
        gate = _StreamGate(self._room, door, handler, on_refused)
        self._register[door.kind](door.at, gate)
        self._gates[door.at] = gate

        def close() -> None:
            if self._gates.get(door.at) is gate:
                del self._gates[door.at]
                with contextlib.suppress(KeyError, ValueError):
                    self._unregister[door.kind](door.at)
            gate.close()

        return close

    def open_streams(self, door: Door) -> int:
        """Streams open now at ``door`` (all senders)."""
        gate = self._gates.get(door.at)
        return 0 if gate is None else sum(map(len, gate.open.values()))

    def adopt(self, topic: str | None = None, wrap: _Wrap | None = None) -> None:
        """Take every registration of a stream handler for a topic of the table
        (livekit-agents' own), made before or after, through its door. Registrations for
        other topics (an app's own, in ``attach_reasoning``) are left as they are.
        ``wrap``: what stands between ``topic``'s door and the handler registered for it
        (a check of the door's right that needs more than the sender). Idempotent."""
        if topic is not None and wrap is not None and topic not in self._wraps:
            self._wraps[topic] = wrap
            if (gate := self._gates.get(topic)) is not None:  # adopted already: wrap it now
                gate.handler = wrap(gate.handler)
        if self._adopted:
            return
        self._adopted = True
        for kind, name in (
            (Kind.TEXT_STREAMS, "register_text_stream_handler"),
            (Kind.BYTE_STREAMS, "register_byte_stream_handler"),
        ):
            original = getattr(self._room, name)
            unregister_name = "un" + name
            original_unregister = getattr(self._room, unregister_name)
            self._register[kind] = original
            self._unregister[kind] = original_unregister
            setattr(self._room, name, self._adopting(kind, original))
            setattr(self._room, unregister_name, self._unadopting(original_unregister))
        for kind, attr in (
            (Kind.TEXT_STREAMS, "_text_stream_handlers"),
            (Kind.BYTE_STREAMS, "_byte_stream_handlers"),
        ):
            registered: dict[str, Any] = getattr(self._room, attr, {})
            for topic, handler in list(registered.items()):
                door = _BY_TOPIC.get(topic)
                if door is not None and door.kind is kind and topic not in self._gates:
                    self._unregister[kind](topic)
                    self.streams(door, self._wrapped(topic, handler))

    def _adopting(
        self, kind: Kind, original: Callable[[str, Any], None]
    ) -> Callable[[str, Any], None]:
        def register(topic: str, handler: Any) -> None:
            door = _BY_TOPIC.get(topic)
            if door is None or door.kind is not kind:
                original(topic, handler)  # not ours to declare: an app's own topic
                return
            self.streams(door, self._wrapped(topic, handler))

        return register

    def _wrapped(self, topic: str, handler: Any) -> Any:
        wrap = self._wraps.get(topic)
        return handler if wrap is None else wrap(handler)

    def _unadopting(self, original: Callable[[str], None]) -> Callable[[str], None]:
        def unregister(topic: str) -> None:
            gate = self._gates.pop(topic, None)
            original(topic)
            if gate is not None:
                gate.close()

        return unregister

    # -- packets and changes ------------------------------------------------------------

    def packets(self, door: Door, handler: Callable[[rtc.DataPacket], None]) -> Callable[[], None]:
        """Take ``door``'s data packets (its topic) with ``handler``; returns the call that
        stops. The door's per-sender bounds are its handler's (it answers them)."""
        if door.kind is not Kind.PACKETS:
            raise ValueError(f"{door.name} is not a packet door")
        topic = door.at

        def on_data(packet: rtc.DataPacket) -> None:
            if packet.topic == topic:
                handler(packet)

        self._room.on("data_received", on_data)
        return lambda: self._room.off("data_received", on_data)

    def changes(
        self, door: Door, handler: Callable[[rtc.RemoteParticipant], None]
    ) -> Callable[[], None]:
        """``handler(participant)`` at every change livekit-server reports of a remote
        participant's attributes or permissions; returns the call that stops."""
        if door.kind is not Kind.CHANGES:
            raise ValueError(f"{door.name} is not a changes door")

        def on_attributes(_changed: object, participant: rtc.Participant) -> None:
            if isinstance(participant, rtc.RemoteParticipant):
                handler(participant)

        def on_permissions(participant: rtc.Participant, *_: object) -> None:
            if isinstance(participant, rtc.RemoteParticipant):
                handler(participant)

        self._room.on("participant_attributes_changed", on_attributes)
        self._room.on("participant_permissions_changed", on_permissions)

        def stop() -> None:
            self._room.off("participant_attributes_changed", on_attributes)
            self._room.off("participant_permissions_changed", on_permissions)

        return stop

    def _left(self, participant: rtc.RemoteParticipant) -> None:
        for gate in list(self._gates.values()):
            gate.left(participant.identity)

    def close(self) -> None:
        """Close every stream door (their open streams end)."""
        for gate in self._gates.values():
            gate.close()
        self._room.off("participant_disconnected", self._left)


def _refuse_before_reading(room: rtc.Room, gates: dict[str, _StreamGate]) -> bool:
    """Have ``room`` ask the stream's gate before the SDK makes a reader: a stream refused
    as it opens is then disposed of unread, as the SDK does with a topic no handler takes
    (a reader made and closed at once still has the SDK inflate, into memory, whatever
    compressed data comes for it). SDK internals (rtc 1.1.x); False if they differ, and
    a refused stream's reader is closed at once instead."""
    from livekit.rtc._ffi_client import FfiHandle

    def early(original: Callable[[Any], None]) -> Callable[[Any], None]:
        def opened(event: Any) -> None:
            gate = gates.get(event.reader.info.topic)
            if gate is not None and gate.refuse_early(event.participant_identity):
                FfiHandle(event.reader.handle.id).dispose()
                return
            original(event)

        return opened

    names = ("_handle_text_stream_opened", "_handle_byte_stream_opened")
    if not all(callable(getattr(room, n, None)) for n in names):
        return False
    for name in names:
        setattr(room, name, early(getattr(room, name)))
    return True


def bound_streams(room: rtc.Room) -> None:
    """Make ``room``'s connect bound every incoming data stream to :data:`MAX_STREAM_BYTES`
    inflated (livekit's SDK inflates compressed streams as they come: unbounded, a few
    hundred bytes on the wire become any size in memory). Call it before the room
    connects (the worker does, before ``ctx.connect()``). Idempotent."""
    connect = room.connect
    if getattr(connect, "_alicia_bounded", False):
        return

    async def bounded(url: str, token: str, options: rtc.RoomOptions | None = None) -> None:
        await connect(url, token, with_stream_bound(options or rtc.RoomOptions()))

    bounded._alicia_bounded = True  # type: ignore[attr-defined]
    room.connect = bounded  # type: ignore[method-assign]


def with_stream_bound(options: rtc.RoomOptions) -> rtc.RoomOptions:
    """``options`` with incoming data streams bounded to :data:`MAX_STREAM_BYTES`."""
    given = options.data_stream
    if given is not None and given.max_payload_byte_length is not None:
        limit = min(given.max_payload_byte_length, MAX_STREAM_BYTES)
    else:
        limit = MAX_STREAM_BYTES
    return dataclasses.replace(
        options, data_stream=rtc.DataStreamOptions(max_payload_byte_length=limit)
    )


_ROOMS: weakref.WeakKeyDictionary[rtc.Room, RoomDoors] = weakref.WeakKeyDictionary()


def doors_of_room(room: rtc.Room) -> RoomDoors:
    """``room``'s doors (made at the first call, with the room's grants followed)."""
    doors = _ROOMS.get(room)
    if doors is None:
        doors = _ROOMS[room] = RoomDoors(room)
    return doors


def open_counts(room: rtc.Room) -> Counter[str]:
    """Streams open now per door name (for tests and diagnostics)."""
    doors = _ROOMS.get(room)
    counts: Counter[str] = Counter()
    if doors is not None:
        for gate in doors._gates.values():
            counts[gate.door.name] = sum(map(len, gate.open.values()))
    return counts
