"""Soak: the realistic rooms load on ONE worker for minutes; does it leak or slow down?

Run: ``.venv/bin/python bench/soak.py --minutes 20 --rooms 62`` (``--rooms``: half of the
rooms figure of ``bench/rooms.py``). All real, on 127.0.0.1, all on this machine: the same
load as ``bench/rooms.py`` (its ``Load``): livekit-server, the recorded LLM in its own
process serving token-level turns (one SSE chunk per token, ``--rate`` tokens/s per room,
``--paragraphs`` paragraphs of about 60 tokens, then a three-sentence answer), one worker
process (``python -m alicia.agent start``, thread job executor, every room in it) and one
client per room (``rtc.Room`` in client processes) that sends its next UserMessage as soon
as the answer ends, for the whole run.

First a warm-up: the LLM serves short turns (one paragraph, ``--warmup-rate`` tokens/s)
until every room has made ``--warmup-turns`` turns, by default the engine's
``RETAINED_TURNS``, after which a conversation's memory stops growing (its history, step
chains and remembered ids are full). Then the load above for ``--minutes``: a slope
measured while each room's bounded stores are still filling would show their filling, not
a leak.

Every ``--interval`` seconds (default 60; at most a sixth of the run, so a short run still
has samples) it samples the worker process: ``VmRSS`` (``/proc/<pid>/status``), open file
descriptors (entries of ``/proc/<pid>/fd``), its CPU ms per room-second over the interval
(``/proc/<pid>/stat``), the LLM's tokens/s, and the step delivery p50/p99 of the steps
received in the interval (client decode time minus the LLM server's write time of the
step's last token, CLOCK_MONOTONIC across processes, as in ``bench/rooms.py``). Slopes are
least-squares fits over the samples after ``--warmup-minutes`` (default 2; at most a
quarter of the run), in MB/h and fds/h. At the end the clients stop starting turns, every
turn under way runs to its end, and lost/reordered steps are counted over the whole run.

Caveats: a shared 2-core machine hosts every process, so p99 follows the neighbours' load
too; RSS of a CPython process grows in steps (arenas, allocator caches), so a short run's
slope is noisy: read it with the samples printed, and over 20 minutes.

Last line: ``RESULT rss_slope_mb_per_h=<x> fd_slope_per_h=<x> p99_ms_first=<x>
p99_ms_last=<x>`` (first: the first sample after the warm-up; last: the last sample).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.engine.retention import RETAINED_TURNS
from alicia.harness import LiveKitServer
from bench._stats import cpu_seconds, fd_count, percentile, rss_bytes, slope
from bench.rooms import Load


@dataclass
class Sample:
    t_s: float  # since the first sample's interval began
    rss_mb: float
    fds: int
    cpu_ms_per_room_s: float
    tokens_per_s: float
    steps: int
    p50_ms: float
    p99_ms: float

    def line(self) -> str:
        return (
            f"t={self.t_s:7.1f} s rss={self.rss_mb:8.1f} MB fds={self.fds:4d} "
            f"cpu={self.cpu_ms_per_room_s:5.2f} ms/room-s tokens_per_s={self.tokens_per_s:6.0f} "
            f"steps={self.steps:5d} p50={self.p50_ms:6.1f} ms p99={self.p99_ms:6.1f} ms"
        )


async def soak(args: argparse.Namespace) -> None:
    total = args.minutes * 60.0
    interval = min(args.interval, total / 6)
    warmup = min(args.warmup_minutes * 60.0, total / 4)
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"livekit {version('livekit')}, livekit-agents {version('livekit-agents')}; "
        f"one worker, {args.rooms} rooms, {args.rate:g} tokens/s per room, "
        f"{args.minutes:g} min, a sample every {interval:g} s, slopes after {warmup:g} s",
        flush=True,
    )
    samples: list[Sample] = []
    with LiveKitServer(log_level=os.environ.get("ALICIA_BENCH_SERVER_LOG", "warn")) as server:
        async with Load(server, args.rooms, rate=args.rate, paragraphs=args.paragraphs) as load:
            print(
                f"worker pid {load.pid}: {load.streaming}/{args.rooms} rooms streaming, "
                f"RSS before the rooms {load.rss_before / 2**20:.1f} MB",
                flush=True,
            )
            pid, joined = load.pid, load.joined
            if args.warmup_turns > 0:
                await warm_up(load, args)
            begin = previous = time.monotonic_ns()
            cpu = cpu_seconds(pid)
            while previous - begin < total * 1e9 - 1e6:
                due = previous + int(interval * 1e9)
                await asyncio.sleep(max(0.0, (due - time.monotonic_ns()) / 1e9))
                if not load.alive():
                    print("the worker process is gone", flush=True)
                    break
                now = time.monotonic_ns()
                used = cpu_seconds(pid)
                seconds = (now - previous) / 1e9
                latencies, _ = joined.latencies(previous, now)
                sample = Sample(
                    t_s=(now - begin) / 1e9,
                    rss_mb=rss_bytes(pid) / 2**20,
                    fds=fd_count(pid),
                    cpu_ms_per_room_s=(used - cpu) * 1000 / (args.rooms * seconds),
                    tokens_per_s=joined.tokens_between(previous, now) / seconds,
                    steps=len(latencies),
                    p50_ms=percentile(latencies, 50),
                    p99_ms=percentile(latencies, 99),
                )
                samples.append(sample)
                print(sample.line(), flush=True)
                previous, cpu = now, used
            await load.stop()
            print(
                f"whole run: steps={len(joined.samples)} turns={joined.turns} "
                f"lost={joined.lost()} reordered={joined.reordered} "
                f"mismatched={joined.mismatched} bad_answers={joined.bad_answers} "
                f"errors={joined.errors} unfinished={load.unfinished}",
                flush=True,
            )
    kept = [s for s in samples if s.t_s > warmup] or samples[-1:]
    hours = [s.t_s / 3600 for s in kept]
    rss_slope = slope(hours, [s.rss_mb for s in kept])
    fd_slope = slope(hours, [float(s.fds) for s in kept])
    first = kept[0].p99_ms if kept else float("nan")
    last = kept[-1].p99_ms if kept else float("nan")
    print(
        f"RESULT rss_slope_mb_per_h={rss_slope:.2f} fd_slope_per_h={fd_slope:.2f} "
        f"p99_ms_first={first:.1f} p99_ms_last={last:.1f}"
    )


_STALLED_S = 60.0


async def warm_up(load: Load, args: argparse.Namespace) -> None:
    """Short, fast turns until every room has made ``--warmup-turns`` turns (by default
    the turns after which a conversation's memory stops growing), then the soak's load."""
    started = time.monotonic()
    await load.play(args.warmup_rate, 1)
    shown = moved = started
    turns = load.joined.turns
    while load.fewest_turns() < args.warmup_turns and load.alive():
        await asyncio.sleep(1.0)
        if load.joined.turns != turns:
            turns, moved = load.joined.turns, time.monotonic()
        elif time.monotonic() - moved > _STALLED_S:
            print(f"warm-up: no turn ended for {_STALLED_S:g} s; going on", flush=True)
            break
        if time.monotonic() - shown >= 30:
            shown = time.monotonic()
            print(
                f"warm-up: {time.monotonic() - started:5.0f} s, fewest turns in a room "
                f"{load.fewest_turns()}, rss={rss_bytes(load.pid) / 2**20:.1f} MB",
                flush=True,
            )
    await load.play(args.rate, args.paragraphs)
    print(
        f"warm-up done in {time.monotonic() - started:.0f} s: every room made at least "
        f"{load.fewest_turns()} turns ({load.joined.turns} in all), "
        f"rss={rss_bytes(load.pid) / 2**20:.1f} MB; now {args.rate:g} tokens/s, "
        f"{args.paragraphs} paragraphs per turn",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Run the soak."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="length of the run")
    parser.add_argument(
        "--rooms", type=int, default=62, help="rooms (half of bench/rooms.py's figure)"
    )
    parser.add_argument("--rate", type=float, default=50.0, help="tokens/s per room")
    parser.add_argument("--paragraphs", type=int, default=4, help="reasoning paragraphs per turn")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    parser.add_argument(
        "--warmup-turns",
        type=int,
        default=RETAINED_TURNS,
        help="short fast turns per room before the measured minutes (0: none); by default "
        "the turns after which a conversation's memory stops growing",
    )
    parser.add_argument(
        "--warmup-rate", type=float, default=500.0, help="tokens/s per room in the warm-up"
    )
    parser.add_argument(
        "--warmup-minutes", type=float, default=2.0, help="samples left out of the slopes"
    )
    asyncio.run(soak(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
