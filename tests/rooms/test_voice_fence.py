"""A voice room's audio under its lease (``agent/rooms/voice_failover.py``): what the
session says reaches the room's output only while the agent holds the room.

:class:`FencedAudio` wraps a real livekit-agents ``AudioOutput`` subclass that records the
frames it is given, under a tenure whose state the test sets: held (frames pass),
unconfirmed (a frame waits until a renewal confirms the lease), taken (frames dropped).
"""

from __future__ import annotations

import asyncio

from livekit import rtc
from livekit.agents.voice import io

from alicia.agent.rooms.voice_failover import FencedAudio


class _Output(io.AudioOutput):
    """An audio sink that keeps what it is given."""

    def __init__(self) -> None:
        super().__init__(label="test", capabilities=io.AudioOutputCapabilities(pause=False))
        self.frames: list[rtc.AudioFrame] = []
        self.cleared = 0

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        self.frames.append(frame)

    def flush(self) -> None:
        super().flush()

    def clear_buffer(self) -> None:
        self.cleared += 1


class _Tenure:
    def __init__(self) -> None:
        self.state = "held"
        self.asked = 0

    async def held(self) -> bool:
        self.asked += 1
        return self.state == "held"

    @property
    def taken(self) -> bool:
        return self.state == "taken"

    def lose(self) -> None:
        self.state = "taken"


def _frame(n: int) -> rtc.AudioFrame:
    return rtc.AudioFrame(
        bytes([n % 256]) * 960, sample_rate=48000, num_channels=1, samples_per_channel=480
    )


async def test_frames_pass_while_held_wait_while_unconfirmed_and_are_dropped_once_taken() -> None:
    inner, tenure = _Output(), _Tenure()
    fenced = FencedAudio(inner, tenure)
    await fenced.capture_frame(_frame(1))
    assert [bytes(f.data)[0] for f in inner.frames] == [1]
    # After a stall: nothing plays until a renewal confirms the lease.
    tenure.state = "unconfirmed"
    waiting = asyncio.ensure_future(fenced.capture_frame(_frame(2)))
    await asyncio.sleep(0.35)
    assert not waiting.done() and len(inner.frames) == 1 and tenure.asked >= 3
    tenure.state = "held"
    await asyncio.wait_for(waiting, 2)
    assert [bytes(f.data)[0] for f in inner.frames] == [1, 2]
    # Another agent holds the room: the rest of the answer is never played.
    tenure.lose()
    for n in range(3, 8):
        await asyncio.wait_for(fenced.capture_frame(_frame(n)), 1)
    assert [bytes(f.data)[0] for f in inner.frames] == [1, 2]
    assert fenced.dropped == 5
    fenced.flush()
    fenced.clear_buffer()
    assert inner.cleared == 1
