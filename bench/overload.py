"""Overload without cascade: more rooms offered than the workers can serve.

Run: ``.venv/bin/python bench/overload.py`` (about 2 minutes; ``--workers W``,
``--max-rooms M``, ``--extra X``, ``--seconds S``). All real, on 127.0.0.1: livekit-server
(webhooks to the watcher), a throwaway Postgres, the recorded-stream LLM in its own process
at about 50 tokens/s per room (``vllm_reasoning``, one SSE chunk per token), the watcher and
``W`` workers (``python -m alicia.agent start`` with ``ALICIA_FAILOVER=true``,
``ALICIA_MAX_ROOMS=M``: the worker's load is 0.7 x rooms / M and it reports itself full at M, the
default threshold; thread executor; the default heartbeat, 0.25 s, timeout 1.5 s, or
``--lease-timeout``).

1. **Served**: ``W x M`` rooms, one client each, get their agents; each client asks one
   question after another (the next once the answer ended) for ``S`` seconds.
2. **Overload**: ``X`` more rooms are offered at once, each with a client waiting for an
   agent (the watcher dispatches on its ``participant_joined`` webhook and again after
   each dispatch grace); the first rooms' clients go on talking for ``S`` more seconds.

Figures: rooms **offered**, **served** (an agent came), **refused** (none came by the
end), **moved** (a room whose agent changed: the client followed a second agent, or the
room's lease epoch passed 1), the watcher's dispatches, the longest a lease went
unrenewed during the overload (sampled every 0.5 s from ``alicia_agents.heartbeat_at``,
the database clock: over the timeout, the watcher would have moved the room), and **step
delivery**: per reasoning step of the first rooms, when it arrived after its question,
minus the median of that step's arrival over the served phase (past its first
5 s) (the recorded LLM keeps
one pace, so this is the delay a step took beyond the usual); p99 in each phase.

Caveats: one 2-core machine runs every process, so the overload also takes CPU from the
LLM and livekit-server; a person reads between questions (real rooms are quieter).

Last line: ``RESULT offered=<n> served=<n> refused=<n> moved=<n> dispatches=<n>
renewal_lag_max_s=<x> step_p99_ms_served=<x> step_p99_ms_overload=<x>`` (targets: served
= W x M, moved 0, lag under the 1.5 s timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.ports import free_port
from alicia.harness.recorded_llm import load_manifest
from alicia.protocol import ReasoningStep, decode
from bench._stats import percentile
from bench.failover import llm_process
from tests.e2e.failover.helpers import FollowingClient, following_client, running_watcher
from tests.e2e.worker import running_worker
from tests.support.db import fetch, new_database

STREAM = "vllm_reasoning"
WARMUP_S = 5.0
"""The served phase's first seconds (each room's first turn) are not in its figures."""
LAG = (
    "SELECT max(extract(epoch from clock_timestamp()) - heartbeat_at) AS lag "
    "FROM alicia_agents WHERE agent_identity IS NOT NULL"
)


def step_offsets(client: FollowingClient, asked: dict[str, float]) -> list[tuple[int, float]]:
    """(step index in its turn, seconds after its question) of each step the client got."""
    out: list[tuple[int, float]] = []
    for _, at, data in client.heard:
        env = decode(data)
        body = env.body
        if isinstance(body, ReasoningStep) and body.previous_id in asked:
            out.append((body.step_index, at - asked[body.previous_id]))
    return out


async def talk(client: FollowingClient, until: float, asked: dict[str, float]) -> int:
    """Questions one after another until ``until`` (monotonic); the turns."""
    question = load_manifest()[STREAM].user
    turns = 0
    while time.monotonic() < until:
        sent = time.monotonic()
        user_id = await client.ask(question)
        asked[user_id] = sent
        await client.wait_turn_end(user_id, within=120)
        turns += 1
    return turns


async def renewal_lag(url: str, stop: asyncio.Event) -> float:
    """The longest any held lease went unrenewed, sampled every 0.5 s until ``stop``."""
    worst = 0.0
    while not stop.is_set():
        rows = await fetch(url, LAG)
        if rows and rows[0]["lag"] is not None:
            worst = max(worst, float(rows[0]["lag"]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    return worst


async def epochs(url: str) -> dict[str, int]:
    """Each room's lease epoch."""
    rows = await fetch(url, "SELECT conversation_id, epoch FROM alicia_agents")
    return {str(r["conversation_id"]): int(r["epoch"]) for r in rows}


def delays_ms(
    offsets: list[tuple[int, float]], usual: dict[int, float]
) -> list[float]:  # fmt: skip
    """Each step's arrival beyond its index's usual one, in ms."""
    return [(t - usual[i]) * 1000 for i, t in offsets if i in usual]


async def bench(
    workers: int, max_rooms: int, extra: int, seconds: float, lease_timeout: float
) -> None:
    """Both phases; the figures and the RESULT line."""
    port = free_port()
    capacity = workers * max_rooms
    print(
        f"machine: {platform.machine()}, {platform.python_version()}; workers={workers} "
        f"max_rooms={max_rooms} (capacity {capacity}) extra={extra} seconds={seconds:g}",
        flush=True,
    )
    with (
        LiveKitServer(webhooks=[f"http://127.0.0.1:{port}/webhook"]) as livekit,
        PostgresServer() as postgres,
        tempfile.TemporaryDirectory() as tmp,
    ):
        url = await new_database("postgres", postgres, Path(tmp), "overload")
        env = {
            "DATABASE_URL": url,
            "ALICIA_FAILOVER": "true",
            "ALICIA_AGENT_NAME": "alicia",
            "ALICIA_JOB_EXECUTOR": "thread",
            "ALICIA_MAX_ROOMS": str(max_rooms),
            "ALICIA_HEARTBEAT_TIMEOUT": f"{lease_timeout:g}",
        }
        async with contextlib.AsyncExitStack() as stack:
            llm = await stack.enter_async_context(llm_process(0.02, STREAM))
            lease = {"ALICIA_HEARTBEAT_TIMEOUT": f"{lease_timeout:g}"}
            watching = running_watcher(livekit, url, port=port, env=lease)
            watcher = await stack.enter_async_context(watching)
            procs = [
                await stack.enter_async_context(running_worker(livekit, llm, env=env))
                for _ in range(workers)
            ]
            served: list[FollowingClient] = []
            for i in range(capacity):
                c = await stack.enter_async_context(
                    following_client(livekit, f"served-{i}", f"user{i}")
                )
                try:
                    await c.wait_for_agent(60)
                except TimeoutError:
                    held = await fetch(url, "SELECT worker_id, conversation_id FROM alicia_agents")
                    logs = "\n".join(w.notable()[-3000:] for w in procs) + f"\n{held}"
                    raise RuntimeError(
                        f"room {i} of {capacity} got no agent\n{watcher.log()}\n{logs}"
                    ) from None
                await c.handshake()
                served.append(c)
            asked: dict[str, float] = {}
            start = time.monotonic()
            until = start + seconds
            turns = sum(await asyncio.gather(*(talk(c, until, asked) for c in served)))
            warm = start + min(WARMUP_S, seconds / 3)  # each room's first turns: not counted
            asked = {k: t for k, t in asked.items() if t >= warm}
            phase_a = {id(c): len(c.heard) for c in served}
            usual_by: dict[int, list[float]] = defaultdict(list)
            for c in served:
                for i, t in step_offsets(c, asked):
                    usual_by[i].append(t)
            usual = {i: statistics.median(ts) for i, ts in usual_by.items()}
            before = [d for c in served for d in delays_ms(step_offsets(c, asked), usual)]
            print(f"served: {capacity} rooms, {turns} turns in {seconds:g} s", flush=True)

            stop = asyncio.Event()
            lag = asyncio.ensure_future(renewal_lag(url, stop))
            offered = [
                await stack.enter_async_context(
                    following_client(livekit, f"offered-{i}", f"extra{i}")
                )
                for i in range(extra)
            ]
            late: dict[str, float] = {}
            until = time.monotonic() + seconds
            turns = sum(await asyncio.gather(*(talk(c, until, late) for c in served)))
            stop.set()
            lag_max = await lag
            print(f"overload: {extra} more rooms offered, {turns} turns", flush=True)
            during: list[float] = []
            for c in served:
                c.heard = c.heard[phase_a[id(c)] :]
                during += delays_ms(step_offsets(c, late), usual)
            leases = await epochs(url)
            dispatched = watcher.log().count("agent dispatched to")
            moved = sum(len(c.agents) > 1 or leases.get(c.conversation_id, 1) > 1 for c in served)
            got = sum(bool(c.agent) for c in offered)
            rows = await fetch(
                url,
                "SELECT worker_id, count(*) AS n FROM alicia_agents "
                "WHERE agent_identity IS NOT NULL GROUP BY worker_id",
            )
            print("rooms per worker: " + " ".join(str(r["n"]) for r in rows), flush=True)
    served_n = capacity + got
    p99_a = percentile(before, 99) if before else float("nan")
    p99_b = percentile(during, 99) if during else float("nan")
    print(
        f"RESULT offered={capacity + extra} served={served_n} refused={extra - got} "
        f"moved={moved} dispatches={dispatched} renewal_lag_max_s={lag_max:.2f} "
        f"step_p99_ms_served={p99_a:.0f} step_p99_ms_overload={p99_b:.0f}"
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="workers (default 2)")
    parser.add_argument("--max-rooms", type=int, default=8, help="rooms per worker (default 8)")
    parser.add_argument("--extra", type=int, default=8, help="rooms offered beyond (default 8)")
    parser.add_argument("--seconds", type=float, default=30.0, help="talk per phase (default 30)")
    parser.add_argument(
        "--lease-timeout",
        type=float,
        default=1.5,
        help="ALICIA_HEARTBEAT_TIMEOUT of the workers and the watcher (default 1.5, theirs)",
    )
    args = parser.parse_args(argv)
    asyncio.run(bench(args.workers, args.max_rooms, args.extra, args.seconds, args.lease_timeout))


if __name__ == "__main__":
    main()
