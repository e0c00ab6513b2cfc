"""Rooms per worker: ONE worker process, N rooms, each streaming an LLM turn token by token.

Run: ``.venv/bin/python bench/rooms.py`` (several minutes; ``--rooms 25,50,100`` picks the
trials, which stop at the first failing one unless ``--keep-going``). All real, on
127.0.0.1, all on this machine: livekit-server (harness), the recorded-stream LLM in its
own process, the agent, and client processes (``rtc.Room``, up to 25 rooms each, one
client per room).

**The load.** Models send tokens, and a paragraph-sized step every second or two. The
recorded LLM serves its ``token_turn`` stream (``alicia.harness.recorded_llm``): one SSE
chunk per token, vLLM-shaped (``delta.reasoning``, then ``delta.content``), at ``--rate``
tokens/s per room (default 50) on an absolute schedule; ``--paragraphs`` reasoning
paragraphs of about 60 tokens (so a step every 1.2 s), then a three-sentence answer, then
``[DONE]``: 288 chunks, 5.8 s per turn with 4 paragraphs. Each client sends a UserMessage,
receives the ReasoningSteps, StartAnswer and AssistantSentences, and sends the next
UserMessage as soon as the final sentence arrives (each room's first turn starts at a
random point of one turn's length, so rooms do not run in step).

**Per trial**, two agents serve N rooms each, one after the other, under the same load:

* **worker**: a fresh ``python -m alicia.agent start`` with ``ALICIA_JOB_EXECUTOR=thread``
  (every room a job thread of that one process, text rooms on one shared event loop),
  ``ALICIA_MAX_ROOMS=2N`` and ``ALICIA_LOAD_THRESHOLD=inf`` (it keeps taking rooms on a
  busy machine), ``ALICIA_STEP_MAX_DELAY=5`` (steps are the paragraphs; with the default
  1 s a 1.2 s paragraph is cut at a sentence end by the time rule instead, which changes
  the step count, not the per-token work), ``ALICIA_TIMING_META=true``;
* **floor** (``--floor`` helper): a bare script, its own process, that joins the N rooms as
  an agent participant (sequential connects, rooms routed by ``ffi_routing.route_room``
  as the worker's are), answers each Configuration, and per UserMessage requests the same
  stream with aiohttp, decodes each SSE event with msgspec, and publishes the same encoded
  envelopes (ReasoningStep per paragraph with the same timing meta, StartAnswer,
  AssistantSentence per sentence, the last final) with ``ffi_routing.publish``, the
  worker's ``publish_data`` path. With ``ALICIA_LK_CONVENTIONS`` on (the worker's default)
  it also sends what LiveKit's agent conventions ask of any agent a stock frontend shows:
  each answer as an ``lk.transcription`` text stream (a write per sentence) and the
  ``lk.agent.state`` attribute (thinking, speaking, listening), the cheapest way the SDK
  offers (``ffi_routing.TextStream`` and ``set_attributes``, the worker's path); one that
  fails under load (livekit-server's ``request timeout``) is counted on stderr and the
  room's next ones still go, as the worker's do. No protocol session, storage, history or
  checks: the least any agent must do for this traffic.

Once every room streams, ``--warmup`` seconds pass, then a ``--seconds`` window; then
clients send no new turns and wait for the turn under way to end.

* **step delivery** = the client's ``time.monotonic_ns()`` right after decoding a
  ReasoningStep minus the LLM server's ``time.monotonic_ns()`` just before it wrote the
  step's last token (the ``"\\n\\n"`` chunk that closes the paragraph) to the socket.
  The LLM server reports each closing chunk by room (the user text names the room and the
  turn), turn and paragraph; CLOCK_MONOTONIC is one clock for every process on a Linux
  host. p50/p99 over the steps received in the window;
* **lost**: closing chunks written with no step received for them by the end (every turn
  runs to its end), plus steps received that match no closing chunk or whose text is not
  the paragraph (``mismatched`` is shown apart); **reordered**: per room, steps not
  arriving in (turn, stepIndex) order; **bad answers**: turns whose StartAnswer or
  AssistantSentence sequence was wrong;
* **tokens_per_s**: tokens the LLM server wrote in the window / window (all rooms);
* **CPU ms per room-second**: the agent process's user + system CPU time
  (``/proc/<pid>/stat``, all threads, 10 ms ticks) over the window / (N x window), x 1000;
* **RSS MB per room** (worker): its ``VmRSS`` at the end of the window minus its
  ``VmRSS`` once registered, before any room, / N.

**Telemetry** (unless ``--no-telemetry``): after the worker, the same rooms are served by a
fresh worker with observability on, as an operator turns it on: every turn a traced span
with one event per step, exported over OTLP/HTTP by the SDK's batch processor, and the
metrics both on its Prometheus ``/metrics`` (``ALICIA_METRICS_PORT``) and over OTLP
(``OTEL_METRICS_EXPORTER=otlp``, every 5 s), to a local receiver (a helper process that
takes every export). **telemetry CPU overhead** = its CPU ms per room-second / the plain
worker's - 1, in %; its p99 is shown beside the plain worker's.

Each trial line also shows the worker's CPU with no room (2 s before the clients join:
its fixed cost, inside the per-room figure) and the cores each process group used over
the window (agent, LLM server, clients, livekit-server): where the machine's time goes.

A trial passes with every room streaming, zero lost, reordered, mismatched and bad
answers, worker p99 < 150 ms, and at least 90 % of the nominal N x rate tokens/s (a machine
too busy to keep the LLM's pace would otherwise lighten the load it measures).
Caveats: a shared 2-core machine hosts livekit-server, the LLM server, the agent and
the clients at once, so every figure includes their competition for CPU.

Last line: ``RESULT rooms=<N> tokens_per_s=<x> lost=<n> reordered=<n> p99_ms=<x>
cpu_ms_per_room_s=<x> floor_cpu_ms_per_room_s=<x> rss_mb_per_room=<x>
telemetry_cpu_overhead_pct=<x>`` for the largest
passing N (``rooms=0`` and the smallest trial's figures if none passed).

``--packets`` keeps the earlier per-packet trial: the endless stream at ``--rate`` whole
steps/s per room (default 20), one chunk of 25 tokens per step; steps timed from the
worker's segment-close stamp; it passes with p99 < 100 ms and 90 % of the nominal steps/s.
Its last line: ``RESULT rooms=<N> steps_per_s=<x> lost=<n> reordered=<n> p99_ms=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import aiohttp
import msgspec
from aiohttp import web
from livekit import api, rtc
from livekit.agents.types import (
    ATTRIBUTE_AGENT_STATE,
    ATTRIBUTE_TRANSCRIPTION_FINAL,
    ATTRIBUTE_TRANSCRIPTION_SEGMENT_ID,
    TOPIC_TRANSCRIPTION,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.engine.conversation import META_CLOSED_AT
from alicia.agent.gate.ffi_routing import (
    TextStream,
    publish,
    route_room,
    set_attributes,
    stop_capturing_native_logs,
)
from alicia.harness import LiveKitServer, free_port
from alicia.harness.loopback import serve_app
from alicia.harness.recorded_llm import (
    ENDLESS,
    TOKEN_TURN,
    TURN_PARAGRAPHS,
    Play,
    RecordedLLM,
)
from alicia.protocol import (
    DATA_TOPIC,
    Acknowledgement,
    AssistantSentence,
    Configuration,
    ControlStop,
    ErrorMessage,
    ReasoningStep,
    StanzaCounter,
    StartAnswer,
    UserMessage,
    decode,
    encode,
    envelope,
    new_id,
)
from bench._exit import run_and_exit
from bench._stats import cpu_seconds, percentile, rss_bytes
from tests.e2e.worker import running_worker

TOKENS_PER_STEP = 25  # --packets: the endless stream's paragraphs average 25 tokens
ROOMS_PER_CLIENT_PROCESS = 25
MODEL = "recorded-model"  # the LLM_MODEL tests/e2e/worker.py gives the worker
P99_LIMIT_MS = 150.0
FEATURES = ["reasoning_step_display", "streaming"]

# Markers in the LLM server's events (json.dumps with compact separators).
_TOKEN_EVENT = ('"delta":{"reasoning":', '"delta":{"content":')
_CLOSER = '"delta":{"reasoning":"\\n\\n"}'


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


async def _flush_forever(period: float = 0.2) -> None:
    while True:
        sys.stdout.flush()
        await asyncio.sleep(period)


# -- LLM server process (token level) -----------------------------------------------------


async def token_llm_server(rate: float, paragraphs: int) -> None:
    """Serve ``token_turn`` at ``rate`` tokens/s to every request for :data:`MODEL`.

    stdout: the base URL (JSON), then ``S <room> <turn> <step> <ns>`` per closing chunk
    written and ``T <ns> <tokens written so far>`` every 0.25 s.
    """
    tokens = 0

    def on_stream(body: Mapping[str, Any], stream: str) -> Callable[[str, int], None] | None:
        users = [m for m in body.get("messages") or () if m.get("role") == "user"]
        words = str(users[-1].get("content", "")).split() if users else []
        if stream != TOKEN_TURN or len(words) != 2:
            return None
        room, turn = words
        step = 0

        def on_event(event: str, ns: int) -> None:
            nonlocal tokens, step
            if _TOKEN_EVENT[0] in event or _TOKEN_EVENT[1] in event:
                tokens += 1
                if _CLOSER in event:
                    step += 1
                    _out(f"S {room} {turn} {step} {ns}")

        return on_event

    def play(rate: float, paragraphs: int) -> None:
        llm.route_model(MODEL, Play(TOKEN_TURN, chunk_delay=1.0 / rate, paragraphs=paragraphs))

    async def commands() -> None:  # stdin: ``PLAY <rate> <paragraphs>`` for the next turns
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            kind, *rest = line.decode().split()
            if kind == "PLAY":
                play(float(rest[0]), int(rest[1]))

    async with RecordedLLM(on_stream=on_stream) as llm:
        play(rate, paragraphs)
        listener = asyncio.create_task(commands())
        _out(json.dumps({"url": llm.base_url}))
        sys.stdout.flush()
        try:
            while True:
                await asyncio.sleep(0.25)
                _out(f"T {time.monotonic_ns()} {tokens}")
                sys.stdout.flush()
        finally:
            listener.cancel()


_JOINS_AT_ONCE = 5
"""Room connects a client process runs at once: 25 WebRTC set-ups started together on the
2-core machine time out now and then (``wait_pc_connection timed out``), which failed the
whole process's rooms."""

_JOIN_TRIES = 3


async def _join(
    client: TurnClient | RoomClient, url: str, token: str, gate: asyncio.Semaphore
) -> None:
    """Connect ``client``'s room through ``gate``; a set-up that fails is tried again with a
    new ``rtc.Room`` (up to :data:`_JOIN_TRIES` times)."""
    for attempt in range(1, _JOIN_TRIES + 1):
        async with gate:
            try:
                await client.room.connect(url, token)
                return
            except rtc.ConnectError:
                if attempt == _JOIN_TRIES:
                    raise
        client.room = rtc.Room()
        client.room.on("data_received", client.on_data)


# -- client process (token level) ----------------------------------------------------------


@dataclass
class TurnClient:
    """One client in one room: handshake, then turn after turn until told to stop.

    stdout: ``R <room> <turn> <stepIndex> <recv ns> <closed ns> <text ok>`` per step,
    ``A <room> <turn> <steps> <answer ok>`` per finished turn, ``X <room> <code>`` per
    ErrorMessage.
    """

    name: str
    turn_s: float
    room: rtc.Room = field(default_factory=rtc.Room)
    agent: str = ""
    counter: StanzaCounter = field(default_factory=lambda: StanzaCounter("client"))
    turn: int = 0
    turns: dict[str, int] = field(default_factory=dict)  # UserMessage id -> turn number
    steps: int = 0
    sentences: int = 0
    answer_ok: bool = True
    answering: bool = False
    stopping: bool = False
    in_turn: bool = False
    configured: asyncio.Event = field(default_factory=asyncio.Event)
    first_step: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC:
            return
        env = decode(packet.data)
        now = time.monotonic_ns()
        body = env.body
        if isinstance(body, ReasoningStep):
            turn = self.turns.get(body.previous_id, -1)
            index = body.step_index
            closed = env.meta.get(META_CLOSED_AT, 0) if env.meta else 0
            ok = body.content == TURN_PARAGRAPHS[(index - 1) % len(TURN_PARAGRAPHS)]
            _out(f"R {self.name} {turn} {index} {now} {closed} {int(ok)}")
            if self.answering:
                self.answer_ok = False  # a step after the answer began
            self.steps += 1
            self.first_step.set()
        elif isinstance(body, StartAnswer):
            if self.answering:
                self.answer_ok = False
            self.answering = True
        elif isinstance(body, AssistantSentence):
            self.sentences += 1
            if not self.answering or body.sequence != self.sentences:
                self.answer_ok = False
            if body.is_final:
                self._turn_done()
        elif isinstance(body, Configuration):
            self.configured.set()
        elif isinstance(body, ErrorMessage):
            _out(f"X {self.name} {body.code}")

    def _turn_done(self) -> None:
        _out(f"A {self.name} {self.turn} {self.steps} {int(self.answer_ok)}")
        self.in_turn = False
        if self.stopping:
            self.idle.set()
        else:
            asyncio.get_running_loop().create_task(self.next_turn())

    async def next_turn(self) -> None:
        self.turn += 1
        self.steps = self.sentences = 0
        self.answer_ok, self.answering, self.in_turn = True, False, True
        message = UserMessage(
            id=new_id("msg"), conversation_id=self.name, content=f"{self.name} {self.turn}"
        )
        self.turns[message.id] = self.turn
        await self.send(message)

    def stop(self) -> None:
        self.stopping = True
        if not self.in_turn:
            self.idle.set()

    async def send(self, body: Any) -> None:
        data = encode(envelope(body, stanza_id=self.counter.next(), conversation_id=self.name))
        await publish(self.room, data, [self.agent], DATA_TOPIC)

    async def start(self, url: str, token: str, gate: asyncio.Semaphore) -> None:
        self.room.on("data_received", self.on_data)
        await _join(self, url, token, gate)
        route_room(self.room)  # many rooms in this process: see agent/gate/ffi_routing.py
        stop_capturing_native_logs()  # as the worker does by default
        async with asyncio.timeout(120):
            while not self.agent:
                for p in self.room.remote_participants.values():
                    if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
                        self.agent = p.identity
                await asyncio.sleep(0.05)
            while not self.configured.is_set():  # repeat: the first packets may be lost
                await self.send(Configuration(features=FEATURES))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.configured.wait(), 1.0)
        await asyncio.sleep(random.uniform(0.0, self.turn_s))  # rooms out of step
        await self.next_turn()


async def turn_clients(url: str, tokens: list[tuple[str, str]], turn_s: float) -> None:
    """Run some rooms' clients. stdout: ``READY <n>`` once every room streams, the lines
    of :class:`TurnClient`, then ``DONE <rooms still in a turn>`` after ``STOP`` on stdin."""
    os.environ.setdefault("RUST_LOG", "warn")
    flusher = asyncio.create_task(_flush_forever())
    clients = [TurnClient(name, turn_s) for name, _ in tokens]
    gate = asyncio.Semaphore(_JOINS_AT_ONCE)
    try:
        await asyncio.gather(
            *(c.start(url, tok, gate) for c, (_, tok) in zip(clients, tokens, strict=True))
        )
        await asyncio.wait_for(asyncio.gather(*(c.first_step.wait() for c in clients)), 120)
    except TimeoutError:
        states = [(bool(c.agent), c.configured.is_set(), c.first_step.is_set()) for c in clients]
        print("clients stuck (agent, configured, streaming):", states, file=sys.stderr)
        raise
    _out(f"READY {len(clients)}")
    sys.stdout.flush()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # STOP
    for c in clients:
        c.stop()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(c.idle.wait() for c in clients)), 60)
    flusher.cancel()
    _out(f"DONE {sum(not c.idle.is_set() for c in clients)}")
    sys.stdout.flush()
    await asyncio.gather(*(c.room.disconnect() for c in clients))


# -- the floor: decode and publish, nothing else -------------------------------------------


class _FloorDelta(msgspec.Struct):
    reasoning: str | None = None
    content: str | None = None


class _FloorChoice(msgspec.Struct):
    delta: _FloorDelta | None = None


class _FloorChunk(msgspec.Struct):
    choices: list[_FloorChoice] = []


_floor_chunk = msgspec.json.Decoder(_FloorChunk)
_TRUE = frozenset({"1", "true", "yes", "on"})


class FloorRoom:
    """The floor's side of one room: the same envelopes as the worker, no protocol logic."""

    def __init__(self, name: str, session: aiohttp.ClientSession, base_url: str) -> None:
        self.name = name
        self.room = rtc.Room()
        self.counter = StanzaCounter("server")
        self._session = session
        self._url = base_url + "/chat/completions"
        self._tasks: set[asyncio.Task[None]] = set()
        self.room.on("data_received", self._on_data)
        self.conventions = os.environ.get("ALICIA_LK_CONVENTIONS", "true").lower() in _TRUE
        """Also LiveKit's conventions, as the worker (``ALICIA_LK_CONVENTIONS``, default on)."""
        self._ops: asyncio.Queue[Any] = asyncio.Queue()
        self.failed_ops = 0
        """Convention operations that failed (each logged by the worker as well)."""

    async def _send_conventions(self) -> None:
        """The conventions' room operations, in order, off the protocol's path (as the
        worker sends them). One that fails (livekit-server's signal answering late under
        load: ``request timeout``) is counted and the next goes on, as the worker's do:
        ending here would leave the room's later traffic unsent and the floor lighter."""
        while True:
            op = await self._ops.get()
            try:
                await op
            except Exception:
                self.failed_ops += 1

    def _later(self, op: Any) -> None:
        if self.conventions:
            self._ops.put_nowait(op)
        else:
            op.close()

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC or packet.participant is None:
            return
        body = decode(packet.data).body
        who = packet.participant.identity
        if isinstance(body, Configuration):
            self._spawn(self.send(Configuration(conversation_id=self.name), [who]))
        elif isinstance(body, UserMessage):
            self._spawn(self.turn(body, who))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send(self, body: Any, to: list[str], meta: dict[str, Any] | None = None) -> None:
        env = envelope(body, stanza_id=self.counter.next(), conversation_id=self.name, meta=meta)
        await publish(self.room, encode(env), to, DATA_TOPIC)

    async def turn(self, message: UserMessage, who: str) -> None:
        request = {
            "model": MODEL,
            "stream": True,
            "messages": [
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": message.content},
            ],
        }
        to = [who]
        reasoning = answer = ""
        index = sequence = 0
        answer_id = ""
        transcript = TextStream(self.room, topic=TOPIC_TRANSCRIPTION, attributes={})
        self._later(set_attributes(self.room, {ATTRIBUTE_AGENT_STATE: "thinking"}))
        async with self._session.post(self._url, json=request) as response:
            buffer = b""
            async for data in response.content.iter_any():
                buffer += data
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    if not event.startswith(b"data: ") or event == b"data: [DONE]":
                        continue
                    chunk = _floor_chunk.decode(event[6:])
                    delta = chunk.choices[0].delta if chunk.choices else None
                    if delta is None:
                        continue
                    if delta.reasoning:
                        reasoning += delta.reasoning
                        while "\n\n" in reasoning:
                            paragraph, reasoning = reasoning.split("\n\n", 1)
                            if paragraph.strip():
                                index += 1
                                step = ReasoningStep(
                                    id=new_id("rs"),
                                    conversation_id=self.name,
                                    previous_id=message.id,
                                    content=paragraph.strip(),
                                    step_index=index,
                                )
                                meta = {META_CLOSED_AT: time.monotonic_ns()}
                                await self.send(step, to, meta)
                    if delta.content:
                        if not answer_id:
                            answer_id = new_id("msg")
                            start = StartAnswer(
                                id=answer_id,
                                previous_id=message.id,
                                conversation_id=self.name,
                                answer_type="text",
                            )
                            await self.send(start, to, {"model": MODEL})
                            transcript = TextStream(
                                self.room,
                                topic=TOPIC_TRANSCRIPTION,
                                attributes={
                                    ATTRIBUTE_TRANSCRIPTION_FINAL: "false",
                                    ATTRIBUTE_TRANSCRIPTION_SEGMENT_ID: answer_id,
                                },
                            )
                            self._later(
                                set_attributes(self.room, {ATTRIBUTE_AGENT_STATE: "speaking"})
                            )
                        answer += delta.content
                        while ". " in answer:
                            sentence, answer = answer.split(". ", 1)
                            sequence += 1
                            await self.send(self._sentence(answer_id, sequence, sentence + "."), to)
                            self._later(
                                transcript.write((" " if sequence > 1 else "") + sentence + ".")
                            )
        if not answer_id:
            answer_id = new_id("msg")
            start = StartAnswer(id=answer_id, previous_id=message.id, conversation_id=self.name)
            await self.send(start, to, {"model": MODEL})
        sequence += 1
        await self.send(self._sentence(answer_id, sequence, answer.strip(), final=True), to)
        self._later(transcript.write((" " if sequence > 1 else "") + answer.strip()))
        self._later(transcript.aclose({ATTRIBUTE_TRANSCRIPTION_FINAL: "true"}))
        self._later(set_attributes(self.room, {ATTRIBUTE_AGENT_STATE: "listening"}))

    def _sentence(self, answer: str, sequence: int, text: str, final: bool = False) -> Any:
        return AssistantSentence(
            id=new_id("sent"),
            previous_id=answer,
            conversation_id=self.name,
            sequence=sequence,
            text=text,
            is_final=True if final else None,
        )


async def floor_process(url: str, base_url: str, tokens: list[tuple[str, str]]) -> None:
    """Join every room (one at a time, as the worker does), print ``READY``, serve."""
    os.environ.setdefault("RUST_LOG", "warn")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        rooms = [FloorRoom(name, session, base_url) for name, _ in tokens]
        for floor, (_, token) in zip(rooms, tokens, strict=True):
            await floor.room.connect(url, token, rtc.RoomOptions(auto_subscribe=False))
            route_room(floor.room)
            stop_capturing_native_logs()
            floor._spawn(floor._send_conventions())
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        failed = sum(f.failed_ops for f in rooms)
        print(f"floor: {failed} convention operations failed (sent on)", file=sys.stderr)
        await asyncio.gather(*(f.room.disconnect() for f in rooms))


def agent_token(server: LiveKitServer, identity: str, room: str) -> str:
    """A join token of participant kind ``agent`` (clients look for that kind), allowed to
    set its own attributes as a dispatched agent's is (``lk.agent.state``)."""
    grants = api.VideoGrants(room_join=True, room=room, agent=True, can_update_own_metadata=True)
    tok = api.AccessToken(server.api_key, server.api_secret).with_identity(identity)
    return tok.with_kind("agent").with_name(identity).with_grants(grants).to_jwt()


async def otlp_sink() -> None:
    """A local OTLP/HTTP receiver (the telemetry trial's collector): takes every export to
    ``/v1/traces`` and ``/v1/metrics`` and answers as a collector does; prints its base URL,
    then serves until stdin closes."""
    received = {"bytes": 0, "exports": 0}

    async def export(request: web.Request) -> web.Response:
        received["bytes"] += len(await request.read())
        received["exports"] += 1
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    app.router.add_post("/v1/metrics", export)
    runner, port = await serve_app(app)
    print(json.dumps({"url": f"http://127.0.0.1:{port}"}), flush=True)
    loop = asyncio.get_running_loop()
    while await loop.run_in_executor(None, sys.stdin.readline):  # "COUNT": what it took
        print(json.dumps(received), flush=True)
    await runner.cleanup()


TELEMETRY_ENV: Final = {
    "OTEL_SERVICE_NAME": "alicia-bench",
    "OTEL_BSP_SCHEDULE_DELAY": "1000",
    "OTEL_METRICS_EXPORTER": "otlp",
    "OTEL_METRIC_EXPORT_INTERVAL": "5000",
}
"""The telemetry trial's worker: every turn a traced span with its step events, exported
over OTLP (the SDK's batch processor), and the metrics over OTLP and on ``/metrics``
(``ALICIA_METRICS_PORT``): what an operator who turns observability on runs."""


# -- orchestration (token level) -------------------------------------------------------------


@contextlib.asynccontextmanager
async def spawn(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """This script in a helper mode, as a child process with pipes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=2**28,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _lines(proc: asyncio.subprocess.Process) -> AsyncIterator[str]:
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        yield line.decode().rstrip("\n")


@dataclass
class Joined:
    """The LLM's closing chunks joined with the clients' steps, as they arrive."""

    sent: dict[tuple[str, int, int], int] = field(default_factory=dict)  # key -> write ns
    received: dict[tuple[str, int, int], tuple[int, int]] = field(default_factory=dict)
    samples: list[tuple[int, float, float]] = field(default_factory=list)
    """(receive ns, LLM write -> client ms, agent close -> client ms) per matched step."""
    last: dict[str, tuple[int, int]] = field(default_factory=dict)  # room -> last key seen
    reordered: int = 0
    mismatched: int = 0
    bad_answers: int = 0
    turns: int = 0
    room_turns: dict[str, int] = field(default_factory=dict)  # room -> turns finished
    errors: int = 0
    tokens: list[tuple[int, int]] = field(default_factory=list)  # (ns, tokens written)

    def llm_line(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "S":
            room, turn, step, ns = rest
            key = (room, int(turn), int(step))
            got = self.received.pop(key, None)
            if got is None:
                self.sent[key] = int(ns)
            else:
                self._match(int(ns), *got)
        elif kind == "T":
            self.tokens.append((int(rest[0]), int(rest[1])))

    def client_line(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "R":
            room, turn, index, recv, closed, ok = rest
            key = (room, int(turn), int(index))
            order = (key[1], key[2])
            if room in self.last and order <= self.last[room]:
                self.reordered += 1
            self.last[room] = order
            if ok != "1":
                self.mismatched += 1
            sent = self.sent.pop(key, None)
            if sent is None:
                self.received[key] = (int(recv), int(closed))
            else:
                self._match(sent, int(recv), int(closed))
        elif kind == "A":
            self.turns += 1
            self.room_turns[rest[0]] = self.room_turns.get(rest[0], 0) + 1
            self.bad_answers += rest[3] != "1"
        elif kind == "X":
            self.errors += 1

    def _match(self, sent: int, recv: int, closed: int) -> None:
        close_ms = (recv - closed) / 1e6 if closed else float("nan")
        self.samples.append((recv, (recv - sent) / 1e6, close_ms))

    def latencies(self, start: int, end: int) -> tuple[list[float], list[float]]:
        """(LLM -> client, agent close -> client) ms of the steps received in [start, end)."""
        inside = [s for s in self.samples if start <= s[0] < end]
        return [s[1] for s in inside], [s[2] for s in inside if s[2] == s[2]]

    def tokens_between(self, start: int, end: int) -> float:
        """Tokens written in [start, end), interpolated between the LLM's counter samples."""
        return _at(self.tokens, end) - _at(self.tokens, start)

    def lost(self) -> int:
        """Closing chunks never received, plus steps that match no closing chunk."""
        return len(self.sent) + len(self.received)


def _cpu_or_zero(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:  # that process has ended
        return 0.0


def _at(samples: list[tuple[int, int]], t: int) -> float:
    if not samples:
        return 0.0
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / max(1, t1 - t0)
    return float(samples[0][1] if t < samples[0][0] else samples[-1][1])


class Load:
    """The realistic load on one agent (the worker, or the floor) in ``rooms`` rooms.

    ``async with Load(...) as load``: the LLM server, the agent, then the clients; every
    room streams when it returns. :meth:`stop` ends the turns (each runs to its end);
    :attr:`joined` holds the results so far. :attr:`pid` is the agent process.
    """

    def __init__(
        self,
        server: LiveKitServer,
        rooms: int,
        *,
        rate: float,
        paragraphs: int,
        agent: str = "worker",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.server = server
        self.rooms = rooms
        self.rate = rate
        self.paragraphs = paragraphs
        self.agent = agent
        self.env = dict(env or {})
        self.names = [new_id("conv") for _ in range(rooms)]
        self.joined = Joined()
        self.pid = 0
        self.llm_pid = 0
        self.rss_before = 0
        self.idle_cpu_ms_per_s = float("nan")
        """The worker's CPU ms per second before any room (2 s): its fixed cost."""
        self.streaming = 0
        self.unfinished = 0
        self.worker_log: Path | None = None
        self._stack = contextlib.AsyncExitStack()
        self._clients: list[asyncio.subprocess.Process] = []
        self._agent_proc: asyncio.subprocess.Process | None = None
        self._llm: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()
        self._ready_procs = 0

    @property
    def turn_s(self) -> float:
        return (self.paragraphs * 61 + 42) / self.rate

    async def __aenter__(self) -> Load:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        floor = self._agent_proc
        if floor is not None and floor.stdin is not None and floor.returncode is None:
            with contextlib.suppress(ConnectionError):  # leave the rooms, then exit
                floor.stdin.write(b"STOP\n")
                await floor.stdin.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(floor.wait(), 30)
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        await self._stack.aclose()

    async def _start(self) -> None:
        stack = self._stack
        llm = await stack.enter_async_context(
            spawn("--token-llm", str(self.rate), str(self.paragraphs))
        )
        assert llm.stdout is not None
        self._llm = llm
        self.llm_pid = llm.pid
        base_url = json.loads(await llm.stdout.readline())["url"]
        self._readers.append(asyncio.create_task(self._read(llm, self.joined.llm_line)))
        if self.agent == "worker":
            env = {
                "ALICIA_JOB_EXECUTOR": "thread",
                # Load = rooms served / ALICIA_MAX_ROOMS, not the machine's CPU use (which
                # passes livekit-server's target on this shared box: "no servers available").
                "ALICIA_MAX_ROOMS": str(2 * self.rooms),
                # Never full: a burst of requests on an empty worker would mark it full.
                "ALICIA_LOAD_THRESHOLD": "inf",
                "ALICIA_TIMING_META": "true",
                "ALICIA_STEP_MAX_DELAY": "5",
                # livekit-agents' loop monitor: 2 wake-ups every 20-50 ms per job loop.
                "LIVEKIT_AGENTS_LOOP_BLOCK_WARN_MS": "0",
                **self.env,
            }
            worker = await stack.enter_async_context(running_worker(self.server, base_url, env=env))
            self.pid = worker.proc.pid
            self.worker_log = worker.log_path
            stack.callback(keep_log, worker.log_path, self.rooms)
        else:
            tokens = [[n, agent_token(self.server, f"floor-{n}", n)] for n in self.names]
            floor = await stack.enter_async_context(
                spawn("--floor", self.server.url, base_url, json.dumps(tokens))
            )
            self._agent_proc = floor
            self.pid = floor.pid
        await asyncio.sleep(1.0)  # settle before the baseline
        self.rss_before = rss_bytes(self.pid)
        if self._agent_proc is None:  # the worker with no room: its fixed CPU cost
            cpu = cpu_seconds(self.pid)
            await asyncio.sleep(2.0)
            self.idle_cpu_ms_per_s = (cpu_seconds(self.pid) - cpu) * 1000 / 2.0
        if self._agent_proc is not None:  # the floor joins its rooms before the clients
            assert self._agent_proc.stdout is not None
            line = await asyncio.wait_for(self._agent_proc.stdout.readline(), 300)
            if line.strip() != b"READY":
                raise RuntimeError("the floor did not join its rooms")
        for i in range(0, self.rooms, ROOMS_PER_CLIENT_PROCESS):
            chunk = self.names[i : i + ROOMS_PER_CLIENT_PROCESS]
            tokens = [[n, self.server.token(f"client-{n}", n)] for n in chunk]
            proc = await stack.enter_async_context(
                spawn("--token-clients", self.server.url, json.dumps(tokens), str(self.turn_s))
            )
            self._clients.append(proc)
            self._readers.append(asyncio.create_task(self._read(proc, self.joined.client_line)))
        with contextlib.suppress(TimeoutError):  # a client process that failed: not streaming
            await asyncio.wait_for(self._ready.wait(), 300)

    async def _read(self, proc: asyncio.subprocess.Process, handle: Callable[[str], None]) -> None:
        ready = proc not in self._clients  # the LLM server: nothing to wait for
        async for line in _lines(proc):
            if line.startswith("READY "):
                self.streaming += int(line.split()[1])
                ready = True
                self._one_ready()
            elif line.startswith("DONE "):
                self.unfinished += int(line.split()[1])
            elif line and line[0] in "SRTAX":
                handle(line)
        if not ready:  # a client process that failed: READY will not come
            self._one_ready()

    def _one_ready(self) -> None:
        self._ready_procs += 1
        if self._ready_procs == -(-self.rooms // ROOMS_PER_CLIENT_PROCESS):
            self._ready.set()

    def cpu_split(self) -> dict[str, float]:
        """CPU seconds so far of the agent, the LLM server, the clients and livekit-server."""
        server: Any = getattr(self.server, "_proc", None)
        pids = {
            "agent": [self.pid],
            "llm": [self.llm_pid],
            "clients": [p.pid for p in self._clients if p.returncode is None],
            "server": [server.pid] if server is not None else [],
        }
        return {k: sum(_cpu_or_zero(p) for p in v) for k, v in pids.items()}

    async def play(self, rate: float, paragraphs: int) -> None:
        """Let the LLM serve the turns that start from now at ``rate`` tokens/s with
        ``paragraphs`` reasoning paragraphs."""
        assert self._llm is not None and self._llm.stdin is not None
        self._llm.stdin.write(f"PLAY {rate:g} {paragraphs}\n".encode())
        await self._llm.stdin.drain()

    def fewest_turns(self) -> int:
        """Turns finished by the room that has finished the fewest."""
        return min((self.joined.room_turns.get(n, 0) for n in self.names), default=0)

    def alive(self) -> bool:
        """The agent process still runs."""
        return Path(f"/proc/{self.pid}").exists()

    async def stop(self) -> None:
        """No new turns; wait until each room's turn under way has ended (or 60 s)."""
        for proc in self._clients:
            assert proc.stdin is not None
            with contextlib.suppress(ConnectionError):
                proc.stdin.write(b"STOP\n")
                await proc.stdin.drain()
        for proc in self._clients:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 120)
        await asyncio.sleep(0.6)  # the LLM's last closing chunks (flushed every 0.2 s)


@dataclass
class TokenTrial:
    agent: str
    rooms: int
    streaming: int
    tokens_per_s: float
    steps: int
    lost: int
    reordered: int
    mismatched: int
    bad_answers: int
    errors: int
    unfinished: int
    p50_ms: float
    p99_ms: float
    close_p99_ms: float
    cpu_ms_per_room_s: float
    rss_mb_per_room: float
    idle_cpu_ms_per_s: float
    cores: dict[str, float]
    """CPU cores used over the window by the agent, the LLM server, clients, livekit-server."""

    def passed(self, rate: float) -> bool:
        return (
            self.streaming == self.rooms
            and self.lost == 0
            and self.reordered == 0
            and self.mismatched == 0
            and self.bad_answers == 0
            and self.unfinished == 0
            and self.p99_ms < P99_LIMIT_MS
            and self.tokens_per_s >= 0.9 * self.rooms * rate
        )

    def line(self, rate: float) -> str:
        verdict = "PASS" if self.passed(rate) else "FAIL"
        return (
            f"{self.agent:6s} rooms={self.rooms:4d} streaming={self.streaming:4d} "
            f"tokens_per_s={self.tokens_per_s:7.0f} (nominal {self.rooms * rate:.0f}) "
            f"steps={self.steps} lost={self.lost} reordered={self.reordered} "
            f"mismatched={self.mismatched} bad_answers={self.bad_answers} errors={self.errors} "
            f"unfinished={self.unfinished} p50={self.p50_ms:.1f} ms p99={self.p99_ms:.1f} ms "
            f"(agent close->client p99 {self.close_p99_ms:.1f} ms) "
            f"cpu={self.cpu_ms_per_room_s:.2f} ms/room-s (no rooms: {self.idle_cpu_ms_per_s:.0f} "
            f"ms/s) rss={self.rss_mb_per_room:.2f} MB/room {verdict}; cores used: "
            + " ".join(f"{k}={v:.2f}" for k, v in self.cores.items())
        )


async def token_trial(
    server: LiveKitServer,
    rooms: int,
    args: argparse.Namespace,
    agent: str,
    env: Mapping[str, str] | None = None,
) -> TokenTrial:
    load_of = Load(
        server,
        rooms,
        rate=args.rate,
        paragraphs=args.paragraphs,
        agent="worker" if agent == "telem" else agent,
        env=env,
    )
    async with load_of as load:
        start = time.monotonic_ns() + int(args.warmup * 1e9)
        end = start + int(args.seconds * 1e9)
        await asyncio.sleep((start - time.monotonic_ns()) / 1e9)
        cpu0, split0 = cpu_seconds(load.pid), load.cpu_split()
        await asyncio.sleep((end - time.monotonic_ns()) / 1e9)
        cpu1, split1 = cpu_seconds(load.pid), load.cpu_split()
        rss1 = rss_bytes(load.pid)
        await load.stop()
        j = load.joined
        total, close = j.latencies(start, end)
        return TokenTrial(
            agent=agent,
            rooms=rooms,
            streaming=load.streaming,
            tokens_per_s=j.tokens_between(start, end) / args.seconds,
            steps=len(total),
            lost=j.lost(),
            reordered=j.reordered,
            mismatched=j.mismatched,
            bad_answers=j.bad_answers,
            errors=j.errors,
            unfinished=load.unfinished,
            p50_ms=percentile(total, 50),
            p99_ms=percentile(total, 99),
            close_p99_ms=percentile(close, 99),
            cpu_ms_per_room_s=(cpu1 - cpu0) * 1000 / (rooms * args.seconds),
            rss_mb_per_room=(
                (rss1 - load.rss_before) / rooms / 2**20
                if agent in ("worker", "telem")
                else float("nan")
            ),
            idle_cpu_ms_per_s=load.idle_cpu_ms_per_s,
            cores={k: (split1[k] - split0[k]) / args.seconds for k in split1},
        )


def _header(what: str) -> str:
    return (
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"livekit {version('livekit')}, livekit-agents {version('livekit-agents')}; {what}"
    )


async def tokens_main(args: argparse.Namespace) -> None:
    print(
        _header(
            f"one worker process, thread job executor; {args.rate:g} tokens/s per room, "
            f"{args.paragraphs} paragraphs per turn; {args.warmup:g} s warm-up, "
            f"{args.seconds:g} s window"
        ),
        flush=True,
    )
    results: list[tuple[TokenTrial, TokenTrial | None]] = []
    overheads: dict[int, float] = {}
    async with contextlib.AsyncExitStack() as stack:
        telemetry: dict[str, str] | None = None
        if not args.no_telemetry:
            sink = await stack.enter_async_context(spawn("--otlp-sink"))
            assert sink.stdout is not None
            url = json.loads(await sink.stdout.readline())["url"]
            telemetry = {**TELEMETRY_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": url}
        server = stack.enter_context(
            LiveKitServer(log_level=os.environ.get("ALICIA_BENCH_SERVER_LOG", "warn"))
        )
        for rooms in args.rooms:
            worker = await token_trial(server, rooms, args, "worker")
            print(worker.line(args.rate), flush=True)
            if telemetry is not None:  # the same rooms with traces and metrics on
                metrics = {"ALICIA_METRICS_PORT": str(free_port())}
                telem = await token_trial(server, rooms, args, "telem", {**telemetry, **metrics})
                print(telem.line(args.rate), flush=True)
                assert sink.stdin is not None and sink.stdout is not None
                sink.stdin.write(b"COUNT\n")
                await sink.stdin.drain()
                took = json.loads(await sink.stdout.readline())
                print(
                    f"       OTLP exports received so far: {took['exports']} "
                    f"({took['bytes']} bytes)",
                    flush=True,
                )
                base = max(worker.cpu_ms_per_room_s, 1e-9)
                overheads[rooms] = (telem.cpu_ms_per_room_s / base - 1) * 100
                print(
                    f"       rooms={rooms:4d} telemetry CPU overhead = {overheads[rooms]:+.1f} % "
                    f"(p99 {worker.p99_ms:.1f} -> {telem.p99_ms:.1f} ms)",
                    flush=True,
                )
            floor = None
            if not args.no_floor:
                floor = await token_trial(server, rooms, args, "floor")
                print(floor.line(args.rate), flush=True)
                print(
                    f"       rooms={rooms:4d} worker/floor CPU = "
                    f"{worker.cpu_ms_per_room_s / max(floor.cpu_ms_per_room_s, 1e-9):.2f}",
                    flush=True,
                )
            results.append((worker, floor))
            if not worker.passed(args.rate) and not args.keep_going:
                break
        keep_log(server.log_path, 0, "server")
    passing = [r for r in results if r[0].passed(args.rate)]
    best = max(passing, key=lambda r: r[0].rooms) if passing else None
    w, f = best or results[0]
    floor_cpu = f"{f.cpu_ms_per_room_s:.2f}" if f is not None else "nan"
    overhead = overheads.get(w.rooms, float("nan"))
    print(
        f"RESULT rooms={w.rooms if best else 0} tokens_per_s={w.tokens_per_s:.1f} "
        f"lost={w.lost} reordered={w.reordered} p99_ms={w.p99_ms:.1f} "
        f"cpu_ms_per_room_s={w.cpu_ms_per_room_s:.2f} floor_cpu_ms_per_room_s={floor_cpu} "
        f"rss_mb_per_room={w.rss_mb_per_room:.2f} telemetry_cpu_overhead_pct={overhead:.1f}"
    )


# -- --packets: the earlier whole-step trial ---------------------------------------------------


async def packets_llm_server(plays: int, rate: float) -> None:
    """Serve ``plays`` endless streams at ``rate`` steps/s; print the base URL."""
    async with RecordedLLM() as llm:
        tokens = TOKENS_PER_STEP
        llm.script(*[Play(ENDLESS, chunk_delay=1.0 / rate, tokens_per_event=tokens)] * plays)
        print(llm.base_url, flush=True)
        await asyncio.Event().wait()


@dataclass
class RoomClient:
    """One client in one room: handshake, turn, stop; records every step it gets."""

    name: str
    room: rtc.Room = field(default_factory=rtc.Room)
    agent: str = ""
    counter: StanzaCounter = field(default_factory=lambda: StanzaCounter("client"))
    steps: list[tuple[int, int, int]] = field(default_factory=list)  # (recv ns, index, closed)
    configured: asyncio.Event = field(default_factory=asyncio.Event)
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    first_step: asyncio.Event = field(default_factory=asyncio.Event)

    def on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC:
            return
        env = decode(packet.data)
        now = time.monotonic_ns()
        body = env.body
        if isinstance(body, ReasoningStep):
            closed = env.meta.get(META_CLOSED_AT, now) if env.meta else now
            self.steps.append((now, body.step_index, closed))
            self.first_step.set()
        elif isinstance(body, Configuration):
            self.configured.set()
        elif isinstance(body, Acknowledgement):
            self.acked.set()

    async def send(self, body: Any) -> None:
        data = encode(envelope(body, stanza_id=self.counter.next(), conversation_id=self.name))
        await self.room.local_participant.publish_data(
            data, reliable=True, destination_identities=[self.agent], topic=DATA_TOPIC
        )

    async def start(self, url: str, token: str, gate: asyncio.Semaphore) -> None:
        self.room.on("data_received", self.on_data)
        await _join(self, url, token, gate)
        route_room(self.room)  # many rooms in this process: see agent/gate/ffi_routing.py
        stop_capturing_native_logs()  # as the worker does by default
        async with asyncio.timeout(60):
            while not self.agent:
                for p in self.room.remote_participants.values():
                    if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
                        self.agent = p.identity
                await asyncio.sleep(0.05)
            while not self.configured.is_set():  # repeat: the first packets may be lost
                await self.send(Configuration(features=["reasoning_step_display"]))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.configured.wait(), 1.0)
        await self.send(UserMessage(id=new_id("msg"), conversation_id=self.name, content="go"))


async def packets_client_process(url: str, tokens: list[tuple[str, str]], seconds: float) -> None:
    """Run some rooms' clients; protocol on stdin/stdout (one JSON line each way)."""
    os.environ.setdefault("RUST_LOG", "warn")
    clients = [RoomClient(name) for name, _ in tokens]
    gate = asyncio.Semaphore(_JOINS_AT_ONCE)
    try:
        await asyncio.gather(
            *(c.start(url, tok, gate) for c, (_, tok) in zip(clients, tokens, strict=True))
        )
        await asyncio.wait_for(asyncio.gather(*(c.first_step.wait() for c in clients)), 60)
    except TimeoutError:
        states = [(bool(c.agent), c.configured.is_set(), c.first_step.is_set()) for c in clients]
        print("clients stuck (agent, configured, streaming):", states, file=sys.stderr)
        raise
    print(json.dumps({"streaming": len(clients)}), flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    window = json.loads(line)  # {"start": ns, "end": ns}
    await asyncio.sleep(max(0.0, (window["end"] - time.monotonic_ns()) / 1e9))
    await asyncio.gather(*(c.send(ControlStop(conversation_id=c.name)) for c in clients))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(c.acked.wait() for c in clients)), 20)
    report = {c.name: {"steps": c.steps, "acked": c.acked.is_set()} for c in clients}
    print(json.dumps(report), flush=True)
    await asyncio.gather(*(c.room.disconnect() for c in clients))


@dataclass
class PacketTrial:
    rooms: int
    streaming: int
    steps_per_s: float
    lost: int
    reordered: int
    p99_ms: float
    p50_ms: float
    unacked: int

    def passed(self, rate: float) -> bool:
        return (
            self.streaming == self.rooms
            and self.unacked == 0
            and self.lost == 0
            and self.reordered == 0
            and self.p99_ms < 100.0
            and self.steps_per_s >= 0.9 * self.rooms * rate
        )


def keep_log(path: Path, rooms: int, what: str = "worker") -> None:
    """Copy a log into the system temp dir (the original is deleted with its process)."""
    kept = Path(tempfile.gettempdir()) / f"alicia-bench-rooms-{rooms}-{what}.log"
    shutil.copyfile(path, kept)
    print(f"{what} log: {kept}", file=sys.stderr, flush=True)


async def packets_trial(
    server: LiveKitServer, rooms: int, rate: float, seconds: float
) -> PacketTrial:
    names = [new_id("conv") for _ in range(rooms)]
    env = {
        "ALICIA_JOB_EXECUTOR": "thread",
        "ALICIA_MAX_ROOMS": str(2 * rooms),
        "ALICIA_LOAD_THRESHOLD": "inf",
        "ALICIA_TIMING_META": "true",
        "ALICIA_STEP_MAX_DELAY": "5",
        "LIVEKIT_AGENTS_LOOP_BLOCK_WARN_MS": "0",
    }
    async with spawn("--llm-server", str(rooms), str(rate)) as llm_proc:
        assert llm_proc.stdout is not None
        base_url = (await llm_proc.stdout.readline()).decode().strip()
        async with (
            running_worker(server, base_url, env=env) as worker,
            contextlib.AsyncExitStack() as stack,
        ):
            stack.callback(keep_log, worker.log_path, rooms)
            procs = []
            for i in range(0, rooms, ROOMS_PER_CLIENT_PROCESS):
                chunk = names[i : i + ROOMS_PER_CLIENT_PROCESS]
                tokens = [[n, server.token(f"client-{n}", n)] for n in chunk]
                proc = await stack.enter_async_context(
                    spawn("--clients", server.url, json.dumps(tokens), str(seconds))
                )
                procs.append(proc)
            streaming = 0
            for proc in procs:
                assert proc.stdout is not None
                try:
                    line = await asyncio.wait_for(proc.stdout.readline(), 180)
                except TimeoutError:
                    line = b""
                if line:  # empty: the client process failed before all its rooms streamed
                    streaming += json.loads(line)["streaming"]
            start = time.monotonic_ns() + int(0.5e9)
            end = start + int(seconds * 1e9)
            for proc in procs:
                assert proc.stdin is not None
                with contextlib.suppress(ConnectionError):  # that client process failed
                    proc.stdin.write((json.dumps({"start": start, "end": end}) + "\n").encode())
                    await proc.stdin.drain()
            reports: dict[str, Any] = {}
            for proc in procs:
                assert proc.stdout is not None
                try:
                    line = await asyncio.wait_for(proc.stdout.readline(), seconds + 120)
                except TimeoutError:
                    line = b""
                if line:
                    reports.update(json.loads(line))

    lost = reordered = unacked = in_window = 0
    latencies: list[float] = []
    for name in names:
        report = reports.get(name, {"steps": [], "acked": False})
        unacked += not report["acked"]
        indexes = [index for _, index, _ in report["steps"]]
        if indexes:
            lost += max(indexes) - len(set(indexes))
        reordered += sum(1 for a, b in itertools.pairwise(indexes) if b <= a)
        for received, _, closed in report["steps"]:
            if start <= received < end:
                in_window += 1
                latencies.append((received - closed) / 1e6)
    return PacketTrial(
        rooms=rooms,
        streaming=streaming,
        steps_per_s=in_window / seconds,
        lost=lost,
        reordered=reordered,
        p99_ms=percentile(latencies, 99),
        p50_ms=percentile(latencies, 50),
        unacked=unacked,
    )


async def packets_main(args: argparse.Namespace) -> None:
    print(
        _header(
            f"one worker process, thread job executor, {args.rate:g} steps/s per room, "
            f"{args.seconds:g} s window"
        ),
        flush=True,
    )
    results: list[PacketTrial] = []
    with LiveKitServer(log_level=os.environ.get("ALICIA_BENCH_SERVER_LOG", "warn")) as server:
        for rooms in args.rooms:
            t = await packets_trial(server, rooms, args.rate, args.seconds)
            results.append(t)
            print(
                f"rooms={t.rooms:4d} streaming={t.streaming:4d} steps_per_s={t.steps_per_s:8.1f} "
                f"(nominal {t.rooms * args.rate:.0f}) lost={t.lost} reordered={t.reordered} "
                f"unacked={t.unacked} p50={t.p50_ms:.1f} ms p99={t.p99_ms:.1f} ms "
                f"{'PASS' if t.passed(args.rate) else 'FAIL'}",
                flush=True,
            )
            if not t.passed(args.rate) and not args.keep_going:
                break
        keep_log(server.log_path, 0, "server")
    passing = [t for t in results if t.passed(args.rate)]
    best = max(passing, key=lambda t: t.rooms) if passing else None
    shown = best or results[0]
    print(
        f"RESULT rooms={best.rooms if best else 0} steps_per_s={shown.steps_per_s:.1f} "
        f"lost={shown.lost} reordered={shown.reordered} p99_ms={shown.p99_ms:.1f}"
    )


# -- command line -----------------------------------------------------------------------------


def _helper(argv: list[str]) -> bool:
    """Run a helper mode (a child process of the benchmark); False if ``argv`` is none."""
    mode = argv[0] if argv else ""
    if mode == "--token-llm":
        asyncio.run(token_llm_server(float(argv[1]), int(argv[2])))
    elif mode == "--token-clients":
        tokens = [(n, t) for n, t in json.loads(argv[2])]
        asyncio.run(turn_clients(argv[1], tokens, float(argv[3])))
    elif mode == "--floor":
        tokens = [(n, t) for n, t in json.loads(argv[3])]
        asyncio.run(floor_process(argv[1], argv[2], tokens))
    elif mode == "--otlp-sink":
        asyncio.run(otlp_sink())
    elif mode == "--llm-server":
        asyncio.run(packets_llm_server(int(argv[1]) * 2, float(argv[2])))
    elif mode == "--clients":
        tokens = [(n, t) for n, t in json.loads(argv[2])]
        asyncio.run(packets_client_process(argv[1], tokens, float(argv[3])))
    else:
        return False
    return True


def room_counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark; helper modes run the LLM server, clients or the floor."""
    argv = sys.argv[1:] if argv is None else argv
    if _helper(argv):
        return
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rooms",
        type=room_counts,
        default=None,
        help="comma-separated room counts, one trial each "
        "(default 25,50,75,100,125,150; --packets: 10,20,30,40,50,60,80,100)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="tokens/s per room (default 50); --packets: steps/s per room (default 20)",
    )
    parser.add_argument("--paragraphs", type=int, default=4, help="reasoning paragraphs per turn")
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor trials")
    parser.add_argument(
        "--no-telemetry", action="store_true", help="skip the telemetry trials (traces, metrics)"
    )
    parser.add_argument(
        "--keep-going", action="store_true", help="run every trial, not only up to a failure"
    )
    parser.add_argument(
        "--packets", action="store_true", help="the earlier whole-step (per-packet) trial"
    )
    args = parser.parse_args(argv)
    if args.packets:
        args.rooms = args.rooms or [10, 20, 30, 40, 50, 60, 80, 100]
        args.rate = args.rate or 20.0
        asyncio.run(packets_main(args))
    else:
        args.rooms = args.rooms or [25, 50, 75, 100, 125, 150]
        args.rate = args.rate or 50.0
        asyncio.run(tokens_main(args))


if __name__ == "__main__":
    run_and_exit(main)
