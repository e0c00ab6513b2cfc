"""A participant that floods a byte-stream topic, in a process of its own.

``python -m tests.e2e.doors.flooder URL TOKEN AGENT TOPIC MEGABYTES``: joins, waits for
``AGENT``, then writes half the bytes as one stream that goes on past any cap, and the
rest as bursts of three streams opened at once and never finished. Prints one JSON line
(``{"sent": bytes, "seconds": s}``) and stays in the room, its streams open, until its
standard input closes. In a process of its own so that the test's own SDK state (its
rooms, its clients) does not pace the flood.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from livekit import rtc

CHUNK = 15 * 1024


async def flood(url: str, token: str, agent: str, topic: str, megabytes: float) -> None:
    room = rtc.Room()
    await room.connect(url, token)
    try:
        async with asyncio.timeout(30):
            while agent not in room.remote_participants:
                await asyncio.sleep(0.05)
        total = int(megabytes * 1024 * 1024)
        started = time.monotonic()
        to = [agent]
        writer = await room.local_participant.stream_bytes(
            "flood", topic=topic, destination_identities=to
        )
        sent = 0
        while sent < total // 2:
            await writer.write(os.urandom(CHUNK))
            sent += CHUNK
        writers = [writer]
        while sent < total:
            burst = [
                await room.local_participant.stream_bytes(
                    "flood", topic=topic, destination_identities=to
                )
                for _ in range(3)
            ]
            for w in burst:
                for _ in range(10):
                    await w.write(os.urandom(CHUNK))
                    sent += CHUNK
            writers.extend(burst)
        print(json.dumps({"sent": sent, "seconds": time.monotonic() - started}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await room.disconnect()


if __name__ == "__main__":
    url, token, agent, topic, megabytes = sys.argv[1:6]
    asyncio.run(flood(url, token, agent, topic, float(megabytes)))
