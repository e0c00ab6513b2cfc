"""Voice rooms fail over as text rooms do (issue 48): real livekit-server, Postgres, the
watcher, and voice workers (``ALICIA_VOICE=offline``: an AgentSession with the reasoning
bridge, espeak-ng speaking its answers).

The failover tests' lease timeout (``LEASE``, 8 s: a loaded machine starves renewals);
the time to a new agent under the default is measured by ``bench/failover.py --voice``.

* ``kill -9`` of the voice worker while its agent speaks an answer: a new agent joins,
  its AgentSession starts from the conversation stored in Postgres (the finished exchange
  is in its next LLM request), the cut turn is closed for the protocol's clients (its
  final sentence, ErrorMessage 503 naming the user message, stored as failed), the
  listener hears the next answer, and reasoning stays at each participant's level
  through the takeover and on replay (bob, granted none, never gets a step).
* SIGSTOP of the voice worker while its agent speaks, past the takeover: after SIGCONT
  the old agent sends no envelope and no audio that reaches the room.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.harness.speech import AudioRecorder
from alicia.protocol import (
    AssistantSentence,
    ErrorMessage,
    ReasoningStep,
    StartAnswer,
)
from alicia.protocol import new_id as new_conversation_id
from tests.e2e.failover.helpers import (
    LEASE,
    FollowingClient,
    WatcherProcess,
    following_client,
    running_watcher,
    worker_env,
)
from tests.e2e.worker import PROCESS_EXECUTOR, WorkerProcess, running_worker
from tests.support.db import fetch, new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only

STREAM = "deepseek_reasoning_content"
VOICE = {"ALICIA_VOICE": "offline", "ALICIA_TURN_DETECTION": "vad", **PROCESS_EXECUTOR}
"""Typed questions here: the end-of-turn model is not what is tested. A process per room,
as a voice worker runs by default (with the thread executor the stall test's second worker
once got no job in time: not understood yet, so these keep the default)."""
STOPPED_S = 14.0
"""How long the stall test keeps the old worker stopped (past livekit-server's 10 s job
assignment timeout)."""
NONE = {"alicia.reasoning": "none"}


async def _watched(
    stack: contextlib.AsyncExitStack,
    livekit: LiveKitServer,
    llm: RecordedLLM,
    url: str,
    port: int,
    env: dict[str, str],
    lease: dict[str, str],
) -> tuple[WatcherProcess, WorkerProcess]:
    """The watcher on ``port`` and the first voice worker, both on the ``lease`` timeout."""
    watcher = await stack.enter_async_context(running_watcher(livekit, url, port=port, env=lease))
    first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
    return watcher, first


async def _answer(client: FollowingClient, user_id: str, within: float = 90.0) -> None:
    """Until the answer to ``user_id`` is whole (its final sentence)."""
    await client.wait_turn_end(user_id, within=within)
    assert not [e for e in client.of(ErrorMessage) if e.originating_id == user_id]


async def _speaking(client: FollowingClient, recorder: AudioRecorder, user_id: str) -> float:
    """Until the agent is heard speaking the answer to ``user_id`` (its start sent, sound
    from the agent since); the time the sound was heard."""
    start: StartAnswer = await client.wait_for(StartAnswer, within=90, previous_id=user_id)
    asked = time.monotonic()
    async with asyncio.timeout(60):
        while not recorder.loud(after=asked - 5.0, sender=client.agent):
            await asyncio.sleep(0.05)
    assert not client.turn_ended(user_id), f"answer {start.id} over before the fault"
    return recorder.loud(after=asked - 5.0, sender=client.agent)[0]


def _text(content: object) -> str:
    """A chat message's content as text (a string, or a list of text parts)."""
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _state(clients: list[FollowingClient], watcher: WatcherProcess, *workers: WorkerProcess) -> str:
    kinds = "\n".join(
        f"{c.room.local_participant.identity}: agents {c.agents} resumed {c.resumed} "
        f"{[(e.stanza_id, type(e.body).__name__) for e in c.box][-10:]}"
        for c in clients
    )
    logs = "\n".join(f"--- worker ---\n{w.notable()}\n{w.log()}" for w in workers)
    return f"{kinds}\n--- watcher ---\n{watcher.log()}\n{logs}"


async def test_kill_9_of_a_voice_worker_mid_answer_moves_the_room_with_its_conversation(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "voicefail")
    env = worker_env(url, **VOICE, **LEASE)
    spec = llm.spec(STREAM)
    room = new_conversation_id("conv")
    async with contextlib.AsyncExitStack() as stack:
        watcher, first = await _watched(stack, livekit, llm, url, watch_port, env, LEASE)
        alice = await stack.enter_async_context(following_client(livekit, room, "alice"))
        bob = await stack.enter_async_context(following_client(livekit, room, "bob", NONE))
        recorder = AudioRecorder(alice.room)
        for c in (alice, bob):
            await c.wait_for_agent(60)
            await c.handshake()
        old = alice.agent
        # One whole exchange, then a question whose answer is cut while it is spoken.
        llm.script(Play(STREAM, chunk_delay=0.02))
        done_id = await alice.ask(spec.user)
        await _answer(alice, done_id)
        second = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        llm.script(Play(STREAM, chunk_delay=0.02), Play(STREAM, chunk_delay=0.02))
        cut_id = await alice.ask(spec.user)
        await _speaking(alice, recorder, cut_id)
        os.killpg(first.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        try:
            async with asyncio.timeout(30):
                while alice.agent == old or not alice.resumed or not bob.resumed:
                    await asyncio.sleep(0.05)
            new_at = next(t for who, t in alice.agents if who == alice.agent)
            await alice.wait_for(ErrorMessage, within=30, originating_id=cut_id)
            await bob.wait_for(ErrorMessage, within=30, originating_id=cut_id)
        except BaseException as exc:
            raise AssertionError(f"{exc!r}\n{_state([alice, bob], watcher, second)}") from exc
        took = new_at - killed
        # The next question: answered by the new agent, heard, with the conversation.
        again_id = await alice.ask(spec.user)
        asked = time.monotonic()
        await _answer(alice, again_id)
        await recorder.until_quiet(asked, quiet_s=1.0, within=60)
        heard = recorder.loud(after=asked, sender=alice.agent)
        print(
            f"\nnew agent {took:.2f} s after the kill; resumed {alice.resumed[0] - killed:.2f} s;"
            f" the next answer heard {heard[0] - asked:.2f} s after it was asked,"
            f" {len(heard) / 100:.1f} s of sound"
        )
        assert alice.agent != old and bob.agent == alice.agent
        # The cut turn: closed for both, with one recoverable 503 naming it.
        for c in (alice, bob):
            errors = [e for e in c.of(ErrorMessage) if e.originating_id == cut_id]
            assert [(e.code, e.recoverable) for e in errors] == [(503, True)], errors
            assert c.turn_ended(cut_id)
        rows = await fetch(
            url,
            "SELECT previous_id, completion_status FROM alicia_messages "
            f"WHERE conversation_id = '{room}' AND message_role = 'assistant' "
            "ORDER BY created_at",
        )
        for _ in range(100):  # the new agent's writer stores in batches: seconds, loaded
            status = {r["previous_id"]: r["completion_status"] for r in rows}
            if status.get(cut_id) == "failed" and status.get(again_id) == "completed":
                break
            await asyncio.sleep(0.2)
            rows = await fetch(
                url,
                "SELECT previous_id, completion_status FROM alicia_messages "
                f"WHERE conversation_id = '{room}' AND message_role = 'assistant'",
            )
        status = {r["previous_id"]: r["completion_status"] for r in rows}
        assert status == {done_id: "completed", cut_id: "failed", again_id: "completed"}
        # The new agent's AgentSession started from the stored conversation: the finished
        # exchange (question and answer, never reasoning) is in its LLM request.
        request = llm.requests[-1]  # the next question's
        said = [(m["role"], _text(m.get("content"))) for m in request["messages"]]
        # Then the cut turn, with what of its answer was stored before the kill (the
        # engine's takeover keeps it in the history: the model knows it was cut short).
        talk = [(r, t) for r, t in said if r != "system"]
        partial = talk[3][1].split() if len(talk) == 5 else None
        assert partial == spec.answer.split()[: len(partial or ())], said
        assert talk == [
            ("user", spec.user),
            ("assistant", spec.answer),
            ("user", spec.user),
            ("assistant", talk[3][1]),
            ("user", spec.user),
        ], said
        # Heard: the next answer, from the new agent.
        assert len(heard) >= 100, f"{len(heard)} loud frames of the next answer"
        # Levels held through the takeover and on replay: alice's steps of each answered
        # turn, whole and in order; bob none at all.
        assert bob.of(ReasoningStep) == []
        for user_id in (done_id, again_id):
            steps = [s for s in alice.steps() if s.previous_id == user_id]
            assert [s.step_index for s in steps] == list(range(1, len(spec.steps) + 1))
            assert [s.content for s in steps] == list(spec.steps)
        sentences = [s for s in bob.of(AssistantSentence) if s.is_final]
        assert len(sentences) >= 3  # bob got the answers (and the cut one's close)


async def test_a_stalled_voice_worker_is_fenced_and_sends_nothing_once_replaced(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "voicestall")
    stall = {"ALICIA_HEARTBEAT_TIMEOUT": "4"}  # as the text rooms' stall test
    env = worker_env(url, **VOICE, **stall)
    spec = llm.spec(STREAM)
    room = new_conversation_id("conv")
    async with contextlib.AsyncExitStack() as stack:
        watcher, first = await _watched(stack, livekit, llm, url, watch_port, env, stall)
        alice = await stack.enter_async_context(following_client(livekit, room, "alice"))
        recorder = AudioRecorder(alice.room)
        await alice.wait_for_agent(60)
        await alice.handshake()
        old = alice.agent
        second = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        llm.script(Play(STREAM, chunk_delay=0.02), Play(STREAM, chunk_delay=0.02))
        cut_id = await alice.ask(spec.user)
        await _speaking(alice, recorder, cut_id)
        os.killpg(first.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            async with asyncio.timeout(STOPPED_S):
                while alice.agent == old or not alice.resumed:
                    await asyncio.sleep(0.05)
        except TimeoutError as exc:
            raise AssertionError(f"not moved\n{_state([alice], watcher, second)}") from exc
        finally:
            await asyncio.sleep(max(0.0, stopped + STOPPED_S - time.monotonic()))
            os.killpg(first.proc.pid, signal.SIGCONT)
        woke = time.monotonic()
        taken = next(t for who, t in alice.agents if who == alice.agent)
        again_id = await alice.ask(spec.user)
        await _answer(alice, again_id)
        await asyncio.sleep(max(0.0, woke + 8.0 - time.monotonic()))  # the old one awake
        late_packets = [t - woke for who, t, _ in alice.heard if who == old and t >= taken]
        late_audio = recorder.loud(after=taken, sender=old)
        print(
            f"\nmoved {taken - stopped:.2f} s after SIGSTOP; after SIGCONT the old agent: "
            f"{len(late_packets)} packets, {len(late_audio)} loud frames"
        )
        assert late_packets == [], f"the old agent sent after the takeover: {late_packets}"
        late_s = [round(t - woke, 2) for t in late_audio[:3]]
        assert late_audio == [], f"the old agent was heard after the takeover: {late_s}..."
        assert recorder.loud(after=taken, sender=alice.agent), "the new agent was not heard"
        errors = [e for e in alice.of(ErrorMessage) if e.originating_id == cut_id]
        assert [e.code for e in errors] == [503], errors
        log = first.log(tail=10**7)
        assert "lease lost" in log or "fenced" in log, first.log()
