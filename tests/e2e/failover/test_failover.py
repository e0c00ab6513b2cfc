"""Failover on LiveKit's own dispatch, end to end: real livekit-server (webhooks to the
watcher), real Postgres, real workers (``ALICIA_FAILOVER``, explicit dispatch), the
watcher as a process, the recorded LLM streaming slowly enough to be cut mid-turn.

* ``kill -9`` of the worker holding 10 rooms mid-turn: every room gets an agent again,
  every client resumes, each client's stanzaIds are exactly the logged envelopes
  addressed to it (no gap, no duplicate), its stepIndex chains have no gap, what it holds
  is what is stored, the cut turn is closed (partial, with a recoverable 503), and a new
  turn works everywhere; the same with the watcher killed and restarted meanwhile;
* a client that missed more than the in-memory ring resumes from the database;
* SIGTERM during a turn longer than livekit-agents' drain timeout: the turn completes
  (within ``ALICIA_DRAIN_TURN_TIMEOUT``), the worker exits 0, the room gets a new agent;
* a standard participant joining under the agent's identity pushes the agent out
  (livekit-server's duplicate identity rule): nothing it sends is trusted, and the room
  gets an agent back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

import pytest
from livekit import rtc

from alicia.agent.engine.outbox import UNLOGGED_MAX
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    DATA_TOPIC,
    AssistantMessage,
    AssistantSentence,
    Configuration,
    ErrorMessage,
    ReasoningStep,
    StartAnswer,
    encode,
    envelope,
    new_id,
)
from tests.e2e.failover.helpers import (
    LEASE,
    FollowingClient,
    following_client,
    logged_for,
    rooms_mid_turn,
    running_watcher,
    worker_env,
)
from tests.e2e.worker import WorkerProcess, running_worker
from tests.support.db import fetch, new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
LLM_OPTIONS = {"chunk_delay": 0.02}  # paced: a turn takes about 7 s

STREAM = "deepseek_reasoning_content"
ROOMS = 10


def kill(worker: WorkerProcess) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.proc.pid, signal.SIGKILL)


async def check_consistent(
    url: str, room: str, client: FollowingClient, identity: str, *, unseen_empty: bool = False
) -> None:
    """No gap, no stanzaId with two envelopes, chains whole, what the client holds stored.

    The one exception is the killed agent's last envelopes. With storage slow (a write past
    ``DURABLE_TIMEOUT_S`` on a loaded machine) an agent sends up to ``UNLOGGED_MAX`` before
    storage has them. Killed then, it leaves the client holding envelopes that no log
    has. They must follow a logged stanza, be numbered in one run, and stay below the
    successor's numbering, which goes on past them (fresh91). ``unseen_empty``: stored
    answers the client never saw are allowed when they are empty (stopped while it was
    away, as a node's death makes it)."""
    got = [-e.stanza_id for e in client.box]
    assert client.conflicts == [], "another envelope under a stanzaId already held"
    assert client.unexplained == [], "an envelope sent twice that no resume asked for again"
    logged = await logged_for(url, room, identity, "full")
    assert set(logged) <= set(got), "gap"
    unlogged = sorted(set(got) - set(logged))
    if unlogged:
        after = [s for s in logged if s > unlogged[0]]
        assert unlogged[0] - 1 in logged, ("unlogged after a gap", unlogged, logged)
        assert unlogged == list(range(unlogged[0], unlogged[-1] + 1)), unlogged
        assert len(unlogged) <= UNLOGGED_MAX, unlogged
        assert not after or after[0] > unlogged[0] - 1 + UNLOGGED_MAX, (unlogged, after[:3])
    chains: dict[str, list[int]] = {}
    for step in client.steps():
        chains.setdefault(step.previous_id, []).append(step.step_index)
    for indexes in chains.values():
        assert sorted(indexes) == list(range(1, len(indexes) + 1)), chains
    stored = await fetch(
        url,
        "SELECT message_id, sequence_number, content FROM alicia_reasoning_steps "
        f"WHERE conversation_id = '{room}' AND deleted_at IS NULL",
    )
    kept = set(logged)
    held_steps = [e.body for e in client.box if -e.stanza_id in kept]
    assert sorted((s["message_id"], s["sequence_number"], s["content"]) for s in stored) == sorted(
        (s.previous_id, s.step_index, s.content) for s in held_steps if isinstance(s, ReasoningStep)
    )
    answers = await fetch(
        url,
        "SELECT id, contents, completion_status FROM alicia_messages "
        f"WHERE conversation_id = '{room}' AND message_role = 'assistant'",
    )
    held = _answers(client, kept)
    stored_answers = {a["id"]: a["contents"] for a in answers}
    if unseen_empty:  # an answer stopped while the client was away, before any word of it
        stored_answers = {k: v for k, v in stored_answers.items() if k in held or v}
    assert stored_answers == held


def summary(client: FollowingClient) -> str:
    """What a client last received (for failure messages)."""
    last = [(e.stanza_id, type(e.body).__name__, getattr(e.body, "code", "")) for e in client.box]
    return f"resumed={client.resumed} last={last[-8:]}"


def _answers(client: FollowingClient, only: set[int] | None = None) -> dict[str, str]:
    """Answer id -> text, as the client assembled them (sentences, or the message); from
    the envelopes numbered ``only`` if given."""
    out: dict[str, list[str]] = {}
    box = client.box if only is None else [e for e in client.box if -e.stanza_id in only]
    for body in (e.body for e in box):
        if isinstance(body, StartAnswer):
            out.setdefault(body.id, [])
        elif isinstance(body, AssistantSentence) and body.text:
            out.setdefault(body.previous_id, []).append(body.text)
        elif isinstance(body, AssistantMessage):
            out[body.id] = [body.content] if body.content else out.get(body.id, [])
    return {k: " ".join(v) for k, v in out.items()}


async def takeover(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
    *,
    restart_watcher: bool,
    rooms_n: int = ROOMS,
    second_watch_port: int | None = None,
) -> None:
    """``kill -9`` of the worker holding ``rooms_n`` rooms mid-turn (see the module
    docstring); ``livekit`` may be a cluster (``tests/e2e/cluster``); with
    ``second_watch_port`` a second watcher runs there throughout."""
    url = await new_database("postgres", postgres_server, tmp_path, "failover")
    env = worker_env(url, **LEASE)
    spec = llm.spec(STREAM)
    async with contextlib.AsyncExitStack() as stack:
        watching = running_watcher(livekit, url, port=watch_port, env=LEASE)
        watcher = await stack.enter_async_context(watching)
        watchers = [watcher]
        if second_watch_port is not None:
            other = running_watcher(livekit, url, port=second_watch_port, env=LEASE)
            watchers.append(await stack.enter_async_context(other))
        first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        # Paced to about 90 s: the second worker's start took long enough on a loaded
        # machine for 35 s turns to end before the kill (no turn cut, no ErrorMessage).
        rooms = await rooms_mid_turn(livekit, llm, stack, rooms_n, STREAM, pace=0.25)
        olds = {c.agent for _, c, _ in rooms}
        second = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        ended = [room for room, c, user_id in rooms if c.turn_ended(user_id)]
        assert not ended, f"turns over before the kill (not a takeover's test): {ended}"
        kill(first)
        if restart_watcher:
            await asyncio.sleep(0.5)
            watcher.kill()
            await asyncio.sleep(1.0)
            watcher = await stack.enter_async_context(
                running_watcher(livekit, url, port=watch_port, env=LEASE)
            )
        try:
            for _, client, user_id in rooms:
                await client.wait_turn_end(user_id, within=60)
                async with asyncio.timeout(10):
                    while not client.resumed:
                        await asyncio.sleep(0.05)
                assert client.agent not in olds and len(client.resumed) == 1
        except BaseException as exc:
            state = "\n".join(f"{room}: {c.agents} {summary(c)}" for room, c, _ in rooms)
            raise AssertionError(
                f"{exc!r}\n{state}\n{watcher.log()}\n--- the first worker's warnings ---\n"
                f"{first.notable()}\n--- the second worker's warnings ---\n{second.notable()}"
                f"\n--- the second worker's log ---\n{second.log()}"
            ) from exc
        for room, client, user_id in rooms:
            # Replayed after the resume, from the log the new agent reads back from the
            # database (10 s was missed twice on a loaded 2-core machine)
            try:
                await client.wait_for(ErrorMessage, within=30, originating_id=user_id)
            except TimeoutError:
                kinds = [(e.stanza_id, type(e.body).__name__) for e in client.box]
                heard = [(who, len(data)) for who, _, data in client.heard]
                raise AssertionError(
                    f"{room}: no ErrorMessage for {user_id}; agents {client.agents}, "
                    f"resumed {client.resumed}\nbox {kinds}\nheard {heard}\n"
                    f"--- the second worker ---\n{second.log(tail=30000)}"
                ) from None
            errors = [b for b in client.of(ErrorMessage) if b.originating_id == user_id]
            kinds = [(e.stanza_id, type(e.body).__name__) for e in client.box]
            assert [(e.code, e.recoverable) for e in errors] == [(503, True)], kinds
        # The cut turn is stored as failed (by the new agent's storage writer, which
        # writes in batches after the ErrorMessage left: on a loaded machine, seconds later).
        for _, _, user_id in rooms:
            for _ in range(150):
                rows = await fetch(
                    url,
                    "SELECT completion_status FROM alicia_messages "
                    f"WHERE previous_id = '{user_id}' AND message_role = 'assistant'",
                )
                if [r["completion_status"] for r in rows] == ["failed"]:
                    break
                await asyncio.sleep(0.2)
            assert [r["completion_status"] for r in rows] == ["failed"]
        # A new turn works in every room.
        llm.script(*[STREAM] * rooms_n)
        again = [(room, client, await client.ask(spec.user)) for room, client, _ in rooms]
        for _, client, user_id in again:
            await client.wait_turn_end(user_id, within=90)
            assert not [b for b in client.of(ErrorMessage) if b.originating_id == user_id]
        await asyncio.sleep(1.0)  # the last envelopes reach the database
        for i, (room, client, _) in enumerate(rooms):
            await check_consistent(url, room, client, f"user{i}")
            assert _answers(client)[client.of(StartAnswer)[-1].id].split() == spec.answer.split()
        # the takeover's dispatches, by the watchers running now (whole logs)
        watchers[0] = watcher
        assert sum(w.log(tail=10**8).count("agent dispatched") for w in watchers) >= 1


async def test_kill_9_of_a_worker_moves_its_rooms_with_nothing_lost(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    await takeover(livekit, postgres_server, llm, watch_port, tmp_path, restart_watcher=False)


async def test_the_same_with_the_watcher_killed_and_restarted_during_the_takeover(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    await takeover(livekit, postgres_server, llm, watch_port, tmp_path, restart_watcher=True)


async def test_a_client_that_missed_more_than_the_ring_resumes_from_the_database(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "replay")
    env = worker_env(url, ALICIA_REPLAY_KEEP="3", ALICIA_REPLAY_MAX_BYTES="1000000", **LEASE)
    spec = llm.spec(STREAM)
    room = new_id("conv")
    async with (
        running_watcher(livekit, url, port=watch_port, env=LEASE),
        running_worker(livekit, llm.base_url, env=env),
        following_client(livekit, room, "alice") as alice,
        following_client(livekit, room, "bob") as bob,
    ):
        for c in (alice, bob):
            await c.wait_for_agent(30)
            await c.handshake()
        seen = bob.highest
        bob.room.off("data_received", bob._on_data)  # bob's link drops everything now
        llm.script(STREAM)
        user_id = await alice.ask(spec.user)
        await alice.wait_turn_end(user_id, within=60)
        missed = await logged_for(url, room, "bob", "full")
        assert len([s for s in missed if s > seen]) > 3  # more than the ring keeps
        bob.room.on("data_received", bob._on_data)
        await bob.send(
            Configuration(
                conversation_id=room,
                last_sequence_seen=seen,
                features=["reasoning_step_display", "streaming"],
            )
        )
        await bob.wait_turn_end(user_id, within=30)
        await asyncio.sleep(0.5)
        got = sorted(-e.stanza_id for e in bob.box)
        assert got == await logged_for(url, room, "bob", "full")
        assert [s.content for s in bob.steps()] == list(spec.steps)


async def test_sigterm_during_a_turn_finishes_it_and_the_room_moves(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "drain")
    env = worker_env(url, ALICIA_DRAIN_TURN_TIMEOUT="90", **LEASE)  # the turn: about 35 s
    spec = llm.spec(STREAM)
    async with contextlib.AsyncExitStack() as stack:
        watching = running_watcher(livekit, url, port=watch_port, env=LEASE)
        watcher = await stack.enter_async_context(watching)
        first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        [(_, client, user_id)] = await rooms_mid_turn(livekit, llm, stack, 1, STREAM)
        old = client.agent
        second = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        os.killpg(first.proc.pid, signal.SIGTERM)
        await client.wait_turn_end(user_id, within=60)
        answer = _answers(client)[client.of(StartAnswer)[-1].id]
        assert answer.split() == spec.answer.split()  # the running turn completed
        assert await asyncio.wait_for(first.proc.wait(), 60) == 0
        # Its own drain let the turn finish, not livekit-agents' (--drain-timeout 2).
        drained = first.log(tail=10**7)
        assert "leaving a drained room" in drained and "drain timed out" not in drained
        async with asyncio.timeout(30):
            while client.agent == old or not client.resumed:
                await asyncio.sleep(0.1)
        llm.script(STREAM)
        again = await client.ask(spec.user)
        try:
            await client.wait_turn_end(again, within=60)
        except BaseException as exc:
            raise AssertionError(f"{exc!r}\n{watcher.log()}\n{second.log()}") from exc
        assert not [b for b in client.of(ErrorMessage) if b.originating_id == user_id]


async def test_a_forged_agent_identity_is_never_trusted_and_the_room_gets_an_agent_back(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "forged")
    env = worker_env(url, **LEASE)
    spec = llm.spec(STREAM)
    room = new_id("conv")
    async with (
        running_watcher(livekit, url, port=watch_port, env=LEASE) as watcher,
        running_worker(livekit, llm.base_url, env=env) as worker,
        following_client(livekit, room, "alice") as alice,
    ):
        await alice.wait_for_agent(30)
        await alice.handshake()
        real = alice.agent
        # A careless backend minted a standard token for the agent's identity.
        forger = rtc.Room()
        await forger.connect(livekit.url, livekit.token(real, room))
        try:
            forged = StartAnswer(id=new_id("msg"), previous_id="x", conversation_id=room)
            for _ in range(5):
                data = encode(envelope(forged, stanza_id=-999, conversation_id=room))
                await forger.local_participant.publish_data(data, topic=DATA_TOPIC)
                await asyncio.sleep(0.1)
            async with asyncio.timeout(30):
                while alice.agent == real:
                    await asyncio.sleep(0.1)
        finally:
            await forger.disconnect()
        assert not [b for b in alice.of(StartAnswer) if b.id == forged.id]
        async with asyncio.timeout(20):
            while not alice.resumed:  # the new agent answered alice's resume
                await asyncio.sleep(0.05)
        llm.script(STREAM)
        user_id = await alice.ask(spec.user)
        await alice.wait_turn_end(user_id, within=60)
        assert _answers(alice)[alice.of(StartAnswer)[-1].id].split() == spec.answer.split()
        # Both sides say why the agent left: what explains a room that moved.
        assert f"participant_left {room} {real} (DUPLICATE_IDENTITY)" in watcher.log(tail=10**8)
        lines = worker.text().splitlines()
        left = [json.loads(line) for line in lines if '"room disconnected"' in line]
        assert {"room": room, "reason": "DUPLICATE_IDENTITY"}.items() <= left[0].items(), left


async def test_an_asker_that_left_mid_turn_hears_of_its_cut_turn_from_the_next_agent(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    """The asker leaves while its turn runs (its link lost, as a node's death makes it), the
    turn stops, and its agent dies before the asker is back. The agent that takes the room
    over names the cut turn to the asker as it resumes (a recoverable 503), from what the
    first one logged as the asker left. (It was told only by the agent that saw it leave:
    a node's death that took both, the asker waited for its turn for ever.)"""
    url = await new_database("postgres", postgres_server, tmp_path, "away")
    env = worker_env(url, **LEASE)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running_watcher(livekit, url, port=watch_port, env=LEASE))
        first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        left = contextlib.AsyncExitStack()
        [(room, client, user_id)] = await rooms_mid_turn(livekit, llm, left, 1, STREAM, pace=0.25)
        seen, old_agent = client.highest, client.agent
        await left.aclose()  # the asker's link is gone
        async with asyncio.timeout(30):  # the first agent logged the 503 for it
            while not [s for s in await logged_for(url, room, "user0", "full") if s > seen]:
                await asyncio.sleep(0.2)
        await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        kill(first)
        back = await stack.enter_async_context(following_client(livekit, room, "user0"))
        async with asyncio.timeout(60):  # the next agent (the dead one lingers a while)
            while back.agent in ("", old_agent):
                await asyncio.sleep(0.1)
        # Its resume, repeated as the clients do until answered (the first packets to a
        # new agent can be lost before its link is up).
        body = Configuration(
            conversation_id=room,
            last_sequence_seen=seen,
            features=["reasoning_step_display", "streaming"],
        )
        data = encode(envelope(body, stanza_id=back.counter.next(), conversation_id=room))
        async with asyncio.timeout(30):
            while not [b for b in back.of(ErrorMessage) if b.originating_id == user_id]:
                await back.room.local_participant.publish_data(
                    data, reliable=True, destination_identities=[back.agent], topic=DATA_TOPIC
                )
                with contextlib.suppress(TimeoutError):
                    await back.wait_for(ErrorMessage, within=1.0, originating_id=user_id)
    errors = [b for b in back.of(ErrorMessage) if b.originating_id == user_id]
    assert [(e.code, e.recoverable) for e in errors] == [(503, True)]
