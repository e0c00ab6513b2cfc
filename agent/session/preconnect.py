"""livekit-agents' pre-connect audio, gated: only the track's own publisher, bounded.

A LiveKit frontend may record the microphone before the agent joins and send that audio
as a byte stream on ``lk.agent.pre-connect-audio-buffer`` naming its track (``trackId``);
RoomIO feeds it to the session as the start of that track. livekit-agents takes such a
stream from anyone, for any track, of any size: another participant could put words in
the user's mouth, or make the agent hold megabytes. :func:`gate_pre_connect_audio` lets
a stream through only from the participant who published the track it names, and ends
it with an error past :data:`MAX_PRE_CONNECT_BYTES`; a refused stream is read and
dropped (for :data:`DRAIN_S` at most). livekit-agents' own wait for the buffer (3 s from
the track's subscription) bounds how long a stream may take.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from livekit import rtc

__all__ = [
    "DRAIN_S",
    "MAX_PRE_CONNECT_BYTES",
    "PRE_CONNECT_TOPIC",
    "PUBLISHED_WITHIN_S",
    "gate_pre_connect_audio",
]

logger = logging.getLogger("alicia.bridge")

PRE_CONNECT_TOPIC: Final = "lk.agent.pre-connect-audio-buffer"
MAX_PRE_CONNECT_BYTES: Final = 2 * 1024 * 1024
"""About 20 s of 48 kHz mono 16-bit audio (livekit's clients send at most 10 s)."""
DRAIN_S: Final = 5.0
PUBLISHED_WITHIN_S: Final = 2.0
"""How long a stream waits for its sender's publication of the track it names."""

_Handler = Callable[[rtc.ByteStreamReader, str], None]
_GATED: Final = "_alicia_pre_connect_gated"
_tasks: set[asyncio.Task[None]] = set()  # streams being admitted or drained


def gate_pre_connect_audio(room: rtc.Room) -> None:
    """Gate the pre-connect audio handler of ``room``: the one registered already (RoomIO
    registers it in ``AgentSession.start``) and any registered later. Idempotent."""
    if getattr(room, _GATED, False):
        return
    setattr(room, _GATED, True)
    register = room.register_byte_stream_handler
    handlers: dict[str, _Handler] = getattr(room, "_byte_stream_handlers", {})
    if (current := handlers.get(PRE_CONNECT_TOPIC)) is not None:
        room.unregister_byte_stream_handler(PRE_CONNECT_TOPIC)
        register(PRE_CONNECT_TOPIC, _gated(room, current))

    def gated_register(topic: str, handler: _Handler) -> None:
        register(topic, _gated(room, handler) if topic == PRE_CONNECT_TOPIC else handler)

    setattr(room, "register_byte_stream_handler", gated_register)  # noqa: B010


def _gated(room: rtc.Room, handler: _Handler) -> _Handler:
    def on_stream(reader: rtc.ByteStreamReader, identity: str) -> None:
        task = asyncio.ensure_future(_admit(room, handler, reader, identity))
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    return on_stream


async def _admit(
    room: rtc.Room, handler: _Handler, reader: rtc.ByteStreamReader, identity: str
) -> None:
    """Pass the stream on once its track is known to be the sender's (the stream may
    arrive before the publication does: :data:`PUBLISHED_WITHIN_S`), else drop it."""
    track = (reader.info.attributes or {}).get("trackId")
    deadline = time.monotonic() + PUBLISHED_WITHIN_S
    while track is not None and time.monotonic() < deadline:
        sender = room.remote_participants.get(identity)
        if sender is not None and track in sender.track_publications:
            handler(_Capped(reader), identity)  # type: ignore[arg-type]
            return
        await asyncio.sleep(0.05)
    logger.warning(
        "pre-connect audio refused: the track it names is not the sender's",
        extra={"participant": identity, "track_id": track},
    )
    await _drain(reader)


class _Capped:
    """A byte stream reader that fails once more than the cap has arrived."""

    def __init__(self, reader: rtc.ByteStreamReader) -> None:
        self.info = reader.info
        self._reader = reader

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._reader:
            size += len(chunk)
            if size > MAX_PRE_CONNECT_BYTES:
                await _drain(self._reader)
                raise ValueError(f"pre-connect audio over {MAX_PRE_CONNECT_BYTES} bytes")
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


async def _drain(reader: rtc.ByteStreamReader) -> None:
    """Read and drop what is left of ``reader`` (for :data:`DRAIN_S` at most)."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in reader:
                pass
    except (TimeoutError, Exception):
        pass
