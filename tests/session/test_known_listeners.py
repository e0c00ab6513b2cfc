"""Who may hear the agent while remarks may be drawn from the reasoning, checked again at
every grant change, for every kind of participant (agents included).

A real livekit-server: the agent's room publishes a microphone track (a tone) and closes it
to all but the participants :class:`KnownListeners` lets in. Another agent (a note taker)
granted ``summary`` is let in and hears it; when the app's backend lowers its grant to
``none`` its audio stops (livekit-server stops forwarding it; the SDK still calls the track
subscribed), and when the grant is raised again it hears it again.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
from livekit import api, rtc

from alicia.agent.session.spoken import LET_IN_AFTER_S, KnownListeners
from alicia.harness import LiveKitServer
from alicia.protocol import new_id
from tests.support.livekit_rooms import joined, wait_for_participant

pytestmark = pytest.mark.integration

RATE = 16_000


async def tone(source: rtc.AudioSource) -> None:
    """A 440 Hz tone, 10 ms a frame, for ever."""
    t = np.arange(RATE // 100) / RATE
    samples = (3000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes()
    while True:
        await source.capture_frame(rtc.AudioFrame(samples, RATE, 1, RATE // 100))


async def test_another_agent_stops_hearing_when_its_grant_is_lowered_and_hears_when_raised(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")

    def token(identity: str, attributes: dict[str, str]) -> str:
        return (
            api.AccessToken(livekit_server.api_key, livekit_server.api_secret)
            .with_identity(identity)
            .with_kind("agent")
            .with_attributes(attributes)
            .with_grants(api.VideoGrants(room_join=True, room=room, agent=True))
            .to_jwt()
        )

    heard = [0]

    async def listen(track: rtc.Track) -> None:
        async for _ in rtc.AudioStream(track):
            heard[0] += 1

    async def frames_in(seconds: float) -> int:
        start = heard[0]
        await asyncio.sleep(seconds)
        return heard[0] - start

    async def flowing_again(within: float) -> None:
        start = heard[0]
        async with asyncio.timeout(within):
            while heard[0] - start < 10:
                await asyncio.sleep(0.05)

    api_ = api.LiveKitAPI(
        livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
    )
    async with (
        joined(livekit_server, room, "agent-main", token("agent-main", {})) as agent,
        api_ as lk,
    ):
        known = KnownListeners(agent, "none").start()
        source = rtc.AudioSource(RATE, 1)
        track = rtc.LocalAudioTrack.create_audio_track("agent-voice", source)
        await agent.local_participant.publish_track(track, rtc.TrackPublishOptions())
        feeding = asyncio.ensure_future(tone(source))
        listening: set[asyncio.Task[None]] = set()
        try:
            notes_token = token("notes", {"alicia.reasoning": "summary"})
            async with joined(livekit_server, room, "notes", notes_token) as notes:
                notes.on(
                    "track_subscribed",
                    lambda t, *_: listening.add(asyncio.ensure_future(listen(t))),
                )
                await wait_for_participant(agent, "notes")
                await asyncio.sleep(LET_IN_AFTER_S + 1.0)

                async def grant(level: str) -> None:
                    request = api.UpdateParticipantRequest(
                        room=room, identity="notes", attributes={"alicia.reasoning": level}
                    )
                    await lk.room.update_participant(request)
                    await asyncio.sleep(LET_IN_AFTER_S + 1.0)  # let in, or shut out, by now

                granted = await frames_in(2.0)
                await grant("none")
                lowered = await frames_in(2.0)
                shut_out = "notes" not in known.admitted
                await grant("summary")
                await flowing_again(within=20.0)  # resubscribed: slower on a loaded machine
                raised = await frames_in(2.0)
        finally:
            feeding.cancel()
            for task in listening:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
            known.close()
    print(f"\nframes heard in 2 s: granted {granted}, lowered {lowered}, raised {raised}")
    assert granted > 100 and raised > 100, (granted, raised)
    assert shut_out and lowered < 10, (shut_out, lowered)
