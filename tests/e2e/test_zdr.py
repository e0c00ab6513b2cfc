"""Zero data retention, end to end: the real worker with ``ALICIA_ZDR=true`` on the real
Postgres, a client granted full reasoning in a real livekit-server room, the recorded LLM.

A phrase of the recorded reasoning is the canary. The client (entitled) reads it; after
the conversation it is absent from a full ``pg_dump`` of the database, from every file in
the spill directory and from the worker's log. ``alicia-admin reasoning`` decrypts the
stored steps with the conversation's data key; after ``alicia-admin erase`` it cannot.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from livekit import api

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, ReasoningStep, UserMessage, new_id
from tests.e2e.worker import PROCESS_EXECUTOR, running_worker
from tests.support.db import admin, fetch, new_database, pg_dump
from tests.support.livekit_rooms import protocol_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CANARY = "classic trap"


async def test_no_plaintext_reasoning_at_rest_and_erasure_shreds_it(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    assert CANARY in spec.steps[0]
    url = await new_database("postgres", postgres_server, tmp_path, "zdr")
    home = tmp_path / "home"
    keys = f"m1={base64.b64encode(bytes(range(32))).decode()}"
    env = {
        "DATABASE_URL": url,
        "HOME": str(home),  # the spill root lives under it
        "ALICIA_ZDR": "true",
        "ALICIA_REASONING_KEYS": keys,
        "ALICIA_LOAD_THRESHOLD": "inf",
        **PROCESS_EXECUTOR,  # at rest from the room's job process, as by default
    }
    room = new_id("conv")
    async with running_worker(livekit_server, llm.base_url, env=env, log_level="debug") as w:
        async with protocol_client(livekit_server, room) as alice:
            llm.script("deepseek_reasoning_content")
            await alice.send(UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user))
            await alice.wait_for(AssistantSentence, is_final=True)
        for _ in range(150):  # storage is asynchronous: wait until the steps are there
            if len(await fetch(url, "SELECT id FROM alicia_reasoning_steps")) == len(spec.steps):
                break
            await asyncio.sleep(0.2)
        log = w.log(tail=10_000_000)
    # The entitled client read the reasoning in plaintext.
    assert [s.content for s in alice.of(ReasoningStep)] == list(spec.steps)

    stored = await fetch(url, "SELECT content FROM alicia_reasoning_steps")
    assert len(stored) == len(spec.steps)
    assert all(r["content"].startswith("eyJ") and r["content"].count(".") == 4 for r in stored)
    database = postgres_server.dsn().rsplit("/", 1)[0] + "/" + url.rsplit("/", 1)[1]
    dump = await asyncio.to_thread(pg_dump, database)
    assert "alicia_reasoning_steps" in dump and len(dump) > 1000
    assert CANARY not in dump
    spilled = [p for p in home.rglob("*") if p.is_file()]
    assert not any(CANARY.encode() in p.read_bytes() for p in spilled)
    assert "registered worker" in log and CANARY not in log

    admin_env = {"DATABASE_URL": url, "ALICIA_REASONING_KEYS": keys}
    before = await asyncio.to_thread(admin, "reasoning", "--conversation", room, env=admin_env)
    assert before.returncode == 0, before.stderr
    assert [line.split("\t")[2] for line in before.stdout.splitlines()] == list(spec.steps)
    erased = await asyncio.to_thread(admin, "erase", "--conversation", room, env=admin_env)
    assert erased.returncode == 0 and "erased" in erased.stdout
    after = await asyncio.to_thread(admin, "reasoning", "--conversation", room, env=admin_env)
    assert after.returncode == 3 and "erased" in after.stderr
    assert CANARY not in after.stdout


async def test_steps_spilled_during_an_outage_hold_no_plaintext_either(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    """Postgres stops after the conversation's data key exists; the next turn's steps can
    only go to the spill files, which the room's writer fills when the room closes. They hold the
    encrypted steps and never the canary; once the database is back a writer replays
    them, and every stored step of both turns decrypts."""
    from alicia.agent.storage.writer import StorageWriter, WriterOptions, default_spill_root

    spec = llm.spec("deepseek_reasoning_content")
    url = await new_database("postgres", postgres_server, tmp_path, "zdr_spill")
    home = tmp_path / "home"
    keys = f"m1={base64.b64encode(bytes(range(32))).decode()}"
    env = {
        "DATABASE_URL": url,
        "HOME": str(home),
        "ALICIA_ZDR": "true",
        "ALICIA_REASONING_KEYS": keys,
        "ALICIA_LOAD_THRESHOLD": "inf",
        "ALICIA_STORAGE_CLOSE_TIMEOUT": "1",  # spill soon once the worker stops
    }
    room = new_id("conv")
    n = len(spec.steps)
    paused = False
    try:
        async with running_worker(livekit_server, llm.base_url, env=env) as w:
            async with protocol_client(livekit_server, room) as alice:
                for turn in range(2):
                    llm.script("deepseek_reasoning_content")
                    msg = UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user)
                    await alice.send(msg)
                    async with asyncio.timeout(30):
                        while sum(bool(x.is_final) for x in alice.of(AssistantSentence)) <= turn:
                            await asyncio.sleep(0.05)
                    if turn == 0:  # the first turn is stored, then the database goes away
                        # (a job's first write imports Alembic and runs the migrations: on a
                        # loaded 2-core machine, CI's, that took more than 30 s)
                        for _ in range(450):
                            rows = await fetch(url, "SELECT id FROM alicia_reasoning_steps")
                            if len(rows) == n:
                                break
                            await asyncio.sleep(0.2)
                        assert len(rows) == n, w.log(30_000)  # the data key exists now
                        await asyncio.to_thread(postgres_server.pause)
                        paused = True
            # Closing the room ends the conversation: its writer gives the database one
            # second (ALICIA_STORAGE_CLOSE_TIMEOUT), then spills what it holds.
            http_url = "http" + livekit_server.url[2:]
            async with api.LiveKitAPI(
                http_url, livekit_server.api_key, livekit_server.api_secret
            ) as lk:
                await lk.room.delete_room(api.DeleteRoomRequest(room=room))
            async with asyncio.timeout(60):
                while "room left" not in w.log(tail=10_000_000):
                    await asyncio.sleep(0.2)
            log = w.log(tail=10_000_000)
        root = home / default_spill_root(url).relative_to(Path.home())
        spilled = [p for p in root.rglob("*") if p.is_file()]
        data = b"".join(p.read_bytes() for p in spilled)
        assert spilled and b"eyJ" in data  # the second turn's steps, encrypted
        assert CANARY.encode() not in data
        assert CANARY not in log
    finally:
        if paused:
            await asyncio.to_thread(postgres_server.resume)
    async with StorageWriter(url, WriterOptions(spill_dir=root)) as writer:
        await writer.flush(timeout=30)
    stored = await fetch(url, "SELECT content FROM alicia_reasoning_steps")
    assert len(stored) == 2 * n
    assert all(r["content"].startswith("eyJ") for r in stored)
    database = postgres_server.dsn().rsplit("/", 1)[0] + "/" + url.rsplit("/", 1)[1]
    assert CANARY not in await asyncio.to_thread(pg_dump, database)
    admin_env = {"DATABASE_URL": url, "ALICIA_REASONING_KEYS": keys}
    shown = await asyncio.to_thread(admin, "reasoning", "--conversation", room, env=admin_env)
    assert shown.returncode == 0, shown.stderr
    assert sorted(line.split("\t")[2] for line in shown.stdout.splitlines()) == sorted(
        list(spec.steps) * 2
    )
