"""How long a participant takes to learn that its room's livekit-server node died, when its
signalling goes through another node (as an agent's may: the load balancer picks).

Run: ``.venv/bin/python bench/node_death.py`` (about 2 minutes; ``--trials N``). All real,
on 127.0.0.1: a 2-node cluster (Debian's ``redis-server``, two livekit-server nodes,
Debian's ``haproxy``: :class:`~alicia.harness.cluster.LiveKitCluster`). Per trial, a host
joins through one node, and a second participant joins the same room straight through the
node that does *not* host it (livekit-server relays its signalling over Redis). Then
``kill -9`` of the room's node, some seconds after the join (spread over the trials: the
participant's ping goes out every 5 s). Measured: the seconds from the kill until the
participant's SDK is ``reconnected`` (it came back to the node left, where the room starts
again).

Two settings, a fresh cluster per trial: livekit-server's default
``signal_relay.retry_timeout`` (7.5 s) and the one the harness runs,
:data:`~alicia.harness.cluster.RELAY_RETRY_TIMEOUT_S`. The node relaying the participant's
signal learns that the other node is gone only when relaying a signal fails for that long
(to the end of the send attempt that passes it: about 3.5 s with 2 s). What is measured
is the SDK's ``reconnected``, whatever made it reconnect; the figures match the relay
(the default's median is 3.9 s longer, 7.5 - 3.5 s).

Last line: ``RESULT default_p50_s=<x> default_max_s=<x> tuned_p50_s=<x> tuned_max_s=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from livekit import rtc

from alicia.harness.cluster import RELAY_RETRY_TIMEOUT_S, LiveKitCluster
from alicia.protocol import new_id
from bench._exit import run_and_exit
from bench._stats import percentile

SETTINGS = {"default": None, "tuned": RELAY_RETRY_TIMEOUT_S}
PING_S = 5.0
"""livekit-server's ping interval (``PingIntervalSeconds``)."""


async def trial(relay_retry_timeout_s: float | None, wait_s: float) -> float:
    """One cluster: the seconds from the kill of the room's node to the far participant's
    ``reconnected``."""
    with LiveKitCluster(2, relay_retry_timeout_s=relay_retry_timeout_s) as c:
        room = new_id("conv")
        host, far = rtc.Room(), rtc.Room()
        back = asyncio.Event()
        far.on("reconnected", lambda: back.set())
        try:
            await host.connect(c.nodes[0].url, c.token("host", room))
            placed = None
            async with asyncio.timeout(10):
                while placed is None:
                    placed = c.node_of(room)
                    await asyncio.sleep(0.05)
            other = 1 - placed
            await far.connect(c.nodes[other].url, c.token("far", room))
            await asyncio.sleep(wait_s)
            killed = time.monotonic()
            c.nodes[placed].kill()
            async with asyncio.timeout(60):
                await back.wait()
            return time.monotonic() - killed
        finally:
            await far.disconnect()
            await host.disconnect()


async def bench(trials: int) -> None:
    """Run ``trials`` per setting, alternating; print each and the RESULT line."""
    seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for i in range(trials):
        wait_s = 1.0 + PING_S * (i + 0.5) / trials  # the kill's phase against the pings
        for name, timeout in SETTINGS.items():
            took = await trial(timeout, wait_s)
            seconds[name].append(took)
            print(f"trial {i + 1} {name:7s} killed {wait_s:.1f} s after the join: {took:.2f} s")
    figures = " ".join(
        f"{name}_p50_s={percentile(v, 50):.2f} {name}_max_s={max(v):.2f}"
        for name, v in seconds.items()
    )
    print(f"machine: {platform.machine()} {os.cpu_count()} cores")
    print(f"RESULT {figures}")


def main() -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=5, help="trials per setting")
    args = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}; {args.trials} trials per setting "
        f"(signal_relay.retry_timeout: livekit-server's 7.5 s, then {RELAY_RETRY_TIMEOUT_S:g} s)"
    )
    asyncio.run(bench(args.trials))


if __name__ == "__main__":
    run_and_exit(main)
