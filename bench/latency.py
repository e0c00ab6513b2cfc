"""Step delivery latency through the worker vs the raw publish_data path, same run.

Run: ``.venv/bin/python bench/latency.py`` (about a minute). Everything is real and on
127.0.0.1: livekit-server (harness), the worker as its own process
(``python -m alicia.agent start``, ``ALICIA_TIMING_META=true``), the recorded-stream LLM
(``alicia.harness.recorded_llm``, endless reasoning at about 20 steps/s) and the clients.

* worker path: the worker stamps ``meta["alicia.closedMonoNs"]`` with
  ``time.monotonic_ns()`` the moment the segmenter closes a step; a client in the room
  takes ``time.monotonic_ns()`` right after decoding the ReasoningStep. The difference
  covers numbering, storage hand-off (NullSink here), encoding, publish_data, the SFU
  and the client SDK.
* raw path: a second process joins another room on the same server and publishes
  packets of the same size and shape (an encoded ReasoningStep envelope) straight to a
  receiver in this process with ``publish_data``, stamping the time just before the
  call, at the same rate and during the same window.

CLOCK_MONOTONIC is one clock for every process on a Linux host, so the stamps compare
across processes. ``added`` = worker percentile minus raw percentile (p50 and p99
separately). The first 20 samples of each path are warm-up and dropped. Caveats: a
shared 2-core machine where livekit-server, the worker, the LLM server and the clients
all compete for CPU; expect a few ms of jitter between runs.

Last line: ``RESULT raw_p50_ms=<x> raw_p99_ms=<x> added_p50_ms=<x> added_p99_ms=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from livekit import rtc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.engine.conversation import META_CLOSED_AT
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import ENDLESS, Play, RecordedLLM
from alicia.protocol import (
    DATA_TOPIC,
    Configuration,
    ControlStop,
    ReasoningStep,
    StanzaCounter,
    UserMessage,
    decode,
    encode,
    envelope,
    new_id,
)
from bench._exit import run_and_exit
from bench._stats import percentile
from tests.e2e.worker import running_worker

WARMUP = 20
RAW_META = "alicia.sentMonoNs"
STEP_TEXT = (
    "First, the facts. I should separate what is given from what I am assuming, because "
    "mixing them up is the usual source of mistakes."
)


async def wait_for_identity(room: rtc.Room, identity: str, within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while identity not in room.remote_participants:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def raw_sender(url: str, token: str, limit: int, rate: float) -> None:
    """Subprocess side of the raw path: packets at ``rate`` per second from the line
    ``ready`` on stdout until stdin closes (at most ``limit``), so a packet lost as the
    rooms settle or a slow start on a loaded machine costs no sample."""
    loop = asyncio.get_running_loop()
    room = rtc.Room()
    await room.connect(url, token)
    try:
        await wait_for_identity(room, "raw-receiver")
        await asyncio.sleep(1.0)  # let the receiver learn about us (see the transport notes)
        closed = loop.run_in_executor(None, sys.stdin.read)  # EOF: the receiver has enough
        print("ready", flush=True)
        counter = StanzaCounter("server")
        period = 1.0 / rate
        start, sent = time.monotonic(), 0
        for i in range(limit):
            await asyncio.sleep(max(0.0, start + i * period - time.monotonic()))
            if closed.done():
                break
            body = ReasoningStep(
                id=new_id("rs"),
                conversation_id="raw",
                previous_id="msg_raw",
                content=STEP_TEXT,
                step_index=i + 1,
            )
            stamp = time.monotonic_ns()
            env = envelope(
                body, stanza_id=counter.next(), conversation_id="raw", meta={RAW_META: stamp}
            )
            await room.local_participant.publish_data(
                encode(env),
                reliable=True,
                destination_identities=["raw-receiver"],
                topic=DATA_TOPIC,
            )
            sent += 1
        print(f"sent {sent}", flush=True)
    finally:
        await room.disconnect()


class Receiver:
    """Collects (receive time - stamp) of decoded envelopes on one room."""

    def __init__(self, room: rtc.Room, meta_key: str, sender: str | None = None) -> None:
        self.samples: list[float] = []
        self.agent = sender
        self.configured = asyncio.Event()
        self.first = asyncio.Event()
        self._key = meta_key
        room.on("data_received", self._on_data)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC:
            return
        env = decode(packet.data)
        now = time.monotonic_ns()
        if isinstance(env.body, Configuration):
            self.configured.set()
        if isinstance(env.body, ReasoningStep) and env.meta and self._key in env.meta:
            self.samples.append((now - env.meta[self._key]) / 1e6)
            self.first.set()


async def agent_identity(room: rtc.Room, within: float = 30.0) -> str:
    async with asyncio.timeout(within):
        while True:
            for p in room.remote_participants.values():
                if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
                    return p.identity
            await asyncio.sleep(0.02)


async def amain(args: argparse.Namespace) -> None:
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"livekit {version('livekit')}, livekit-agents {version('livekit-agents')}",
        flush=True,
    )
    target = args.steps + WARMUP
    tokens_per_event, chunk_delay = 5, 0.2 / args.rate  # ~25 tokens (5 events) per step
    with LiveKitServer() as server:
        async with RecordedLLM() as llm:
            llm.script(Play(ENDLESS, chunk_delay=chunk_delay, tokens_per_event=tokens_per_event))
            env = {
                "ALICIA_TIMING_META": "true",
                "ALICIA_LOAD_THRESHOLD": "inf",
                "ALICIA_STEP_MAX_DELAY": "5",
            }
            async with running_worker(server, llm.base_url, env=env):
                room_name, raw_room_name = new_id("conv"), new_id("conv")
                client, raw_receiver = rtc.Room(), rtc.Room()
                await client.connect(server.url, server.token("bench-client", room_name))
                await raw_receiver.connect(server.url, server.token("raw-receiver", raw_room_name))
                sender: asyncio.subprocess.Process | None = None
                try:
                    agent = await agent_identity(client)
                    worker_rx = Receiver(client, META_CLOSED_AT, agent)
                    raw_rx = Receiver(raw_receiver, RAW_META)
                    counter = StanzaCounter("client")

                    async def send(body: Any) -> int:
                        sid = counter.next()
                        data = encode(envelope(body, stanza_id=sid, conversation_id=room_name))
                        await client.local_participant.publish_data(
                            data, reliable=True, destination_identities=[agent], topic=DATA_TOPIC
                        )
                        return sid

                    for _ in range(20):  # repeat until answered (first packets may be lost)
                        await send(Configuration(features=["reasoning_step_display"]))
                        try:
                            await asyncio.wait_for(worker_rx.configured.wait(), 1.0)
                            break
                        except TimeoutError:
                            continue
                    # The worker path first: ask until a step comes back (a packet sent
                    # as the agent subscribes may be lost, seen once on a loaded machine).
                    async with asyncio.timeout(120):
                        while not worker_rx.samples:
                            go = UserMessage(
                                id=new_id("msg"), conversation_id=room_name, content="go"
                            )
                            await send(go)
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(worker_rx.first.wait(), 5.0)
                    window = 10 + 3 * target / args.rate
                    sender = await asyncio.create_subprocess_exec(
                        sys.executable,
                        __file__,
                        "--raw-sender",
                        server.url,
                        server.token("raw-sender", raw_room_name),
                        str(math.ceil(window * args.rate)),  # never more than the window
                        str(args.rate),
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                    )
                    assert sender.stdout is not None
                    # Its start (a Python process joining a room) is not what is measured:
                    # both paths' windows open when it is ready to send.
                    ready = await asyncio.wait_for(sender.stdout.readline(), 120)
                    if ready.strip() != b"ready":
                        raise SystemExit(f"the raw sender did not start: {ready!r}")
                    worker_rx.samples.clear()
                    deadline = time.monotonic() + window
                    while (  # noqa: ASYNC110 (two counts and a deadline)
                        len(worker_rx.samples) < target or len(raw_rx.samples) < target
                    ) and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                    await send(ControlStop(conversation_id=room_name))
                    # communicate() closes its stdin: the sender stops and says its count.
                    said, _ = await asyncio.wait_for(sender.communicate(b""), 30)
                    raw_sent = said.decode().strip()
                finally:
                    if sender is not None and sender.returncode is None:
                        sender.kill()
                        await sender.wait()
                    await client.disconnect()
                    await raw_receiver.disconnect()

    worker = worker_rx.samples[WARMUP:target]
    raw = raw_rx.samples[WARMUP:target]
    if len(worker) < args.steps or len(raw) < args.steps:
        raise SystemExit(
            f"too few samples: worker {len(worker)}, raw {len(raw)} "
            f"(of {len(raw_rx.samples)} received; the raw sender: {raw_sent!r})"
        )
    print(f"samples: {len(worker)} worker, {len(raw)} raw (rate {args.rate}/s each; {raw_sent})")
    for name, values in (("worker", worker), ("raw", raw)):
        print(
            f"{name:6s} p50={percentile(values, 50):.3f} ms  p90={percentile(values, 90):.3f} ms"
            f"  p99={percentile(values, 99):.3f} ms  max={max(values):.3f} ms"
        )
    raw_p50, raw_p99 = percentile(raw, 50), percentile(raw, 99)
    added_p50 = percentile(worker, 50) - raw_p50
    added_p99 = percentile(worker, 99) - raw_p99
    print(
        f"RESULT raw_p50_ms={raw_p50:.3f} raw_p99_ms={raw_p99:.3f} "
        f"added_p50_ms={added_p50:.3f} added_p99_ms={added_p99:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (or, with --raw-sender, the raw path's sending process)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--raw-sender":
        url, token, limit, rate = argv[1], argv[2], int(argv[3]), float(argv[4])
        asyncio.run(raw_sender(url, token, limit, rate))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=500, help="samples per path")
    parser.add_argument("--rate", type=float, default=20.0, help="steps per second")
    asyncio.run(amain(parser.parse_args(argv)))


if __name__ == "__main__":
    run_and_exit(main)
