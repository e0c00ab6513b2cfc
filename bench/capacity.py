"""What one room asks of Postgres per second, with storage only and with failover.

Run: ``.venv/bin/python bench/capacity.py`` (about 3 minutes; ``--rooms N``,
``--seconds S``). All real, on 127.0.0.1: livekit-server (webhooks to the watcher), a
throwaway Postgres, the recorded-stream LLM in its own process at about 50 tokens/s per
room (the realistic load of ``bench/rooms.py``: the ``vllm_reasoning`` stream, one SSE
chunk per token), a worker (``python -m alicia.agent start``, thread executor) and, for
the failover trial, the watcher. Each room has one client asking one question after
another for ``--seconds``.

Two trials, each on a fresh database: ``storage`` (``DATABASE_URL`` set: messages, steps,
sentences and tool uses stored) and ``failover`` (also ``ALICIA_FAILOVER``: every
envelope logged before it leaves, each room's lease renewed every 0.25 s). Per trial,
from Postgres's own counters (``pg_stat_user_tables``, ``pg_total_relation_size``) over
the trial: rows inserted, rows updated and bytes grown per room-second, and lease
renewals (``alicia_agents`` updates) per room-second.

Also per trial: transactions committed per room-second (``pg_stat_database``: the load
a Postgres takes is its commits more than its rows) and the most connections open to the
database at once (``pg_stat_activity``, sampled every 0.5 s: what the worker and the
watcher hold; Postgres serves ``max_connections``, 100 by default); and the CPU per
room-second of the worker (its process tree), of livekit-server and of Postgres (the
postmaster's tree: every backend), read from ``/proc``. The harness's Postgres runs
without ``fsync``: its CPU is what a commit costs, not its disk.

Caveats: one 2-core machine runs everything; turns are short and back to back, so this
is a busy room (a person reads and thinks between questions: real rooms write less).

Last line: ``RESULT rooms=<n> storage_rows_per_room_s=<x> storage_bytes_per_room_s=<x>
failover_rows_per_room_s=<x> failover_bytes_per_room_s=<x> renewals_per_room_s=<x>
storage_commits_per_room_s=<x> failover_commits_per_room_s=<x> storage_connections=<n>
failover_connections=<n> worker_cpu_ms_per_room_s=<x> livekit_cpu_ms_per_room_s=<x>
storage_postgres_cpu_ms_per_room_s=<x> failover_postgres_cpu_ms_per_room_s=<x>``
(the worker's and livekit-server's: the failover trial's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.ports import free_port
from alicia.harness.recorded_llm import load_manifest
from bench._stats import tree_cpu_seconds
from bench.failover import llm_process
from tests.e2e.failover.helpers import following_client, running_watcher
from tests.e2e.worker import running_worker
from tests.support.db import fetch, new_database

STREAM = "vllm_reasoning"
COUNTERS = (
    "SELECT relname, n_tup_ins, n_tup_upd, pg_total_relation_size(relid) AS bytes "
    "FROM pg_stat_user_tables WHERE relname LIKE 'alicia_%'"
)


CONNECTIONS = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


async def commits(url: str) -> int:
    """Transactions committed in the database so far (Postgres's statistics)."""
    return int((await fetch(url, COMMITS))[0]["xact_commit"])


async def most_connections(url: str, stop: asyncio.Event) -> int:
    """The most connections open to the database at once (sampled every 0.5 s until
    ``stop``), the sampling's own connection not counted."""
    most = 0
    while not stop.is_set():
        most = max(most, int((await fetch(url, CONNECTIONS))[0]["n"]) - 1)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    return most


async def counters(url: str) -> dict[str, dict[str, int]]:
    """Per table: rows inserted, rows updated, bytes (Postgres's statistics)."""
    await asyncio.sleep(1.0)  # the statistics collector reports every 0.5 s or so
    rows = await fetch(url, COUNTERS)
    return {
        str(r["relname"]): {k: int(r[k]) for k in ("n_tup_ins", "n_tup_upd", "bytes")} for r in rows
    }


async def trial(
    livekit: LiveKitServer, postgres: PostgresServer, llm: str, port: int, *, failover: bool,
    rooms: int, seconds: float, tmp: Path,
) -> dict[str, float]:  # fmt: skip
    """One trial; its figures per room-second."""
    name = "failover" if failover else "storage"
    url = await new_database("postgres", postgres, tmp, name)
    env = {"DATABASE_URL": url, "ALICIA_LOAD_THRESHOLD": "inf", "ALICIA_JOB_EXECUTOR": "thread"}
    if failover:
        env |= {"ALICIA_FAILOVER": "true", "ALICIA_AGENT_NAME": "alicia"}
    question = load_manifest()[STREAM].user
    async with contextlib.AsyncExitStack() as stack:
        if failover:
            await stack.enter_async_context(running_watcher(livekit, url, port=port))
        worker = await stack.enter_async_context(running_worker(livekit, llm, env=env))
        clients = [
            await stack.enter_async_context(following_client(livekit, f"{name}-{i}", f"user{i}"))
            for i in range(rooms)
        ]
        for c in clients:
            await c.wait_for_agent(60)
            await c.handshake()
        before = await counters(url)
        committed = await commits(url)
        pids = {"worker": worker.proc.pid, "livekit": livekit.pid, "postgres": postgres.pid}
        cpu = {k: tree_cpu_seconds(pid) for k, pid in pids.items()}
        stop = asyncio.Event()
        sampling = asyncio.create_task(most_connections(url, stop))
        started = time.monotonic()
        turns = 0

        async def talk(c: Any) -> None:
            nonlocal turns
            while time.monotonic() - started < seconds:
                await c.wait_turn_end(await c.ask(question), within=120)
                turns += 1

        try:
            await asyncio.gather(*(talk(c) for c in clients))
        finally:
            stop.set()
            connections = await sampling
        elapsed = time.monotonic() - started
        cpu = {k: tree_cpu_seconds(pid) - cpu[k] for k, pid in pids.items()}
        committed = await commits(url) - committed
        after = await counters(url)
    room_s = rooms * elapsed
    grown = {t: {k: after[t][k] - before.get(t, {}).get(k, 0) for k in after[t]} for t in after}
    for table, d in sorted(grown.items()):
        if any(d.values()):
            ins, upd, size = (d[k] / room_s for k in ("n_tup_ins", "n_tup_upd", "bytes"))
            print(
                f"  {name:8} {table:28} inserts/room-s {ins:7.2f}  updates/room-s {upd:7.2f}  "
                f"bytes/room-s {size:9.0f}",
                flush=True,
            )
    print(f"  {name}: {turns} turns in {elapsed:.1f} s over {rooms} rooms", flush=True)
    print(
        f"  {name}: {committed / room_s:.2f} commits/room-s, at most {connections} "
        f"connections open at once (the worker and the watcher)",
        flush=True,
    )
    per_room = {k: v * 1000 / room_s for k, v in cpu.items()}
    print(
        f"  {name}: CPU ms/room-s: worker {per_room['worker']:.1f}, livekit-server "
        f"{per_room['livekit']:.1f}, Postgres {per_room['postgres']:.1f}",
        flush=True,
    )
    return {
        **{f"{k}_cpu": v for k, v in per_room.items()},
        "commits": committed / room_s,
        "connections": connections,
        "rows": sum(d["n_tup_ins"] for d in grown.values()) / room_s,
        "bytes": sum(d["bytes"] for d in grown.values()) / room_s,
        "renewals": grown.get("alicia_agents", {}).get("n_tup_upd", 0) / room_s,
    }


async def bench(rooms: int, seconds: float) -> None:
    """Both trials; the figures and the RESULT line."""
    port = free_port()
    print(f"machine: {platform.machine()}, {platform.python_version()}; rooms={rooms}")
    with (
        LiveKitServer(webhooks=[f"http://127.0.0.1:{port}/webhook"]) as livekit,
        PostgresServer() as postgres,
        tempfile.TemporaryDirectory() as tmp,
    ):
        async with llm_process(0.02, STREAM) as llm:  # about 50 tokens/s per room
            common = {"rooms": rooms, "seconds": seconds, "tmp": Path(tmp)}
            stored = await trial(livekit, postgres, llm, port, failover=False, **common)  # type: ignore[arg-type]
            failover = await trial(livekit, postgres, llm, port, failover=True, **common)  # type: ignore[arg-type]
    print(
        f"RESULT rooms={rooms} storage_rows_per_room_s={stored['rows']:.2f} "
        f"storage_bytes_per_room_s={stored['bytes']:.0f} "
        f"failover_rows_per_room_s={failover['rows']:.2f} "
        f"failover_bytes_per_room_s={failover['bytes']:.0f} "
        f"renewals_per_room_s={failover['renewals']:.2f} "
        f"storage_commits_per_room_s={stored['commits']:.2f} "
        f"failover_commits_per_room_s={failover['commits']:.2f} "
        f"storage_connections={stored['connections']:.0f} "
        f"failover_connections={failover['connections']:.0f} "
        f"worker_cpu_ms_per_room_s={failover['worker_cpu']:.1f} "
        f"livekit_cpu_ms_per_room_s={failover['livekit_cpu']:.1f} "
        f"storage_postgres_cpu_ms_per_room_s={stored['postgres_cpu']:.1f} "
        f"failover_postgres_cpu_ms_per_room_s={failover['postgres_cpu']:.1f}"
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rooms", type=int, default=10, help="rooms per trial (default 10)")
    parser.add_argument("--seconds", type=float, default=60.0, help="talk per trial (default 60)")
    args = parser.parse_args(argv)
    asyncio.run(bench(args.rooms, args.seconds))


if __name__ == "__main__":
    main()
