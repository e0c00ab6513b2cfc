"""livekit-agents' pre-connect audio, gated: only the track's own publisher, once, bounded.

A LiveKit frontend may record the microphone before the agent joins and send that audio
as a byte stream on ``lk.agent.pre-connect-audio-buffer`` naming its track (``trackId``);
RoomIO feeds it to the session as the start of that track. livekit-agents takes such a
stream from anyone, for any track, of any size: another participant could put words in
the user's mouth, or make the agent hold megabytes. :func:`gate_pre_connect_audio` takes
RoomIO's handler through the ``pre-connect audio`` door of the table
(``alicia.agent.gate.doors``): one stream per sender open at once, a few per room, whole
within its deadline, at most its bytes (raw audio; :data:`MAX_ENCODED_BYTES` of Opus).
Within the door a stream is passed on only if

* the sender published the track it names (waiting :data:`PUBLISHED_WITHIN_S` for the
  publication, which may arrive after the stream), with the pre-connect buffer feature
  (``TF_PRECONNECT_BUFFER``, as livekit's clients publish it);
* it is the first for that track (RoomIO reads one buffer per publication);
* its ``sampleRate`` and ``channels`` are sane (livekit-agents gives up on a stream
  without them and never closes it).

A refused stream is closed at once (nothing more of it is buffered).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from livekit import rtc
from livekit.rtc._proto.track_pb2 import AudioTrackFeature  # as livekit-agents reads it

from alicia.agent.gate.doors import door
from alicia.agent.gate.room import Bounded, StreamCut, doors_of_room

__all__ = [
    "MAX_ENCODED_BYTES",
    "MAX_PCM_BYTES",
    "PRE_CONNECT",
    "PRE_CONNECT_TOPIC",
    "PUBLISHED_WITHIN_S",
    "gate_pre_connect_audio",
]

logger = logging.getLogger("alicia.bridge")

PRE_CONNECT: Final = door("pre-connect audio")
PRE_CONNECT_TOPIC: Final = PRE_CONNECT.at
MAX_PCM_BYTES: Final = PRE_CONNECT.bounds.bytes_each or 2 * 1024 * 1024
"""About 20 s of 48 kHz mono 16-bit audio."""
MAX_ENCODED_BYTES: Final = 256 * 1024
"""Opus (``audio/opus``, ``audio/webm;codecs=opus``): 10 s at 128 kbit/s is 160 KB."""
PUBLISHED_WITHIN_S: Final = 2.0
"""How long a stream waits for its sender's publication of the track it names."""

_Handler = Callable[[Any, str], None]
_FEATURE: Final = AudioTrackFeature.TF_PRECONNECT_BUFFER


def gate_pre_connect_audio(room: rtc.Room) -> None:
    """Take ``room``'s pre-connect audio handler through its door: the one registered
    already (RoomIO registers it in ``AgentSession.start``) and any registered later.
    Idempotent."""
    served: set[str] = set()

    def wrap(handler: _Handler) -> _Handler:
        return _Gated(room, handler, served)

    doors_of_room(room).adopt(PRE_CONNECT_TOPIC, wrap)


class _Gated:
    """RoomIO's handler behind the publisher check (one room: ``served`` tracks)."""

    def __init__(self, room: rtc.Room, handler: _Handler, served: set[str]) -> None:
        self.room = room
        self.handler = handler
        self.served = served
        self.waiting: set[asyncio.Task[None]] = set()

    def __call__(self, reader: Bounded[bytes], identity: str) -> None:
        task = asyncio.ensure_future(self._admit(reader, identity))
        self.waiting.add(task)
        task.add_done_callback(self.waiting.discard)

    async def _admit(self, reader: Bounded[bytes], who: str) -> None:
        """Pass the stream on once its track is known to be the sender's, else close it."""
        attributes = reader.info.attributes or {}
        track = attributes.get("trackId", "")
        if not _sane(attributes):
            reader.end("no usable sampleRate and channels")
            return
        deadline = time.monotonic() + PUBLISHED_WITHIN_S
        while reader.cut is None:
            sender = self.room.remote_participants.get(who)
            publication = None if sender is None else sender.track_publications.get(track)
            if publication is not None or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        if reader.cut is not None:
            return  # the sender left, or the door closed
        if publication is None:
            reader.end("the track it names is not the sender's")
        elif _FEATURE not in publication.audio_features:
            reader.end("the track has no pre-connect buffer")
        elif track in self.served:
            reader.end("the track already had its pre-connect audio")
        else:
            self.served.add(track)
            self.handler(_Encoded(reader), who)


def _sane(attributes: dict[str, str]) -> bool:
    try:
        rate, channels = int(attributes["sampleRate"]), int(attributes["channels"])
    except (KeyError, ValueError):
        return False
    return 8_000 <= rate <= 192_000 and 1 <= channels <= 2


class _Encoded:
    """The stream, cut at :data:`MAX_ENCODED_BYTES` if it is Opus (raw audio is cut at the
    door's bytes)."""

    def __init__(self, reader: Bounded[bytes]) -> None:
        self.info = reader.info
        self._reader = reader
        mime = reader.info.mime_type or ""  # opus as livekit-agents tells it; else raw PCM
        self._opus = mime == "audio/opus" or "codecs=opus" in mime

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        try:
            async for chunk in self._reader:
                size += len(chunk)
                if self._opus and size > MAX_ENCODED_BYTES:
                    self._reader.end("too big")
                    return
                yield chunk
        except StreamCut:
            if self._reader.cut != "too big":
                raise
            # livekit's clients send at most 10 s: the audio so far is used, the rest unread

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)
