"""Faults beyond kill -9, each created for real: a worker stopped (SIGSTOP) and continued,
a Postgres outage, a worker whose clock is behind, a re-dispatch into the same process,
dead leases. Real livekit-server, Postgres, workers and watcher processes.

* SIGSTOP of the worker holding rooms mid-turn, for longer than livekit-server's job
  assignment timeout (10 s): every room gets a new agent while the old worker is still
  stopped; after SIGCONT nothing the old agents send reaches a client, every logged
  envelope is what the clients got from the new agent, and the old agents leave;
* Postgres stopped for 5 s while rooms are served and a new room starts: the new room
  gets its agent, no live agent is removed or replaced when the database is back;
* lease times come from the database clock; ``release`` removes only its own entry; the
  watcher deletes dead leases of rooms that are gone;
* a webhook body over the limit is refused (413) while it is still being sent, before
  any signature check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from alicia.agent.engine.sink import Fenced
from alicia.agent.rooms.lease_keeper import WORKER_ID, Hold
from alicia.agent.storage.leases import Fence, Leases, fence_check
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ErrorMessage, ReasoningStep, decode, new_id
from tests.e2e.failover.helpers import (
    LEASE,
    agents_in,
    following_client,
    lease_keeper,
    open_leases,
    rooms_mid_turn,
    running_watcher,
    worker_env,
)
from tests.e2e.worker import running_worker
from tests.support.db import execute, fetch, new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
LLM_OPTIONS = {"chunk_delay": 0.02}  # paced: a turn takes about 7 s

STREAM = "deepseek_reasoning_content"
OUT_WITHIN_S = 5.0
"""The promise: a fenced agent is out of its room within this long of waking (it leaves
at once; its SDK may rejoin within a second, and is removed within a quarter second of
being seen), and stays out."""
WATCH_AFTER_WAKE_S = 9.0
"""How long the rooms are watched after the old worker wakes."""


STALL_LEASE = {"ALICIA_HEARTBEAT_TIMEOUT": "4"}
"""The lease timeout of the stall test: still far inside the 14 s the worker is stopped
(the default's 1.5 s is measured by ``bench/failover.py --stall``). At 1.5 s a fresh
clone's run moved the rooms twice: the second worker, taking four rooms at once in the
suite's first minute, starved its own renewals (a busy loop reads as a dead worker:
issue 50's "overload does not cascade")."""


async def test_a_stopped_worker_is_fenced_and_its_rooms_move_while_it_is_stopped(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "stall")
    env = worker_env(url, **STALL_LEASE)
    async with contextlib.AsyncExitStack() as stack:
        watching = running_watcher(livekit, url, port=watch_port, env=STALL_LEASE)
        watcher = await stack.enter_async_context(watching)
        first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        rooms = await rooms_mid_turn(livekit, llm, stack, 4, STREAM)
        olds = {c.agent for _, c, _ in rooms}
        second = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        os.killpg(first.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # Longer than livekit-server's 10 s job assignment timeout: a dispatch that
            # went to the stopped worker must not be what the room waits for.
            async with asyncio.timeout(14):
                while not all(c.resumed and c.agent not in olds for _, c, _ in rooms):
                    await asyncio.sleep(0.05)
            moved = time.monotonic()
        except TimeoutError as exc:
            state = "\n".join(f"{r}: {c.agents} resumed={c.resumed}" for r, c, _ in rooms)
            raise AssertionError(f"not moved\n{state}\n{watcher.log()}\n{second.log()}") from exc
        finally:
            await asyncio.sleep(max(0.0, stopped + 14 - time.monotonic()))
            os.killpg(first.proc.pid, signal.SIGCONT)
        assert moved < stopped + 14
        # The old agents wake, find their leases gone, and leave; livekit's SDK rejoins a
        # room it was removed from while stopped, and the fenced agent removes that too.
        woke = time.monotonic()
        seen: dict[str, float] = {}
        while time.monotonic() < woke + WATCH_AFTER_WAKE_S:
            for room, _, _ in rooms:
                if (await agents_in(livekit, room)) & olds:
                    seen[room] = time.monotonic() - woke
            await asyncio.sleep(0.2)
        late_rooms = {r: round(t, 2) for r, t in seen.items() if t > OUT_WITHIN_S}
        assert late_rooms == {}, f"an old agent stayed (s after waking): {late_rooms}"
        for room, client, user_id in rooms:
            new = client.agent
            assert new not in olds
            taken = min(t for who, t, _ in client.heard if who == new)
            late = [who for who, t, _ in client.heard if who in olds and t >= taken]
            assert late == [], f"{room}: the old agent sent after the takeover"
            await client.wait_for(ErrorMessage, within=10, originating_id=user_id)
            # Every logged envelope is the one this client got (whoever logged first).
            logged = await fetch(
                url,
                "SELECT stanza, data FROM alicia_sent_log "
                f"WHERE conversation_id = '{room}' AND data IS NOT NULL",
            )
            got = {-decode(data).stanza_id: data for _, _, data in client.heard}
            for row in logged:
                if row["stanza"] in got:
                    assert bytes(row["data"]) == got[row["stanza"]], (room, row["stanza"])
        assert "fenced" in first.log(tail=10**7) or "lease lost" in first.log(tail=10**7)


async def test_a_postgres_outage_costs_no_room_its_agent(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "outage")
    # The lease timeout of the tests that count takeovers (8 s): what is tested is that the
    # outage moves no room. At the default 1.5 s, the renewals of the worker's keeper thread
    # went unconfirmed for longer once, 15 s after the database came back, on a loaded
    # machine (fE: every agent removed, then replaced): issue 50's overload, not this fault.
    env = worker_env(url, **LEASE)
    spec = llm.spec(STREAM)
    async with contextlib.AsyncExitStack() as stack:
        watching = running_watcher(livekit, url, port=watch_port, env=LEASE)
        watcher = await stack.enter_async_context(watching)
        worker = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        served = []
        for i in range(2):
            room = new_id("conv")
            client = await stack.enter_async_context(following_client(livekit, room, f"u{i}"))
            await client.wait_for_agent(30)
            await client.handshake()
            served.append(client)
        agents = [c.agent for c in served]
        llm.script(STREAM)
        busy = await served[0].ask(spec.user)  # mid-turn through the outage
        await served[0].wait_for(ReasoningStep, within=30)
        await asyncio.to_thread(postgres_server.pause)
        try:
            late_room = new_id("conv")
            late = await stack.enter_async_context(following_client(livekit, late_room, "late"))
            await late.wait_for_agent(30)
            await late.handshake()  # served while the database is away
            # past the lease timeout: every lease is stale when the database comes back
            await asyncio.sleep(float(LEASE["ALICIA_HEARTBEAT_TIMEOUT"]) + 2.0)
        finally:
            await asyncio.to_thread(postgres_server.resume)
        await asyncio.sleep(5.0)  # heartbeats resume; the watcher looks at every lease
        if [c.agent for c in served] != agents:  # failed twice (fresh73, fresh76): evidence
            rooms = {c.conversation_id for c in served}
            about = [ln for ln in worker.text().splitlines() if any(r in ln for r in rooms)]
            raise AssertionError(
                f"{[c.agent for c in served]} != {agents}\n{watcher.log()}\n--- the worker's "
                f"warnings ---\n{worker.notable(20000)}\n--- its lines on the two rooms ---\n"
                + "\n".join(about)[-20000:]
            )
        assert all(len(c.agents) == 1 for c in served), watcher.log()
        for c in served:  # one dispatch each: the first
            whole = watcher.log(tail=10**8)
            assert whole.count(f"dispatched to {c.conversation_id}") == 1, watcher.log()
        assert "serving without failover" in worker.log(tail=10**7)
        await served[0].wait_turn_end(busy, within=60)  # the turn went on, by the same agent
        assert not [b for b in served[0].of(ErrorMessage) if b.originating_id == busy]
        async with asyncio.timeout(10), open_leases(url) as leases:
            while (await leases.get(late_room)) is None:
                await asyncio.sleep(0.2)  # claimed once the database answers
        llm.script(*[STREAM] * 3)
        for client in [*served, late]:
            user_id = await client.ask(spec.user)
            await client.wait_turn_end(user_id, within=60)
            assert not [b for b in client.of(ErrorMessage) if b.originating_id == user_id]


async def test_lease_times_are_the_database_s_so_a_slow_clock_kills_no_room(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "clock")
    real = time.time
    async with open_leases(url) as leases:
        monkeypatch.setattr(time, "time", lambda: real() - 5.0)  # this host is 5 s behind
        epoch = await leases.claim("room-clock", "agent-a", "w1", 1.5)
        assert epoch is not None
        assert await leases.beat("w1", {"room-clock": epoch}) == {"room-clock"}
        monkeypatch.setattr(time, "time", real)  # the watcher's host
        assert await leases.stale(1.5) == []
        lease = await leases.get("room-clock")
        assert lease is not None and real() - lease.heartbeat_at < 1.5


async def test_release_removes_only_its_own_agent_s_entry(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A re-dispatch to the same process: the old agent leaving keeps the new one's lease."""
    url = await new_database("postgres", postgres_server, tmp_path, "release")
    async with (
        lease_keeper(url, interval_s=0.1, timeout_s=0.5) as keeper,
        open_leases(url) as leases,
    ):
        old = await keeper.hold("room-r", "agent-old")
        assert old is not None

        async def re_dispatched() -> Hold | None:
            # It looks dead; no renewal (every 0.1 s) may land between the two statements
            # (a fresh-clone run's did: the claim found the old agent alive and was refused).
            async with keeper._beat_lock:  # the keeper's thread runs this
                await execute(url, "UPDATE alicia_agents SET heartbeat_at = 0")
                return await keeper.hold("room-r", "agent-new")

        new = await keeper.run(re_dispatched())
        assert new is not None and new.fence.epoch == (old.fence.epoch or 0) + 1
        await asyncio.wait_for(old.lost.wait(), 5)  # its next renewal finds it taken
        assert not new.taken
        await keeper.release(old)
        await asyncio.sleep(1.0)  # the new agent's lease is still renewed
        lease = await leases.get("room-r")
        assert lease is not None and lease.agent_identity == "agent-new"
        assert time.time() - lease.heartbeat_at < 2.0  # renewed every 0.1 s; margin for load
        assert not new.taken
        await keeper.release(new)
        lease = await leases.get("room-r")  # vacant, its epoch kept
        assert lease is not None and lease.agent_identity is None
        assert lease.epoch == new.fence.epoch


async def test_an_agent_that_never_claimed_and_loses_its_late_claim_writes_nothing_more(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A worker that could not reach the database when its room started serves it without
    a lease (no epoch: nothing to fence). Another agent claims the room meanwhile. When the
    database answers again, the late claim is refused: the agent leaves, and its writer's
    last flush must be refused too, not pass unfenced into the other agent's conversation."""
    url = await new_database("postgres", postgres_server, tmp_path, "late_claim")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the socket is closed
    away = url.replace(f":{postgres_server.port}/", f":{closed}/")
    # B's lease stays live for the keeper however late its claim comes (B never renews:
    # with a 0.5 s timeout, a claim 0.5 s late on a loaded machine took B's lease as stale)
    live = 60.0
    async with lease_keeper(away, interval_s=0.1, timeout_s=live) as keeper, open_leases(url) as b:
        hold = await keeper.hold("room-u", "agent-a")  # the database is away from it
        assert hold is not None and hold.fence.epoch is None
        assert await b.claim("room-u", "agent-b", "w-b", live) == 1
        unreachable, keeper.leases = keeper.leases, Leases(url)  # it answers again
        await keeper.run(unreachable.aclose())
        await asyncio.wait_for(hold.lost.wait(), 10)  # the late claim is refused
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                with pytest.raises(Fenced):
                    await fence_check(conn, hold.fence, postgres=True)
        finally:
            await engine.dispose()


async def test_an_epoch_never_repeats_so_a_stopped_agent_stays_fenced(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A holds the room and is stopped; B takes it over and leaves cleanly; C claims it.
    A's writes are refused: C's epoch is new, and the fence names the holder too."""
    url = await new_database("postgres", postgres_server, tmp_path, "epochs")
    async with open_leases(url) as leases:
        a = await leases.claim("room-e", "agent-a", "w-a", 0.5)
        await execute(url, "UPDATE alicia_agents SET heartbeat_at = 0")  # A is stopped
        b = await leases.claim("room-e", "agent-b", "w-b", 0.5)
        await leases.release("room-e", "agent-b")
        c = await leases.claim("room-e", "agent-c", "w-c", 0.5)
        assert a is not None and b is not None and c is not None
        assert a < b < c, (a, b, c)
        assert await leases.beat("w-a", {"room-e": a}) == set()
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                with pytest.raises(Fenced):
                    await fence_check(conn, Fence("room-e", a, "agent-a"), postgres=True)
                await fence_check(conn, Fence("room-e", c, "agent-c"), postgres=True)
                with pytest.raises(Fenced):  # the epoch alone does not make a holder
                    await fence_check(conn, Fence("room-e", c, "agent-a"), postgres=True)
        finally:
            await engine.dispose()
        # A dead lease forgotten by the watcher keeps its epoch too.
        await execute(url, "UPDATE alicia_agents SET heartbeat_at = 0")
        assert await leases.forget("room-e", 0.5, 0.0)
        d = await leases.claim("room-e", "agent-d", "w-d", 0.5)
        assert d is not None and d > c


async def test_a_busy_room_loop_keeps_its_lease_and_a_stalled_process_confirms_first(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Renewals run on the keeper's own thread: the rooms' loop blocked for twice the
    lease timeout moves no room. The whole process stopped (the keeper's thread too) is
    fenced: it sends nothing until a renewal confirms, and meanwhile the room was taken."""
    url = await new_database("postgres", postgres_server, tmp_path, "confirm")
    async with lease_keeper(url, interval_s=0.1, timeout_s=0.5) as keeper:
        hold = await keeper.hold("room-s", "agent-a")
        assert hold is not None and await hold.held()
        time.sleep(1.0)  # noqa: ASYNC251 - the rooms' loop (this one) blocked, not the keeper
        async with open_leases(url) as other:
            assert await other.claim("room-s", "agent-b", "w2", 0.5) is None  # alive
        assert await hold.held() and not hold.taken

        async def take_over() -> None:
            async with open_leases(url) as other:
                assert await other.claim("room-s", "agent-b", "w2", 0.5) is not None

        def stalled_meanwhile() -> None:
            time.sleep(0.8)  # the lease goes stale: another agent takes the room over
            asyncio.run(take_over())

        async def stall_the_keeper() -> None:
            thread = threading.Thread(target=stalled_meanwhile)
            thread.start()
            thread.join()  # the keeper's loop is stalled all that time, as in a SIGSTOP

        await keeper.run(stall_the_keeper())
        assert not await hold.held()  # confirmed with the database first: lost
        await asyncio.wait_for(hold.lost.wait(), 5)
    assert WORKER_ID


async def test_a_job_for_a_room_a_live_agent_serves_does_not_join_it(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A late or redundant dispatch (a stopped worker woke up; the watcher's second copy):
    its agent never joins. Of jobs racing for a room, one is taken."""
    url = await new_database("postgres", postgres_server, tmp_path, "accept")
    async with open_leases(url) as leases:
        assert await leases.accept("room-new", 1.5, 5.0)  # no lease row: join
        assert await leases.claim("room-a", "agent-live", "w1", 1.5) is not None
        assert not await leases.accept("room-a", 1.5, 5.0)  # served: do not join
        await execute(url, "UPDATE alicia_agents SET heartbeat_at = heartbeat_at - 5")
        # Its agent is dead: of ten jobs racing to take the room over, one is taken.
        taken = await asyncio.gather(*(leases.accept("room-a", 1.5, 5.0) for _ in range(10)))
        assert taken.count(True) == 1
        lease = await leases.get("room-a")
        assert lease is not None and lease.accepted_at is not None
        assert time.time() - lease.accepted_at < 1.0
        await execute(url, "UPDATE alicia_agents SET accepted_at = accepted_at - 6")
        assert await leases.accept("room-a", 1.5, 5.0)  # that job's agent never came


async def test_dispatch_marks_nobody_claimed_are_swept(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "sweep")
    async with open_leases(url) as leases:
        assert await leases.begin_dispatch("room-failed", 1.5, 10.0)
        assert await leases.begin_dispatch("room-fresh", 1.5, 10.0)
        await execute(
            url,
            "UPDATE alicia_agents SET dispatched_at = dispatched_at - 500 "
            "WHERE conversation_id = 'room-failed'",
        )
        assert await leases.sweep(100.0) == 1
        assert await leases.get("room-failed") is None
        assert await leases.get("room-fresh") is not None


async def test_the_watcher_clears_dead_leases_of_rooms_that_are_gone(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "dead")
    async with open_leases(url) as leases:
        assert await leases.claim("room-that-never-was", "agent-x", "w-dead", 1.5) is not None
        await execute(url, "UPDATE alicia_agents SET heartbeat_at = heartbeat_at - 60")
        async with running_watcher(livekit, url, port=watch_port) as watcher:
            async with asyncio.timeout(15):
                while (lease := await leases.get("room-that-never-was")) and lease.agent_identity:
                    await asyncio.sleep(0.2)
            assert "dead lease cleared" in watcher.log(tail=10**8)


def _upload_until_answered(port: int, total: int) -> tuple[int, bytes]:
    """POST a chunked ``total``-byte body to the watcher until it answers; (bytes sent,
    the answer's first bytes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (
        "POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/webhook+json"
        "\r\nAuthorization: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"{" + b" " * (65536 - 1)
    sent = 0
    try:
        sock.sendall(head.encode())
        while sent < total:
            readable, writable, _ = select.select([sock], [sock], [], 10)
            if readable or not writable:
                break
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            except OSError:  # answered and closed
                break
            sent += len(piece)
        return sent, sock.recv(4096)
    finally:
        sock.close()


async def test_a_webhook_body_over_the_limit_is_refused_while_it_is_read(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "hook")
    async with running_watcher(livekit, url, port=watch_port) as watcher:
        sent, answer = await asyncio.to_thread(_upload_until_answered, watch_port, 64 << 20)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert sent < 8 << 20, f"the watcher read {sent} bytes before answering"
        assert "webhook refused" in watcher.log(tail=10**8)
