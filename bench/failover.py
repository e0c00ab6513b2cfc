"""Takeover time after ``kill -9`` (or SIGSTOP, ``--stall``) of a worker: rooms mid-turn,
failover on LiveKit's own dispatch, measured at the clients.

Run: ``.venv/bin/python bench/failover.py`` (about a minute; ``--rooms N``,
``--stall``). All real, on 127.0.0.1: livekit-server (harness, webhooks to the
watcher), a throwaway Postgres, the recorded-stream LLM in its own process (each turn
slowed to about 35 s so it is cut mid-answer), the watcher (``python -m
alicia.agent.watch``) and two workers (``python -m alicia.agent start`` with
``ALICIA_FAILOVER=true``, explicit dispatch, the thread job executor).

The first worker takes every room (the second starts only afterwards); each room has
one client (``tests/e2e/failover/helpers.py`` ``FollowingClient``: trusts only agent participants,
resumes with a new one). Once every room has streamed a step, the first worker's process
group gets SIGKILL at t0. Per room, the takeover time is from t0 to the moment the new
agent answered the client's resume (its Configuration reply); ``gaps`` and
``duplicates`` compare, per client, the server stanzas received with the envelopes the
sent log holds for it (``alicia_sent_log``: what any agent sent it, by recipient and
level).

``--stall``: the first worker's process group gets SIGSTOP instead, for ``--stall-s``
seconds (default 14: longer than livekit-server's 10 s job assignment timeout, so a
re-dispatch must never wait on the stopped worker), then SIGCONT; the figures are taken
4 s after that. ``stale_envelopes``: packets a client got from an old agent after the
new agent's first; ``stale_rows``: logged envelopes (``alicia_sent_log``) whose bytes are
not what the client got for that stanza (an old agent's write that landed).

``--nodes 2``: a livekit-server cluster (``harness/cluster.py``: the nodes share one
Redis, haproxy in front, every node's webhooks to the watcher); the workers, the watcher
and the clients reach it through the balancer, as a deployment does.

``--voice``: voice rooms (``ALICIA_VOICE=offline``: an AgentSession with the reasoning
bridge, espeak-ng speaking), each cut while its agent speaks the answer (its StartAnswer
received), as issue 48 asks: a new agent within 5 s.

Caveats: the heartbeat timeout (``ALICIA_HEARTBEAT_TIMEOUT``, 1.5 s) bounds detection from
below; a shared 2-core machine hosts everything at once.

Last line: ``RESULT rooms=<n> takeover_p50_s=<x> takeover_max_s=<x> gaps=<n>
duplicates=<n>`` (target: max <= 5 s, 0 gaps, 0 duplicates); with ``--stall`` also
``stale_envelopes=<n> stale_rows=<n>`` (target 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.cluster import LiveKitCluster
from alicia.harness.ports import free_port, port_open
from alicia.harness.recorded_llm import load_manifest
from alicia.protocol import ReasoningStep, StartAnswer, decode
from bench._stats import percentile
from tests.e2e.failover.helpers import (
    FollowingClient,
    following_client,
    logged_for,
    running_watcher,
)
from tests.e2e.worker import running_worker
from tests.support.db import fetch, new_database

ROOT = Path(__file__).resolve().parent.parent
STREAM = "deepseek_reasoning_content"


@contextlib.asynccontextmanager
async def llm_process(chunk_delay: float, stream: str = STREAM) -> AsyncIterator[str]:
    """``python -m alicia.harness.recorded_llm`` in its own process, answering ``stream``;
    its base URL."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "alicia.harness.recorded_llm", "--port", str(port),
        "--chunk-delay", str(chunk_delay), "--default", stream,
        cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await port_open(port)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        await proc.wait()


async def bench(
    rooms: int, stall_s: float | None = None, *, voice: bool = False, nodes: int = 1
) -> None:
    """One takeover of ``rooms`` rooms (``stall_s``: SIGSTOP for that long, not kill -9;
    ``voice``: voice rooms, cut while the answer is spoken; ``nodes``: a cluster of that
    many livekit-server nodes); print the figures and the RESULT line."""
    port = free_port()
    hooks = [f"http://127.0.0.1:{port}/webhook"]
    server: LiveKitServer | LiveKitCluster = (
        LiveKitCluster(nodes, webhooks=hooks) if nodes > 1 else LiveKitServer(webhooks=hooks)
    )
    with (
        server as livekit,
        PostgresServer() as postgres,
        tempfile.TemporaryDirectory() as tmp,
    ):
        url = await new_database("postgres", postgres, Path(tmp), "failover")
        env = {
            "DATABASE_URL": url,
            "ALICIA_FAILOVER": "true",
            "ALICIA_AGENT_NAME": "alicia",
            "ALICIA_JOB_EXECUTOR": "thread",
            "ALICIA_LOAD_THRESHOLD": "inf",
            **({"ALICIA_VOICE": "offline"} if voice else {}),
        }
        question = load_manifest()[STREAM].user
        async with contextlib.AsyncExitStack() as stack:
            llm = await stack.enter_async_context(llm_process(0.1))  # a turn: about 35 s
            watcher = await stack.enter_async_context(running_watcher(livekit, url, port=port))
            first = await stack.enter_async_context(running_worker(livekit, llm, env=env))
            cut: list[tuple[str, FollowingClient]] = []
            for i in range(rooms):
                room = f"bench-{i}"
                client = await stack.enter_async_context(
                    following_client(livekit, room, f"user{i}")
                )
                cut.append((room, client))
            try:
                for _, client in cut:
                    await client.wait_for_agent(60)
                    await client.handshake()
                    await client.ask(question)
            except TimeoutError as exc:  # the logs say which side never acted
                raise RuntimeError(
                    f"no agent came\n--- watcher ---\n{watcher.log()}\n"
                    f"--- worker ---\n{first.notable()}\n{first.log()}"
                ) from exc
            for _, client in cut:  # a voice room's agent speaks its answer (180 s: once
                # more than 90 on a loaded 2-core machine, the suite's smoke run at nice 10)
                await client.wait_for(StartAnswer if voice else ReasoningStep, within=180)
            if voice:
                await asyncio.sleep(1.0)  # its first sentence is being spoken
            await stack.enter_async_context(running_worker(livekit, llm, env=env))
            olds = {client.agent for _, client in cut}
            t0 = time.monotonic()
            os.killpg(first.proc.pid, signal.SIGSTOP if stall_s else signal.SIGKILL)
            try:
                async with asyncio.timeout(120):
                    while not all(client.resumed for _, client in cut):  # noqa: ASYNC110
                        await asyncio.sleep(0.02)
                times = [client.resumed[0] - t0 for _, client in cut]
            finally:
                if stall_s:
                    await asyncio.sleep(max(0.0, t0 + stall_s - time.monotonic()))
                    os.killpg(first.proc.pid, signal.SIGCONT)
            await asyncio.sleep(4.0 if stall_s else 2.0)  # what is in flight arrives
            gaps = duplicates = stale = stale_rows = 0
            for i, (room, client) in enumerate(cut):
                got = [-e.stanza_id for e in client.box]
                duplicates += sum(n - 1 for n in Counter(got).values())
                expected = set(await logged_for(url, room, f"user{i}", "full"))
                gaps += len(expected - set(got))
                if stall_s:
                    stale += stale_envelopes(client, olds)
                    stale_rows += await stale_logged(url, room, client)
    p50, worst = percentile(times, 50), max(times)
    print(f"takeover per room (s): {' '.join(f'{t:.2f}' for t in sorted(times))}")
    stalled = f" stale_envelopes={stale} stale_rows={stale_rows}" if stall_s else ""
    print(
        f"RESULT rooms={rooms} takeover_p50_s={p50:.2f} takeover_max_s={worst:.2f} "
        f"gaps={gaps} duplicates={duplicates}{stalled}"
    )


def stale_envelopes(client: FollowingClient, olds: set[str]) -> int:
    """Packets from an old agent that arrived after the client's new agent's first."""
    new = [t for who, t, _ in client.heard if who not in olds]
    if not new:
        return 0
    return sum(1 for who, t, _ in client.heard if who in olds and t >= min(new))


async def stale_logged(url: str, room: str, client: FollowingClient) -> int:
    """Logged envelopes of ``room`` that differ from what the client got for that stanza."""
    rows = await fetch(
        url,
        "SELECT stanza, data FROM alicia_sent_log "
        f"WHERE conversation_id = '{room}' AND data IS NOT NULL",
    )
    got: dict[int, set[bytes]] = {}
    for _, _, data in client.heard:
        got.setdefault(-decode(data).stanza_id, set()).add(data)
    return sum(1 for r in rows if r["stanza"] in got and got[r["stanza"]] != {bytes(r["data"])})


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rooms", type=int, default=10, help="rooms cut mid-turn")
    parser.add_argument(
        "--stall", action="store_true", help="SIGSTOP the worker (then SIGCONT), not kill -9"
    )
    parser.add_argument("--stall-s", type=float, default=14.0, help="seconds it stays stopped")
    parser.add_argument("--voice", action="store_true", help="voice rooms, cut mid-speech")
    parser.add_argument("--nodes", type=int, default=1, help="livekit-server nodes (default 1)")
    args = parser.parse_args(argv)
    fault = f"SIGSTOP for {args.stall_s:g} s" if args.stall else "kill -9"
    kind = "voice rooms" if args.voice else "rooms"
    print(
        f"Python {sys.version.split()[0]} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.rooms} {kind}, {fault} of the worker holding them; {args.nodes} node(s)"
    )
    stall = args.stall_s if args.stall else None
    asyncio.run(bench(args.rooms, stall, voice=args.voice, nodes=args.nodes))


if __name__ == "__main__":
    main()
