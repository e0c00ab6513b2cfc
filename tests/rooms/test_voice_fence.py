"""A voice room's audio under its lease (``agent/rooms/voice_failover.py``): what the
session says reaches the room's output only while the agent holds the room.

:class:`FencedAudio` wraps a real livekit-agents ``AudioOutput`` subclass that records the
frames it is given, under a tenure whose state the test sets: held (frames pass),
unconfirmed (a frame waits until a renewal confirms the lease), taken (frames dropped);
and what the output already holds paused while the lease is in doubt.
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


class _Keeper:
    def __init__(self) -> None:
        self.stopped = False

    def stalled(self) -> bool:
        return self.stopped


class _Hold:
    def __init__(self) -> None:
        self.keeper = _Keeper()
        self.suspect = False
        self.failing = False
        self.lost = asyncio.Event()

    @property
    def taken(self) -> bool:
        return self.lost.is_set()

    def unconfirmed(self) -> bool:
        return self.failing

    def doubtful(self) -> bool:  # as Hold.doubtful
        return self.keeper.stalled() or self.suspect or self.unconfirmed()


class _Pausable(_Output):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


async def test_what_the_output_holds_is_paused_while_the_lease_is_in_doubt() -> None:
    """A whole sentence is synthesized (and buffered) faster than it plays: after a stall,
    or while renewals fail, the output pauses until a renewal confirms the lease."""
    from types import SimpleNamespace

    from alicia.agent.rooms.voice_failover import _pause_while_doubtful

    out, hold = _Pausable(), _Hold()
    session = SimpleNamespace(output=SimpleNamespace(audio=out))
    guard = asyncio.ensure_future(_pause_while_doubtful(session, hold))  # type: ignore[arg-type]
    await asyncio.sleep(0.2)
    assert out.calls == []
    hold.keeper.stopped = True  # the process was stopped: the heartbeat loop did not turn
    await asyncio.sleep(0.2)
    hold.keeper.stopped, hold.suspect = False, True  # the loop turned: suspect until renewed
    await asyncio.sleep(0.2)
    assert out.calls == ["pause"]
    hold.suspect = False  # a renewal confirmed it
    await asyncio.sleep(0.2)
    hold.failing = True  # renewals failing for a lease timeout
    await asyncio.sleep(0.2)
    assert out.calls == ["pause", "resume", "pause"]
    hold.lost.set()
    await asyncio.wait_for(guard, 1)
