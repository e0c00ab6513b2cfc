"""Zero data retention covers every rendition of a step, with failover on and off.

A phrase of the first sentence of a recorded step is the canary: a participant granted
``summary`` gets it as the step's extractive summary, one granted ``full`` in the step.
With ``ALICIA_ZDR`` the canary is then nowhere at rest: not in a full ``pg_dump``, not in
any row of the sent log (failover logs every envelope as sent, its bytes included), not
in the spill folder, not in the worker's log. Every encrypted value at rest is sealed
with the conversation's data key (none with the master key, which an erase leaves), so
after ``alicia-admin erase`` nothing at rest decrypts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
from pathlib import Path

import pytest

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ReasoningStep, new_id
from tests.e2e.failover.helpers import following_client, running_watcher
from tests.e2e.worker import running_worker
from tests.support.db import admin, fetch, new_database, pg_dump

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only

STREAM = "deepseek_reasoning_content"
CANARY = "the user wants to know whether 9.11"
MASTER = ("m1", bytes(range(32)))
KEYS = f"m1={base64.b64encode(MASTER[1]).decode()}"
JWE = re.compile(rb"eyJ[\w-]+\.[\w-]*\.[\w-]+\.[\w-]+\.[\w-]+")


def opened_with_master(blob: bytes, room: str) -> list[str]:
    """Every JWE in ``blob`` that the master key alone opens (survives an erase)."""
    sealer = ReasoningSealer([MASTER])
    out = []
    for value in JWE.findall(blob):
        with contextlib.suppress(Exception):
            out.append(sealer.open(value.decode(), room))
    return out


@pytest.mark.parametrize("failover", [False, True], ids=["failover-off", "failover-on"])
async def test_no_rendition_of_a_step_is_at_rest_in_plaintext_under_zdr(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
    failover: bool,
) -> None:
    spec = llm.spec(STREAM)
    first_sentence = spec.steps[0].split(". ")[0]
    assert CANARY in first_sentence and CANARY not in spec.answer
    url = await new_database("postgres", postgres_server, tmp_path, f"zdr_r{int(failover)}")
    home = tmp_path / "home"
    env = {
        "DATABASE_URL": url,
        "HOME": str(home),  # the spill root lives under it
        "ALICIA_ZDR": "true",
        "ALICIA_REASONING_KEYS": KEYS,
        "ALICIA_LOAD_THRESHOLD": "inf",
        "ALICIA_JOB_EXECUTOR": "thread",
    }
    if failover:
        env |= {"ALICIA_FAILOVER": "true", "ALICIA_AGENT_NAME": "alicia"}
    room = new_id("conv")
    async with contextlib.AsyncExitStack() as stack:
        if failover:
            await stack.enter_async_context(running_watcher(livekit, url, port=watch_port))
        worker = await stack.enter_async_context(
            running_worker(livekit, llm.base_url, env=env, log_level="debug")
        )
        alice = await stack.enter_async_context(following_client(livekit, room, "alice"))
        carol = await stack.enter_async_context(
            following_client(livekit, room, "carol", {"alicia.reasoning": "summary"})
        )
        for c in (alice, carol):
            await c.wait_for_agent(30)
            await c.handshake()
        llm.script(STREAM)
        user_id = await alice.ask(spec.user)
        await alice.wait_turn_end(user_id, within=60)
        await carol.wait_turn_end(user_id, within=30)
        for _ in range(150):  # storage is asynchronous: wait until the steps are there
            if len(await fetch(url, "SELECT id FROM alicia_reasoning_steps")) == len(spec.steps):
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)
        log = worker.log(tail=10_000_000)
    # Both renditions carried the canary to those entitled to it.
    assert [s.content for s in alice.steps()] == list(spec.steps)
    summaries = [b for b in carol.of(ReasoningStep)]
    assert summaries and CANARY in summaries[0].content and summaries[0].encrypted_value

    database = postgres_server.dsn().rsplit("/", 1)[0] + "/" + url.rsplit("/", 1)[1]
    dump = await asyncio.to_thread(pg_dump, database)
    assert "alicia_reasoning_steps" in dump and CANARY not in dump
    logged = await fetch(url, "SELECT level, data, sealed FROM alicia_sent_log")
    for r in logged:
        assert CANARY.encode() not in bytes(r["data"] or b""), r["level"]
    if failover:
        assert {r["level"] for r in logged} >= {"full", "summary"}
        assert all(r["data"] is None for r in logged if r["level"] is not None)
    spilled = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())
    assert CANARY.encode() not in spilled
    assert "registered worker" in log and CANARY not in log

    admin_env = {"DATABASE_URL": url, "ALICIA_REASONING_KEYS": KEYS}
    erased = await asyncio.to_thread(admin, "erase", "--conversation", room, env=admin_env)
    assert erased.returncode == 0 and "erased" in erased.stdout
    after = await asyncio.to_thread(admin, "reasoning", "--conversation", room, env=admin_env)
    assert after.returncode == 3 and CANARY not in after.stdout
    # After the erase, nothing at rest opens with the master key that is left (the
    # sealed log and the encrypted values in it included).
    dump = await asyncio.to_thread(pg_dump, database)
    logged = await fetch(url, "SELECT data FROM alicia_sent_log")
    at_rest = dump.encode() + b"".join(bytes(r["data"] or b"") for r in logged) + spilled
    assert len(JWE.findall(at_rest)) >= len(spec.steps)
    assert opened_with_master(at_rest, room) == []
