"""Database outages: the real Postgres is stopped while steps keep flowing, writers are
closed while it is down, and a writer process dies; nothing sent may be lost or doubled."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from alicia.agent.storage.writer import StorageWriter, WriterOptions, migrate
from alicia.harness import PostgresServer, free_port
from alicia.protocol import Envelope, ReasoningStep, UserMessage, envelope
from tests.paths import ROOT
from tests.support.db import fetch, new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CID = "conv_fault_test_00000001"
FILLER = "weighing the options against what the user asked for, " * 3


@pytest.fixture(scope="module")
async def pg_url(postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    url = await new_database("postgres", postgres_server, tmp_path_factory.mktemp("db"), "fault")
    await migrate(url)
    return url


class Producer:
    """A worker-like stream: a user message, then 20 steps, turn after turn."""

    def __init__(self, writer: StorageWriter) -> None:
        self.writer = writer
        self.sent: dict[str, tuple[str, int, str]] = {}
        self.turns = 0
        self.during_outage = 0
        self.outage = asyncio.Event()
        self._stanza = 0
        self._client = 0

    def _server(self, body: Any) -> Envelope[Any]:
        self._stanza -= 1
        return envelope(body, stanza_id=self._stanza, conversation_id=CID)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.turns += 1
            uid = f"msg_u{self.turns}"
            self._client += 1
            self.writer.submit(
                envelope(
                    UserMessage(id=uid, conversation_id=CID, content=f"question {self.turns}"),
                    stanza_id=self._client,
                    conversation_id=CID,
                )
            )
            for i in range(1, 21):
                body = ReasoningStep(
                    id=f"rs_{self.turns}_{i}",
                    conversation_id=CID,
                    previous_id=uid,
                    content=f"turn {self.turns} step {i}: {FILLER}",
                    step_index=i,
                )
                self.writer.submit(self._server(body))  # never blocks, never raises
                self.sent[body.id] = (uid, i, body.content)
                if self.outage.is_set():
                    self.during_outage += 1
                await asyncio.sleep(0.002)


async def stored_steps(url: str) -> dict[str, tuple[str, int, str]]:
    rows = await fetch(
        url,
        "SELECT id, message_id, sequence_number, content, deleted_at FROM alicia_reasoning_steps",
    )
    assert all(r["deleted_at"] is None for r in rows)
    out = {r["id"]: (r["message_id"], r["sequence_number"], r["content"]) for r in rows}
    assert len(out) == len(rows)
    return out


async def test_postgres_outage_mid_stream_loses_and_doubles_nothing(
    postgres_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    opts = WriterOptions(
        spill_dir=tmp_path / "spill",
        linger_s=0.01,
        retry_initial_s=0.05,
        retry_max_s=0.5,
        max_memory_records=300,
        spill_chunk=100,
        migrate=False,
    )
    writer = await StorageWriter(pg_url, opts).start()
    producer = Producer(writer)
    stop = asyncio.Event()
    task = asyncio.create_task(producer.run(stop))
    paused = False
    try:
        await asyncio.sleep(1.5)
        producer.outage.set()
        await asyncio.to_thread(postgres_server.pause)
        paused = True
        await asyncio.sleep(4.0)
        await asyncio.to_thread(postgres_server.resume)
        paused = False
        producer.outage.clear()
        await asyncio.sleep(1.5)
    finally:
        stop.set()
        await task
        if paused:
            await asyncio.to_thread(postgres_server.resume)
    await writer.flush(timeout=90)
    stats = writer.stats
    await writer.aclose()

    assert producer.during_outage > 300, "the stream must keep flowing during the outage"
    assert stats.retries > 0 and stats.spilled > 0 and stats.replayed > 0, stats
    assert stats.dead_lettered == 0
    assert await stored_steps(pg_url) == producer.sent
    msgs = await fetch(pg_url, "SELECT id, placeholder FROM alicia_messages")
    assert len(msgs) == producer.turns and not any(m["placeholder"] for m in msgs)
    assert not list((tmp_path / "spill").glob("*/*.seg"))


async def test_writer_closed_during_outage_is_replayed_by_the_next_one(
    postgres_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    cid = "conv_fault_restart_000001"
    envs = [
        envelope(
            ReasoningStep(
                id=f"rs_restart_{i}",
                conversation_id=cid,
                previous_id="msg_restart",
                content=f"step {i}",
                step_index=i,
            ),
            stanza_id=-i,
            conversation_id=cid,
        )
        for i in range(1, 501)
    ]
    await asyncio.to_thread(postgres_server.pause)
    try:
        down = WriterOptions(spill_dir=spill, retry_initial_s=0.05, close_timeout_s=0.5)
        async with StorageWriter(pg_url, down) as first:
            for env in envs:
                first.submit(env)
        assert first.stats.written == 0 and first.stats.spilled == len(envs)
    finally:
        await asyncio.to_thread(postgres_server.resume)

    async with StorageWriter(pg_url, WriterOptions(spill_dir=spill, linger_s=0.005)) as second:
        assert await second.last_step_index("msg_restart") == 500
        await second.flush(timeout=60)
        assert second.stats.replayed == len(envs)
    rows = await fetch(
        pg_url,
        "SELECT sequence_number FROM alicia_reasoning_steps WHERE message_id = 'msg_restart' "
        "ORDER BY sequence_number",
    )
    assert [r["sequence_number"] for r in rows] == list(range(1, 501))
    assert not list(spill.glob("*/*.seg"))


CRASHING_WRITER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from pathlib import Path
    from alicia.agent.storage.writer import StorageWriter, WriterOptions
    from alicia.protocol import ReasoningStep, envelope

    async def main() -> None:
        url, spill = sys.argv[1], Path(sys.argv[2])
        opts = WriterOptions(spill_dir=spill, max_memory_records=10, spill_chunk=10)
        w = await StorageWriter(url, opts).start()
        for i in range(1, 101):
            body = ReasoningStep(id=f"rs_crash_{i}", conversation_id="conv_crash",
                                 previous_id="msg_crash", content=f"c{i}", step_index=i)
            w.submit(envelope(body, stanza_id=-i, conversation_id="conv_crash"))
            await asyncio.sleep(0)
        while w.stats.spilled < 90:
            await asyncio.sleep(0.01)
        print(json.dumps({"spilled": w.stats.spilled}), flush=True)
        os._exit(0)  # dies: no aclose, memory lost, segments stay

    asyncio.run(main())
    """
)


async def test_a_busy_event_loop_does_not_get_its_writes_ended(pg_url: str, tmp_path: Path) -> None:
    """A process whose event loop is busy (a flood to refuse, many rooms) leaves a live
    transaction idle between two statements for over half a second. Its writes are
    stored: before, every writer's transactions were ended after 0.5 s idle (meant for a
    process stopped mid-write), again at each retry, and nothing more was stored."""
    cid = "conv_busy_loop_00000001"
    user = UserMessage(id="msg_busy", conversation_id=cid, content="a question")
    envs = [envelope(user, stanza_id=1, conversation_id=cid)]
    for i in range(1, 6):
        body = ReasoningStep(
            id=f"rs_busy{i}",
            conversation_id=cid,
            previous_id="msg_busy",
            content=f"step {i}",
            step_index=i,
        )
        envs.append(envelope(body, stanza_id=-i, conversation_id=cid))
    options = WriterOptions(spill_dir=tmp_path / "spill", linger_s=0.0)
    async with StorageWriter(pg_url, options) as writer:
        await writer.durable()  # the schema is checked before the process gets busy
        engine = writer._engine
        assert engine is not None

        def busy(*_: Any) -> None:
            time.sleep(0.6)  # the event loop is busy elsewhere before each statement

        event.listen(engine.sync_engine, "before_cursor_execute", busy)
        for env in envs:
            writer.submit(env)
        async with asyncio.timeout(60):
            await writer.durable()
    rows = await fetch(
        pg_url, "SELECT id FROM alicia_reasoning_steps WHERE message_id = 'msg_busy'"
    )
    assert sorted(r["id"] for r in rows) == [f"rs_busy{i}" for i in range(1, 6)]


async def test_segments_of_a_crashed_writer_are_adopted(pg_url: str, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    dead_url = f"postgresql+asyncpg://alicia@127.0.0.1:{free_port()}/nowhere"
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", CRASHING_WRITER, dead_url, str(spill)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    spilled = json.loads(proc.stdout.strip().splitlines()[-1])["spilled"]
    assert spilled >= 90
    assert len(list(spill.glob("*/lock"))) == 1  # its directory, no longer locked

    async with StorageWriter(pg_url, WriterOptions(spill_dir=spill, linger_s=0.005)) as w:
        await w.flush(timeout=60)
    rows = await fetch(
        pg_url,
        "SELECT sequence_number FROM alicia_reasoning_steps WHERE message_id = 'msg_crash' "
        "ORDER BY sequence_number",
    )
    # Spilled records are the oldest ones: exactly the first `spilled` steps survive.
    assert [r["sequence_number"] for r in rows] == list(range(1, spilled + 1))
    assert not list(spill.glob("*/*.seg"))
