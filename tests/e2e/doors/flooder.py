"""A participant that floods a byte-stream topic, in a process of its own.

``python -m tests.e2e.doors.flooder URL TOKEN AGENT TOPIC MEGABYTES``: joins, waits for
``AGENT``, then sends half the bytes as one stream that goes on past any cap, and the rest
as streams opened while two of its own are held open, never finished (compressed where
the SDK can: the receiving SDK inflates them, so the agent gets every byte while the
machine pays little to send them). Prints one JSON line
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

from alicia.agent.gate.ffi_routing import stop_capturing_native_logs

CHUNK = 15 * 1024
RAW = 2 * 1024 * 1024
"""Bytes written raw (not compressed) to each of two refused streams."""


async def flood(url: str, token: str, agent: str, topic: str, megabytes: float) -> None:
    stop_capturing_native_logs()  # as the tests' own rooms (tests/conftest.py)
    room = rtc.Room()
    await room.connect(url, token)
    try:
        async with asyncio.timeout(30):
            while agent not in room.remote_participants:
                await asyncio.sleep(0.05)
        total = int(megabytes * 1024 * 1024)
        started = time.monotonic()
        to = [agent]
        # Half as one stream that goes on past any cap. Sent compressed, as livekit's
        # SDKs may (the receiving SDK inflates it: the agent gets every byte).
        await room.local_participant.send_bytes(
            bytes(total // 2), topic=topic, destination_identities=to, compress=True
        )
        sent = total // 2
        # Then streams opened while two of the sender's are held open, never finished:
        # refused as they open, and their bytes come all the same.
        held = []
        for _ in range(2):
            writer = await room.local_participant.stream_bytes(
                "flood", topic=topic, destination_identities=to
            )
            await writer.write(os.urandom(CHUNK))
            held.append(writer)
            sent += CHUNK
        for _ in range(2):  # refused as they open: written on all the same, raw
            writer = await room.local_participant.stream_bytes(
                "flood", topic=topic, destination_identities=to
            )
            for _ in range(RAW // CHUNK):
                await writer.write(os.urandom(CHUNK))
                sent += CHUNK
            held.append(writer)
        piece = 4 * 1024 * 1024
        while sent < total:
            await room.local_participant.send_bytes(
                bytes(piece), topic=topic, destination_identities=to, compress=True
            )
            sent += piece
        print(json.dumps({"sent": sent, "seconds": time.monotonic() - started}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await room.disconnect()


if __name__ == "__main__":
    url, token, agent, topic, megabytes = sys.argv[1:6]
    asyncio.run(flood(url, token, agent, topic, float(megabytes)))
