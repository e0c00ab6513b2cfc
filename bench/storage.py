"""Storage throughput vs COPY, and realtime delivery with persistence on vs off.

Run: ``.venv/bin/python bench/storage.py`` (about 2 minutes). It starts a real
PostgreSQL (harness) and a real livekit-server, and measures in this one process:

Throughput (steps/s stored, best of ``--repeat`` runs each, tables emptied and the
conversation + user messages pre-created before every run, as in real traffic where
the user message is stored before its steps):

* ``writer`` — :class:`alicia.agent.storage.StorageWriter` with its default options: ``submit``
  every envelope (yielding to the event loop every 1000, as a worker would), then
  ``flush``; timed from the first submit to the last commit (envelope -> row conversion
  included);
* ``naive`` — one ``INSERT … ON CONFLICT DO NOTHING`` per step, each committed, through
  SQLAlchemy (``--naive-n`` steps, a slice of the corpus);
* ``copy`` — one ``COPY`` of the same rows, pre-built as tuples, straight into
  ``alicia_reasoning_steps`` (no conversion, no conflict handling): the limit.

Realtime delivery (``--rounds`` rounds per mode, alternating off/on): a publisher
participant sends ReasoningStep envelopes at ``--rate`` per second to a receiver
participant through the livekit-server room (reliable data packets on the ``alicia``
topic); for each envelope it calls ``sink.submit(env)`` and then publishes, as the
worker does. Latency = receive time - creation time (same process clock). ``on`` =
a StorageWriter writing to the Postgres, ``off`` = :class:`alicia.agent.engine.sink.NullSink`.

Corpus: seeded ReasoningStep envelopes, 300-character text, 8 steps per chain.
Caveats: a shared 2-core machine runs Python, Postgres and livekit-server together;
throughput moves by ±15% between runs, the p99 ratio by a few percent.

Last line: ``RESULT writer_steps_per_s=<x> naive_steps_per_s=<x> copy_steps_per_s=<x>
writer_vs_copy=<x> p99_on_vs_off=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from livekit import rtc
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert as pg_insert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.engine.sink import NullSink, StepSink
from alicia.agent.storage.engine import create_engine
from alicia.agent.storage.tables import reasoning_steps
from alicia.agent.storage.writer import StorageWriter, WriterOptions, migrate
from alicia.harness import LiveKitServer, PostgresServer
from alicia.protocol import DATA_TOPIC, Envelope, ReasoningStep, decode, encode, envelope
from bench._exit import run_and_exit

SEED = 20250301
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
WORDS = (  # noqa: SIM905 (a sentence reads better than a list of words)
    "the user asks about a restaurant near the station so I should check the opening "
    "hours first then compare prices and distance maybe search the database for italian "
    "places with good reviews if none match relax the filter to include pizza or pasta"
).split()
CONV = "conv_bench_storage_00001"
COLUMNS = (
    "id",
    "message_id",
    "conversation_id",
    "content",
    "sequence_number",
    "total_steps",
    "sent_at",
)


def _id(rng: random.Random, prefix: str) -> str:
    return prefix + "_" + "".join(rng.choice(ALPHABET) for _ in range(21))


def _text(rng: random.Random, length: int = 300) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:length]


def corpus(n: int, seed: int) -> tuple[list[Envelope[Any]], list[str]]:
    """``n`` ReasoningStep envelopes (8 per chain) and the chains' user message ids."""
    rng = random.Random(seed)
    envs: list[Envelope[Any]] = []
    users: list[str] = []
    for i in range(n):
        if i % 8 == 0:
            users.append(_id(rng, "msg"))
        body = ReasoningStep(
            id=_id(rng, "rs"),
            conversation_id=CONV,
            previous_id=users[-1],
            content=_text(rng),
            step_index=i % 8 + 1,
        )
        envs.append(envelope(body, stanza_id=-(i + 1), conversation_id=CONV))
    return envs, users


async def reset(url: str, users: list[str]) -> None:
    """Empty tables, then the conversation and its user messages, as stored before steps."""
    engine = create_engine(url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "TRUNCATE alicia_reasoning_steps, alicia_tool_uses, alicia_sentences, "
                    "alicia_remarks, alicia_messages, alicia_conversations, alicia_sent_log"
                )
            )
            await conn.execute(
                text("INSERT INTO alicia_conversations (id, livekit_room_name) VALUES (:c, :c)"),
                {"c": CONV},
            )
            await conn.execute(
                text(
                    "INSERT INTO alicia_messages (id, conversation_id, sequence_number, "
                    "message_role, contents) SELECT u, :c, n, 'user', 'question' "
                    "FROM unnest(CAST(:users AS text[])) WITH ORDINALITY AS t(u, n)"
                ),
                {"c": CONV, "users": users},
            )
    finally:
        await engine.dispose()


async def count_steps(url: str) -> int:
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(text("SELECT count(*) FROM alicia_reasoning_steps")) or 0)
    finally:
        await engine.dispose()


async def run_writer(url: str, envs: list[Envelope[Any]], spill: Path) -> float:
    writer = await StorageWriter(url, WriterOptions(spill_dir=spill, migrate=False)).start()
    try:
        gc.collect()
        t0 = time.perf_counter()
        for i, env in enumerate(envs):
            writer.submit(env)
            if i % 1000 == 999:
                await asyncio.sleep(0)
        await writer.flush()
        elapsed = time.perf_counter() - t0
    finally:
        await writer.aclose()
    return len(envs) / elapsed


def rows_of(envs: list[Envelope[Any]]) -> list[tuple[Any, ...]]:
    now = dt.datetime.now(dt.UTC)
    out = []
    for env in envs:
        b = env.body
        out.append(
            (b.id, b.previous_id, b.conversation_id, b.content, b.step_index, b.total_steps, now)
        )
    return out


async def run_naive(url: str, envs: list[Envelope[Any]]) -> float:
    engine = create_engine(url, pooled=False)
    stmt = pg_insert(reasoning_steps).on_conflict_do_nothing(index_elements=["id"])
    rows = [dict(zip(COLUMNS, r, strict=True)) for r in rows_of(envs)]
    try:
        async with engine.connect() as conn:
            gc.collect()
            t0 = time.perf_counter()
            for row in rows:
                await conn.execute(stmt, row)
                await conn.commit()
            elapsed = time.perf_counter() - t0
    finally:
        await engine.dispose()
    return len(rows) / elapsed


async def run_copy(url: str, envs: list[Envelope[Any]]) -> float:
    engine = create_engine(url, pooled=False)
    rows = rows_of(envs)
    try:
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            apg: Any = raw.driver_connection
            gc.collect()
            t0 = time.perf_counter()
            async with apg.transaction():
                await apg.copy_records_to_table(
                    "alicia_reasoning_steps", records=rows, columns=COLUMNS
                )
            elapsed = time.perf_counter() - t0
    finally:
        await engine.dispose()
    return len(rows) / elapsed


async def throughput(url: str, n: int, naive_n: int, repeat: int, spill: Path) -> dict[str, float]:
    envs, users = corpus(n, SEED)
    best = {"writer": 0.0, "naive": 0.0, "copy": 0.0}
    for r in range(repeat):
        for name in ("copy", "writer", "naive"):
            await reset(url, users)
            if name == "writer":
                rate = await run_writer(url, envs, spill)
                expected = n
            elif name == "copy":
                rate = await run_copy(url, envs)
                expected = n
            else:
                rate = await run_naive(url, envs[:naive_n])
                expected = naive_n
            stored = await count_steps(url)
            if stored != expected:
                raise SystemExit(f"{name}: stored {stored} steps, expected {expected}")
            best[name] = max(best[name], rate)
            print(f"  run {r + 1} {name:<6} {rate:>12,.0f} steps/s", flush=True)
    return best


class Receiver:
    """Latency of each envelope from its creation (perf_counter) to its arrival."""

    def __init__(self, room: rtc.Room, sent: dict[str, float]) -> None:
        self.sent = sent
        self.latencies: list[float] = []
        self.done = asyncio.Event()
        self.expect = 0
        room.on("data_received", self._on_data)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        now = time.perf_counter()
        if packet.topic != DATA_TOPIC:
            return
        env = decode(packet.data)
        t0 = self.sent.pop(env.body.id, None)
        if t0 is not None:
            self.latencies.append(now - t0)
        if len(self.latencies) >= self.expect:
            self.done.set()


async def delivery_round(
    publisher: rtc.Room,
    receiver: Receiver,
    sink: StepSink,
    envs: list[Envelope[Any]],
    rate: float,
    to: str,
) -> list[float]:
    receiver.latencies = []
    receiver.expect = len(envs)
    receiver.done.clear()
    interval = 1.0 / rate
    start = time.perf_counter()
    for i, env in enumerate(envs):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        # Fresh ids each round so the database really stores every step.
        receiver.sent[env.body.id] = time.perf_counter()
        sink.submit(env)  # as the worker: store, then send
        await publisher.local_participant.publish_data(
            encode(env), reliable=True, topic=DATA_TOPIC, destination_identities=[to]
        )
    await asyncio.wait_for(receiver.done.wait(), 30)
    return list(receiver.latencies)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


async def realtime(
    lk: LiveKitServer, url: str, rounds: int, per_round: int, rate: float, spill: Path
) -> dict[str, list[float]]:
    room = "bench-storage"
    pub, sub = rtc.Room(), rtc.Room()
    await pub.connect(lk.url, lk.token("bench-agent", room))
    await sub.connect(lk.url, lk.token("bench-client", room))
    sent: dict[str, float] = {}
    receiver = Receiver(sub, sent)
    try:
        async with asyncio.timeout(10):
            while "bench-client" not in pub.remote_participants:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        warm, _ = corpus(200, SEED + 99)
        await delivery_round(pub, receiver, NullSink(), warm, rate, "bench-client")
        writer = await StorageWriter(url, WriterOptions(spill_dir=spill, migrate=False)).start()
        samples: dict[str, list[float]] = {"off": [], "on": []}
        try:
            for r in range(rounds):
                for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    envs, _ = corpus(per_round, SEED + 1000 + 2 * r + (mode == "on"))
                    sink: StepSink = writer if mode == "on" else NullSink()
                    got = await delivery_round(pub, receiver, sink, envs, rate, "bench-client")
                    samples[mode].extend(got)
                    print(
                        f"  round {r + 1} {mode:<3} p50 {statistics.median(got) * 1e3:6.2f} ms"
                        f"  p99 {p99(got) * 1e3:6.2f} ms",
                        flush=True,
                    )
            await writer.flush(timeout=60)
            stored = writer.stats.written
        finally:
            await writer.aclose()
        if stored != rounds * per_round:
            raise SystemExit(f"persistence on stored {stored} steps, expected {rounds * per_round}")
        return samples
    finally:
        await pub.disconnect()
        await sub.disconnect()


async def amain(args: argparse.Namespace) -> None:
    impl, machine = platform.python_implementation(), platform.machine()
    print(f"Python {sys.version.split()[0]} ({impl}) on {machine}, {os.cpu_count()} CPUs")
    libs = ", ".join(f"{p} {version(p)}" for p in ("sqlalchemy", "asyncpg", "livekit", "msgspec"))
    print(f"{libs}; seed {SEED}")
    with (
        tempfile.TemporaryDirectory(prefix="alicia-bench-spill-") as spill_dir,
        PostgresServer() as pg,
        LiveKitServer() as lk,
    ):
        spill = Path(spill_dir)
        url = pg.url()
        await migrate(url)
        print(f"\nThroughput: {args.n} steps (naive: {args.naive_n}), best of {args.repeat}")
        best = await throughput(url, args.n, args.naive_n, args.repeat, spill)
        print(
            f"\nRealtime: {args.rounds} rounds x {args.per_round} steps per mode "
            f"at {args.rate:g} steps/s through livekit-server"
        )
        samples = await realtime(lk, url, args.rounds, args.per_round, args.rate, spill)
    off, on = samples["off"], samples["on"]
    print("\nsummary")
    for name in ("writer", "naive", "copy"):
        print(f"  {name:<6} {best[name]:>12,.0f} steps/s")
    for mode, values in (("off", off), ("on", on)):
        print(
            f"  delivery {mode:<3} p50 {statistics.median(values) * 1e3:6.2f} ms  "
            f"p99 {p99(values) * 1e3:6.2f} ms  (n={len(values)})"
        )
    print(
        f"RESULT writer_steps_per_s={best['writer']:.0f} naive_steps_per_s={best['naive']:.0f} "
        f"copy_steps_per_s={best['copy']:.0f} writer_vs_copy={best['writer'] / best['copy']:.3f} "
        f"p99_on_vs_off={p99(on) / p99(off):.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark; the last line printed is the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="steps per throughput run")
    parser.add_argument("--naive-n", type=int, default=5_000, help="steps for the naive loop")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs per method")
    parser.add_argument("--rounds", type=int, default=20, help="realtime rounds per mode")
    parser.add_argument("--per-round", type=int, default=150, help="steps per realtime round")
    parser.add_argument("--rate", type=float, default=200.0, help="realtime steps per second")
    asyncio.run(amain(parser.parse_args(argv)))


if __name__ == "__main__":
    run_and_exit(main)
