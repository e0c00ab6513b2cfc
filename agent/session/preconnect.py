"""livekit-agents' pre-connect audio, gated: only the track's own publisher, once, bounded.

A LiveKit frontend may record the microphone before the agent joins and send that audio
as a byte stream on ``lk.agent.pre-connect-audio-buffer`` naming its track (``trackId``);
RoomIO feeds it to the session as the start of that track. livekit-agents takes such a
stream from anyone, for any track, of any size: another participant could put words in
the user's mouth, or make the agent hold megabytes. :func:`gate_pre_connect_audio` passes
a stream on only if

* the sender published the track it names (waiting :data:`PUBLISHED_WITHIN_S` for the
  publication, which may arrive after the stream), with the pre-connect buffer feature
  (``TF_PRECONNECT_BUFFER``, as livekit's clients publish it);
* it is the first for that track (RoomIO reads one buffer per publication);
* its ``sampleRate`` and ``channels`` are sane (livekit-agents gives up on a stream
  without them and never closes it);

at most :data:`MAX_WAITING` streams of a room wait for their publication at once. A
refused stream is closed at once (nothing more of it is buffered). An admitted one ends
after :data:`MAX_PCM_BYTES` of raw audio or :data:`MAX_ENCODED_BYTES` of encoded audio
(livekit's clients send at most 10 s): the audio so far is used, the rest is not read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from livekit import rtc
from livekit.rtc._proto.track_pb2 import AudioTrackFeature  # as livekit-agents reads it

__all__ = [
    "MAX_ENCODED_BYTES",
    "MAX_PCM_BYTES",
    "MAX_WAITING",
    "PRE_CONNECT_TOPIC",
    "PUBLISHED_WITHIN_S",
    "gate_pre_connect_audio",
]

logger = logging.getLogger("alicia.bridge")

PRE_CONNECT_TOPIC: Final = "lk.agent.pre-connect-audio-buffer"
MAX_PCM_BYTES: Final = 2 * 1024 * 1024
"""About 20 s of 48 kHz mono 16-bit audio."""
MAX_ENCODED_BYTES: Final = 256 * 1024
"""Opus (``audio/opus``, ``audio/webm;codecs=opus``): 10 s at 128 kbit/s is 160 KB."""
PUBLISHED_WITHIN_S: Final = 2.0
"""How long a stream waits for its sender's publication of the track it names."""
MAX_WAITING: Final = 4

_Handler = Callable[[rtc.ByteStreamReader, str], None]
_FEATURE: Final = AudioTrackFeature.TF_PRECONNECT_BUFFER
_GATED: Final = "_alicia_pre_connect_gate"


def gate_pre_connect_audio(room: rtc.Room) -> None:
    """Gate the pre-connect audio handler of ``room``: the one registered already (RoomIO
    registers it in ``AgentSession.start``) and any registered later. Idempotent."""
    if getattr(room, _GATED, None) is not None:
        return
    setattr(room, _GATED, _Gate(room))
    register = room.register_byte_stream_handler
    handlers: dict[str, _Handler] = getattr(room, "_byte_stream_handlers", {})
    if (current := handlers.get(PRE_CONNECT_TOPIC)) is not None:
        room.unregister_byte_stream_handler(PRE_CONNECT_TOPIC)
        register(PRE_CONNECT_TOPIC, _gated(room, current))

    def gated_register(topic: str, handler: _Handler) -> None:
        register(topic, _gated(room, handler) if topic == PRE_CONNECT_TOPIC else handler)

    setattr(room, "register_byte_stream_handler", gated_register)  # noqa: B010


class _Gate:
    """What one room's gate remembers: streams waiting, tracks already given a buffer."""

    def __init__(self, room: rtc.Room) -> None:
        self.room = room
        self.waiting: set[asyncio.Task[None]] = set()
        self.served: set[str] = set()


def _gated(room: rtc.Room, handler: _Handler) -> _Handler:
    gate: _Gate = getattr(room, _GATED)

    def on_stream(reader: rtc.ByteStreamReader, identity: str) -> None:
        if len(gate.waiting) >= MAX_WAITING:
            _refuse(reader, identity, "too many pre-connect streams at once")
            return
        task = asyncio.ensure_future(_admit(gate, handler, reader, identity))
        gate.waiting.add(task)
        task.add_done_callback(gate.waiting.discard)

    return on_stream


async def _admit(gate: _Gate, handler: _Handler, reader: rtc.ByteStreamReader, who: str) -> None:
    """Pass the stream on once its track is known to be the sender's, else close it."""
    attributes = reader.info.attributes or {}
    track = attributes.get("trackId", "")
    if not _sane(attributes):
        _refuse(reader, who, "no usable sampleRate and channels")
        return
    deadline = time.monotonic() + PUBLISHED_WITHIN_S
    while True:
        sender = gate.room.remote_participants.get(who)
        publication = None if sender is None else sender.track_publications.get(track)
        if publication is not None or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)
    if publication is None:
        _refuse(reader, who, "the track it names is not the sender's")
    elif _FEATURE not in publication.audio_features:
        _refuse(reader, who, "the track has no pre-connect buffer")
    elif track in gate.served:
        _refuse(reader, who, "the track already had its pre-connect audio")
    else:
        gate.served.add(track)
        handler(_Capped(reader), who)  # type: ignore[arg-type]


def _sane(attributes: dict[str, str]) -> bool:
    try:
        rate, channels = int(attributes["sampleRate"]), int(attributes["channels"])
    except (KeyError, ValueError):
        return False
    return 8_000 <= rate <= 192_000 and 1 <= channels <= 2


def _refuse(reader: rtc.ByteStreamReader, identity: str, why: str) -> None:
    logger.warning(
        f"pre-connect audio refused: {why}",
        extra={"participant": identity, "track_id": (reader.info.attributes or {}).get("trackId")},
    )
    reader.close()


class _Capped:
    """A byte stream reader that ends (the rest unread) once its cap has arrived."""

    def __init__(self, reader: rtc.ByteStreamReader) -> None:
        self.info = reader.info
        self._reader = reader
        mime = reader.info.mime_type or ""  # opus as livekit-agents tells it; else raw PCM
        opus = mime == "audio/opus" or "codecs=opus" in mime
        self._cap = MAX_ENCODED_BYTES if opus else MAX_PCM_BYTES

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        try:
            async for chunk in self._reader:
                size += len(chunk)
                if size > self._cap:
                    logger.warning("pre-connect audio cut", extra={"bytes": self._cap})
                    return
                yield chunk
        finally:
            self._reader.close()  # a no-op once it ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)
