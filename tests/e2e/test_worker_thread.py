"""The thread job executor: every text room of one worker process on the shared room loop.

Integration: the real worker (``python -m alicia.agent start`` with ``ALICIA_JOB_EXECUTOR=thread``),
the session's real livekit-server, the recorded LLM over HTTP. Two rooms at once, one
worker process; each client gets its full ordered turn, and each job ends ("room left")
after its client has gone. Unit: the room-count load (``ALICIA_MAX_ROOMS``) and how
:func:`alicia.agent.rooms.worker.build_server` installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from livekit import api

from alicia.agent.rooms import worker as worker_module
from alicia.agent.settings import Settings
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    AssistantSentence,
    Envelope,
    MessageType,
    ReasoningStep,
    StartAnswer,
    new_id,
)
from tests.e2e.worker import WorkerProcess, running_worker
from tests.e2e.worker_client import client, final, of, user_message, worker_log_on_failure

T = MessageType
NOT_CONNECTED = "The room connection was not established"
# Two recorded streams whose questions pick them (no script queue: rooms run at once).
STREAMS = ("vllm_reasoning", "deepseek_reasoning_content")
LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
LLM_OPTIONS = {"chunk_delay": 0.004}  # paced so that the two rooms' turns overlap

# -- unit: the room-count load -----------------------------------------------------------


@dataclass
class FakeServer:
    """What :func:`alicia.agent.rooms.worker._room_load` reads of an AgentServer."""

    active_jobs: list[object] = field(default_factory=list)


@pytest.mark.parametrize(
    ("jobs", "max_rooms", "share"), [(0, 40, 0.0), (1, 40, 0.025), (10, 40, 0.25), (4, 4, 1.0)]
)
def test_room_load_is_the_server_s_target_at_max_rooms(
    jobs: int, max_rooms: int, share: float
) -> None:
    """0.7 (livekit-server's default ``agents.target_load``) x rooms / ``max_rooms``."""
    server = FakeServer([object() for _ in range(jobs)])
    load = worker_module._room_load(server, max_rooms=max_rooms)  # type: ignore[arg-type]
    assert load == pytest.approx(0.7 * share)


def test_room_load_follows_the_active_jobs_as_they_change() -> None:
    server = FakeServer()
    seen = []
    for _ in range(3):
        server.active_jobs.append(object())
        seen.append(worker_module._room_load(server, max_rooms=2))  # type: ignore[arg-type]
    server.active_jobs.clear()
    seen.append(worker_module._room_load(server, max_rooms=2))  # type: ignore[arg-type]
    assert seen == pytest.approx([0.35, 0.7, 1.05, 0.0])


BASE_ENV = {
    "LIVEKIT_URL": "ws://127.0.0.1:1",
    "LIVEKIT_API_KEY": "devkey",
    "LIVEKIT_API_SECRET": "secret",
    "LLM_BASE_URL": "http://127.0.0.1:1/v1",
    "LLM_MODEL": "recorded-model",
}


@pytest.fixture
def quiet_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """build_server's process-wide side effects (RUST_LOG, a log filter), undone after."""
    monkeypatch.delenv("RUST_LOG", raising=False)
    agents_log = logging.getLogger("livekit.agents")
    filters = list(agents_log.filters)
    yield
    agents_log.filters[:] = filters


@pytest.mark.usefixtures("quiet_build")
def test_build_server_with_max_rooms_reports_rooms_as_load_and_is_full_at_max() -> None:
    settings = Settings.from_env({**BASE_ENV, "ALICIA_MAX_ROOMS": "8"})
    server = worker_module.build_server(settings)
    fnc = server.load_fnc
    assert isinstance(fnc, functools.partial) and fnc.func is worker_module._room_load
    assert fnc.keywords == {"max_rooms": 8}
    # livekit-agents passes the server iff the load function takes a parameter.
    assert len(inspect.signature(fnc).parameters) >= 1
    assert fnc(FakeServer([object()] * 2)) == pytest.approx(0.7 * 0.25)
    threshold = server._load_threshold  # no public getter in livekit-agents 1.8
    assert isinstance(threshold, float)
    # full at 8 rooms, not at 7: whatever the floats' rounding
    assert fnc(FakeServer([object()] * 7)) < threshold <= fnc(FakeServer([object()] * 8))


@pytest.mark.usefixtures("quiet_build")
def test_build_server_keeps_an_explicit_threshold_and_without_max_rooms_the_default_load() -> None:
    with_both = worker_module.build_server(
        Settings.from_env({**BASE_ENV, "ALICIA_MAX_ROOMS": "8", "ALICIA_LOAD_THRESHOLD": "inf"})
    )
    assert isinstance(with_both.load_fnc, functools.partial)
    assert with_both._load_threshold == math.inf
    plain = worker_module.build_server(Settings.from_env(BASE_ENV))
    assert plain.load_fnc is None  # livekit-agents' CPU load
    assert not isinstance(plain._load_threshold, float)  # livekit-agents' own default


@pytest.mark.usefixtures("quiet_build")
def test_the_not_connected_notice_is_dropped_only_on_the_shared_loop() -> None:
    agents_log = logging.getLogger("livekit.agents")

    def record(msg: str) -> logging.LogRecord:
        return agents_log.makeRecord("livekit.agents", logging.WARNING, __file__, 1, msg, (), None)

    notice = record(NOT_CONNECTED + " within 10 seconds...")
    other = record("some other warning")
    worker_module.build_server(Settings.from_env({**BASE_ENV, "ALICIA_JOB_EXECUTOR": "process"}))
    assert agents_log.filter(notice) and agents_log.filter(other)
    worker_module.build_server(Settings.from_env({**BASE_ENV, "ALICIA_JOB_EXECUTOR": "thread"}))
    assert not agents_log.filter(notice) and agents_log.filter(other)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def thread_worker(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> AsyncIterator[WorkerProcess]:
    """One worker process running every room as a thread, text rooms on the shared loop."""
    env = {
        "ALICIA_JOB_EXECUTOR": "thread",
        "ALICIA_LOAD_THRESHOLD": "inf",  # the machine is shared: never refuse a room
        "ALICIA_MAX_ROOMS": "8",  # load = rooms / 8, through livekit-agents' own calls
        # Steps are the recorded paragraphs: the time rule (what an open step may wait)
        # is not what is tested here; at 0.2 s a loaded machine cut a paragraph in two.
        "ALICIA_STEP_MAX_DELAY": "2.0",
    }
    async with running_worker(livekit_server, llm.base_url, env=env) as proc:
        yield proc


async def _create_room(server: LiveKitServer, room: str) -> None:
    """Create ``room`` closing 1 s after its last participant leaves (default 20 s)."""
    async with api.LiveKitAPI(server.http_url, server.api_key, server.api_secret) as lk:
        await lk.room.create_room(api.CreateRoomRequest(name=room, departure_timeout=1))


async def _one_turn(
    server: LiveKitServer, room: str, stream: str, llm: RecordedLLM, stay_until: float
) -> tuple[str, list[Envelope[Any]], str]:
    """Join ``room``, handshake, ask the question that picks ``stream``; the whole turn.

    The client stays until ``stay_until`` (monotonic): past livekit-agents' 10 s check
    for a job that never connected its room.
    """
    async with client(server, room, f"user-{stream}") as c:
        await c.handshake()
        msg = user_message(room, llm.spec(stream).user)
        await c.send(msg)
        box = await c.wait_until(final, within=20)
        await asyncio.sleep(stay_until - time.monotonic())
    return msg.id, box, c.agent


def _records(worker: WorkerProcess) -> list[dict[str, Any]]:
    """The worker's JSON log records, in order (other lines skipped)."""
    records = []
    for line in worker.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def _ours(records: list[dict[str, Any]], room: str) -> list[str]:
    """Messages of ``alicia.*`` loggers about ``room``, in order."""
    return [
        r["message"]
        for r in records
        if str(r.get("name", "")).startswith("alicia.")
        and room in (r.get("room"), r.get("conversation"))
    ]


async def _until_left(worker: WorkerProcess, rooms: list[str], within: float) -> None:
    """Wait until the worker logged "room left" for every room of ``rooms``."""
    async with asyncio.timeout(within):
        while not all("room left" in _ours(_records(worker), r) for r in rooms):
            await asyncio.sleep(0.1)


@pytest.mark.integration
async def test_two_rooms_at_once_on_one_worker_each_get_their_full_ordered_turn(
    livekit_server: LiveKitServer, thread_worker: WorkerProcess, llm: RecordedLLM
) -> None:
    rooms = [new_id("conv") for _ in STREAMS]
    with worker_log_on_failure(thread_worker):
        for room in rooms:
            await _create_room(livekit_server, room)  # dispatches a job to the worker
        stay_until = time.monotonic() + 11.0
        results = await asyncio.gather(
            *(
                _one_turn(livekit_server, r, s, llm, stay_until)
                for r, s in zip(rooms, STREAMS, strict=True)
            )
        )
        # Each client has left: each job ends on its own (its room closes, "room left").
        await _until_left(thread_worker, rooms, within=15)
    log = thread_worker.log_path.read_text(errors="replace")
    records = _records(thread_worker)

    assert sorted(llm.served) == sorted(STREAMS)
    agents = set()
    for room, stream, (msg_id, box, agent) in zip(rooms, STREAMS, results, strict=True):
        spec = llm.spec(stream)
        agents.add(agent)
        n = len(spec.steps)
        assert [e.type for e in box[: n + 2]] == [
            T.CONFIGURATION,
            *[T.REASONING_STEP] * n,
            T.START_ANSWER,
        ], room
        assert {e.type for e in box[n + 2 :]} == {T.ASSISTANT_SENTENCE}
        assert {e.conversation_id for e in box} == {room}
        steps: list[ReasoningStep] = of(box, ReasoningStep)
        assert [s.step_index for s in steps] == list(range(1, n + 1))
        assert [s.content for s in steps] == list(spec.steps)
        assert {s.previous_id for s in steps} == {msg_id}
        start: StartAnswer = of(box, StartAnswer)[0]
        assert start.previous_id == msg_id
        sentences: list[AssistantSentence] = of(box, AssistantSentence)
        assert [s.sequence for s in sentences] == list(range(1, len(sentences) + 1))
        assert [bool(s.is_final) for s in sentences] == [False] * (len(sentences) - 1) + [True]
        assert " ".join(s.text for s in sentences).split() == spec.answer.split()
        # The worker's side: joined, one turn, disconnected (the client had gone), left.
        story = ["room joined", "turn finished", "room disconnected", "room left"]
        assert _ours(records, room) == story
        left = next(r for r in records if r["message"] == "room disconnected" and r["room"] == room)
        assert left["reason"] == "ROOM_CLOSED"  # the client had gone: livekit closed the room
        turn = next(r for r in records if r.get("conversation") == room)
        assert (turn["steps"], turn["stopped"]) == (n, False)
    assert len(agents) == 2  # one agent participant (job) per room

    # At once: both rooms were joined before either turn finished.
    messages = [(r["message"], r.get("room")) for r in records]
    joined_at = [messages.index(("room joined", room)) for room in rooms]
    first_turn = next(i for i, r in enumerate(records) if r["message"] == "turn finished")
    assert max(joined_at) < first_turn
    # Both rooms on ONE shared room loop: it started once, before either room was joined.
    started = [i for i, (m, _) in enumerate(messages) if m == "room loop started"]
    assert len(started) == 1 and started[0] < min(joined_at)
    # One process: every record (the jobs' too) comes from the worker process itself.
    assert {r.get("pid") for r in records} == {thread_worker.proc.pid}
    assert thread_worker.proc.returncode is None
    # The shared loop joins its own rtc.Room, never ctx.connect(): that warning stays out.
    assert NOT_CONNECTED not in log
    assert "Traceback" not in log, log[-4000:]
