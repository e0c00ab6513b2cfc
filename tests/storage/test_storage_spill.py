"""The storage writer when its database is away, against real databases (PostgreSQL and
SQLite): what it knows of the records it holds, spilling them to disk on close and
replaying them in the next writer, and a record the database refuses sent to the dead
letter while the rest is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from alicia.agent.storage.leases import Fence, Leases
from alicia.agent.storage.spill import decode_items
from alicia.agent.storage.writer import StorageWriter, WriterOptions
from tests.storage.traffic import Conv, script, snapshot, step, table, unreachable, write
from tests.support.db import clear, execute

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_last_step_index_counts_stored_queued_and_spilled(
    url: str, options: WriterOptions, tmp_path: Path
) -> None:
    c = Conv()
    await write(url, options, [c.server(step("msg_u1", i, f"s{i}")) for i in (1, 2, 3)])
    async with StorageWriter(url, options) as fresh:  # knows nothing in memory
        assert await fresh.last_step_index("msg_u1") == 3
        assert await fresh.last_step_index("msg_other") == 0

    # Database unreachable: the answer comes from what is queued, without waiting long.
    down = WriterOptions(
        spill_dir=tmp_path / "down", retry_initial_s=0.05, query_timeout_s=0.5, close_timeout_s=0.2
    )
    async with StorageWriter(unreachable(url, tmp_path), down) as w:
        for i in (4, 5):
            w.submit(c.server(step("msg_u1", i, f"s{i}")))
        assert await w.last_step_index("msg_u1") == 5
    # ...and a writer that adopts those spilled records knows them before replaying them.
    async with StorageWriter(unreachable(url, tmp_path), down) as again:
        assert await again.last_step_index("msg_u1") == 5


async def test_close_spills_and_the_next_writer_replays(
    url: str, options: WriterOptions, tmp_path: Path
) -> None:
    envs = script(Conv())
    spill = tmp_path / "shared-spill"
    down = WriterOptions(spill_dir=spill, retry_initial_s=0.05, close_timeout_s=0.3)
    async with StorageWriter(unreachable(url, tmp_path), down) as w:
        for env in envs:
            w.submit(env)
    assert w.stats.written == 0 and w.stats.spilled == len(envs)
    # Its last tries before the close deadline were paced, not a busy loop.
    assert w.stats.retries <= 0.3 / 0.05 + 3, w.stats
    segments = list(spill.glob("*/*.seg"))
    assert len(segments) == 1
    replay = decode_items(segments[0].read_bytes())
    assert [it.env for it in replay] == envs

    async with StorageWriter(url, WriterOptions(spill_dir=spill, linger_s=0.005)) as w2:
        await w2.flush(timeout=30)
        assert w2.stats.replayed == len(envs)
    assert not list(spill.glob("*/*.seg"))
    replayed = await snapshot(url, times=False)
    await clear(url)
    await write(url, options, envs)  # the same envelopes written directly
    assert await snapshot(url, times=False) == replayed


async def test_refused_record_goes_to_dead_letter_and_the_rest_is_stored(
    url: str, options: WriterOptions
) -> None:
    # A rule the writer cannot know about, added by an operator: refuses one record.
    if url.startswith("sqlite"):
        ddl = (
            "CREATE TRIGGER poison BEFORE INSERT ON alicia_reasoning_steps "
            "WHEN NEW.content = 'POISON' BEGIN SELECT RAISE(ABORT, 'poison'); END"
        )
        undo = "DROP TRIGGER poison"
    else:
        ddl = "ALTER TABLE alicia_reasoning_steps ADD CONSTRAINT poison CHECK (content <> 'POISON')"
        undo = "ALTER TABLE alicia_reasoning_steps DROP CONSTRAINT poison"
    await execute(url, ddl)
    try:
        c = Conv()
        envs = [c.server(step("msg_u1", i, "POISON" if i == 7 else f"s{i}")) for i in range(1, 11)]
        w = await write(url, options, envs)
    finally:
        await execute(url, undo)
    assert w.stats.dead_lettered == 1
    stored = [
        r["sequence_number"] for r in await table(url, "alicia_reasoning_steps", "sequence_number")
    ]
    assert stored == [1, 2, 3, 4, 5, 6, 8, 9, 10]
    assert options.spill_dir is not None
    [dead] = list((options.spill_dir / "dead-letter").glob("*.seg"))
    [item] = decode_items(dead.read_bytes())
    assert item.env == envs[6]


CASES = {
    # case: (A claims the room first, what happens next, A's rows stored)
    "taken-over": (True, "another agent claims it", False),
    "still-held": (True, "nothing", True),
    "released": (True, "A's lease is released (vacant, its epoch kept)", True),
    "unclaimed-taken": (False, "another agent claims it", False),
    "unclaimed-free": (False, "nothing", True),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_an_adopted_segment_is_written_under_the_fence_it_was_queued_under(
    url: str, tmp_path: Path, case: str
) -> None:
    """Agent A's writer spills its last steps and its process ends. The writer that adopts
    the segment (another room's) stores A's steps only if no other agent took A's room
    since: A's lease still held, or released (vacant, same epoch); for an A that never
    claimed the room (the database away at its start), only if nobody ever claimed it.
    Else they are dropped, not stored in the new holder's conversation. The adopting
    writer's own records are stored either way (A's fence is not its own)."""
    claims, then, stored = CASES[case]
    spill = tmp_path / "shared-spill"
    a_conv, b_conv = Conv(), Conv("conv_storage_test_000002")
    await execute(url, "DELETE FROM alicia_agents")  # not emptied by the fixture
    leases = Leases(url)
    try:
        epoch = await leases.claim("room-a", "agent-a", "w-a", 0.5) if claims else None
        assert epoch is not None or not claims
        fence = Fence("room-a", epoch, "agent-a" if claims else None)
        down = WriterOptions(
            spill_dir=spill, retry_initial_s=0.05, close_timeout_s=0.2, fence=fence
        )
        async with StorageWriter(unreachable(url, tmp_path), down) as a:
            for i in (1, 2):
                a.submit(a_conv.server(step("msg_a", i, f"A's step {i}")))
        assert a.stats.spilled == 2
        if then == "another agent claims it":
            await execute(url, "UPDATE alicia_agents SET heartbeat_at = 0")  # A looks dead
            assert await leases.claim("room-a", "agent-c", "w-c", 0.5) == (epoch or 0) + 1
        elif then.startswith("A's lease is released"):
            await leases.release("room-a", "agent-a")
    finally:
        await leases.aclose()
    mine = step("msg_b", 1, "B's own step")
    async with StorageWriter(url, WriterOptions(spill_dir=spill, linger_s=0.005)) as b:
        b.submit(b_conv.server(mine))
        await b.flush(timeout=30)
        assert not list(spill.glob("*/*.seg"))  # replayed or dropped, not left behind
    rows = [r["content"] for r in await table(url, "alicia_reasoning_steps")]
    a_rows = ["A's step 1", "A's step 2"] if stored else []
    assert sorted(rows) == [*a_rows, "B's own step"], case
