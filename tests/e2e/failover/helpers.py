"""Failover test parts: the watcher as a process, and a client that follows the agent.

:func:`running_watcher` starts ``python -m alicia.agent.watch`` (its webhook port is
the one the test's livekit-server posts to). :class:`FollowingClient` is a protocol
client in a real room that trusts only participants of kind AGENT, one at a time while
it stays (the clients' ``AgentTrust``), keeps every envelope they send with its
``stanzaId``, and when another agent takes over, the same one comes back or its own link
does, resumes with it (Configuration with ``lastSequenceSeen`` = the highest server stanza
received when the link or the agent was lost, kept by the client library's
``ServerSequence``; below an envelope whose sender the SDK could not name), and repeats
a question until the agent shows it has it (``alicia.client.questions``), as the
project's clients do. :func:`open_leases` and :func:`lease_keeper` open the lease table
(and a process's lease keeper) on a test's database and release its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livekit import api, rtc

from alicia.agent.gate.ffi_routing import route_room
from alicia.agent.rooms.lease_keeper import LeaseKeeper
from alicia.agent.storage.leases import Leases
from alicia.client.following import UNNAMED_WINDOW_S
from alicia.client.questions import REPEAT_INTERVAL_S, UnheardQuestions
from alicia.client.sequence import ServerSequence
from alicia.client.trust import AgentTrust
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.protocol import (
    DATA_TOPIC,
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Body,
    Configuration,
    Envelope,
    ErrorMessage,
    ProtocolError,
    ReasoningStep,
    StanzaCounter,
    UserMessage,
    decode,
    encode,
    envelope,
    new_id,
)
from tests.paths import ROOT
from tests.support import process_logs
from tests.support.db import fetch
from tests.support.zygote import ModuleProcess, python_module

__all__ = [
    "LEASE",
    "FollowingClient",
    "WatcherProcess",
    "agents_in",
    "following_client",
    "lease_keeper",
    "logged_for",
    "open_leases",
    "rooms_mid_turn",
    "running_watcher",
    "worker_env",
]

AGENT = rtc.ParticipantKind.PARTICIPANT_KIND_AGENT


LEASE = {"ALICIA_HEARTBEAT_TIMEOUT": "8"}
"""The workers' and the watcher's lease timeout here (1.5 s by default): these tests count
the takeovers the fault makes, and a loaded 2-core machine (the suite's first minute:
every worker starting its servers, speech models loading) starved the first worker's
renewals and moved rooms before the kill: at 1.5 s, then at 4 s (fresh89: the renewals of
ten rooms starting their turns lagged 4.3 s, the watcher removed the agents,
PARTICIPANT_REMOVED, before the kill). Detection within the default is the stall tests'
promise (``test_failover_faults.py``); the partition tests' too (a fresh clone's first
worker lost its rooms to starved renewals before the link was cut)."""


def worker_env(url: str, **extra: str) -> dict[str, str]:
    """A failover worker's environment on the database ``url`` (explicit dispatch under
    ``alicia``, the thread job executor), with ``extra`` on top."""
    return {
        "DATABASE_URL": url,
        "ALICIA_FAILOVER": "true",
        "ALICIA_AGENT_NAME": "alicia",
        "ALICIA_JOB_EXECUTOR": "thread",
        "ALICIA_LOAD_THRESHOLD": "inf",
        **extra,
    }


@contextlib.asynccontextmanager
async def open_leases(url: str) -> AsyncIterator[Leases]:
    """The lease table on the database ``url``; its connections released on the way out."""
    leases = Leases(url)
    try:
        yield leases
    finally:
        await leases.aclose()


@contextlib.asynccontextmanager
async def lease_keeper(
    url: str, *, interval_s: float = 0.1, timeout_s: float = 0.5
) -> AsyncIterator[LeaseKeeper]:
    """A process's lease keeper on ``url`` (heartbeats every ``interval_s``, leases stale
    after ``timeout_s``); its thread stopped and its connections released on the way out."""
    keeper = LeaseKeeper(url, interval_s=interval_s, timeout_s=timeout_s)
    try:
        yield keeper
    finally:
        await keeper.aclose()


@dataclass
class WatcherProcess:
    """A started watcher."""

    proc: ModuleProcess
    log_path: Path
    kept: str | None = None
    """The whole log as it was when the watcher stopped (its file is gone then)."""

    def text(self) -> str:
        """The whole log so far (or as it was when the watcher stopped)."""
        if self.kept is not None:
            return self.kept
        return self.log_path.read_text(errors="replace")

    def log(self, tail: int = 8000) -> str:
        """The end of the watcher's log."""
        return self.text()[-tail:]

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself holds the listening TCP socket on 127.0.0.1:``port``
    (Linux's ``/proc``): something else on the port (a server that took it between the
    pick and the bind) answers connections too, and livekit-server's webhooks go there."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":  # LISTEN
            inodes.add(f"socket:[{fields[9]}]")
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return True
    return False


@contextlib.asynccontextmanager
async def running_watcher(
    server: LiveKitServer, database_url: str, *, port: int, env: Mapping[str, str] | None = None
) -> AsyncIterator[WatcherProcess]:
    """``python -m alicia.agent.watch`` on ``port`` for ``server``'s rooms; listening there
    itself."""
    full_env = {
        **os.environ,
        **server.env(),
        "DATABASE_URL": database_url,
        "ALICIA_AGENT_NAME": "alicia",
        "ALICIA_WATCH_PORT": str(port),
        "ALICIA_WATCH_POLL": "2",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    with tempfile.TemporaryDirectory(prefix="alicia-watch-") as tmp:
        log_path = Path(tmp) / "watch.log"
        proc = await python_module("alicia.agent.watch", [], env=full_env, log=log_path, cwd=ROOT)
        watcher = WatcherProcess(proc, log_path)
        logged = process_logs.started(f"watcher {proc.pid}", watcher.text)
        try:
            deadline = time.monotonic() + 30
            while not _listens(proc.pid, port):
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the watcher did not start on {port}:\n{watcher.log()}")
                await asyncio.sleep(0.05)
            yield watcher
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    watcher.kill()
                    await proc.wait()
            watcher.kept = log_path.read_text(errors="replace")
            process_logs.stopped(logged, watcher.text)


class FollowingClient:
    """A protocol client that follows the room's agent (see the module docstring)."""

    def __init__(self, room: rtc.Room, conversation_id: str) -> None:
        self.room = room
        self.conversation_id = conversation_id
        self.counter = StanzaCounter("client")
        self.box: list[Envelope[Any]] = []
        """Every server envelope received, in arrival order, each stanzaId once: the same
        bytes again (a resume answered twice, §4.9) are counted in :attr:`duplicates` and
        dropped, as the clients do; other bytes under a stanzaId held go to
        :attr:`conflicts` (a bug: no client could tell which is right)."""
        self.duplicates = 0
        self.conflicts: list[Envelope[Any]] = []
        self.unexplained: list[Envelope[Any]] = []
        """Envelopes received twice that no resume asked for again (|stanzaId| at or below
        the lastSequenceSeen of every resume sent): an agent that sent twice."""
        self.resumed_from: list[int] = []
        """The lastSequenceSeen of each resume sent."""
        self._held: dict[int, bytes] = {}
        self.agent = ""
        self.agents: list[tuple[str, float]] = []
        """(identity, time.monotonic() it was first trusted) of each agent followed."""
        self.resumed: list[float] = []
        """time.monotonic() when each resume was answered."""
        self._resuming: asyncio.Task[None] | None = None
        self.reconnected: list[float] = []
        """time.monotonic() of each reconnection of the client's link (the SDK's event)."""
        self.heard: list[tuple[str, float, bytes]] = []
        """(sender, time.monotonic(), bytes) of every packet any agent sent it."""
        self._trust = AgentTrust(agent_name=None, expected_identity=None)
        self.sequence = ServerSequence()
        """The resume point, as the client library keeps it (the high mark when the link
        or the agent was lost; below an envelope from a sender the SDK could not name)."""
        self._resync = False
        self._unnamed_until = 0.0
        self.unnamed = 0
        """Server envelopes not held that came from a sender the SDK could not name."""
        self.questions = UnheardQuestions()
        self.asked_again = 0
        """Questions sent again because nothing had been heard of their turn yet."""
        self.noise: set[str] = set()
        """Ids of the agent's refusals of a question sent again (it had it): not errors."""
        self._event = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        room.on("data_received", self._on_data)
        room.on("participant_connected", self._on_participant)
        room.on("participant_attributes_changed", self._on_attributes)
        room.on("participant_disconnected", self._on_left)
        room.on("reconnecting", self.sequence.lost)
        room.on("reconnected", self._on_reconnected)
        for p in room.remote_participants.values():
            self._on_participant(p)

    @property
    def highest(self) -> int:
        """The highest ``|stanzaId|`` received from an agent."""
        return max((-e.stanza_id for e in self.box), default=0)

    def _on_participant(self, participant: rtc.RemoteParticipant) -> None:
        # The clients' rule (alicia.client.trust): trust stays with the agent while it is in
        # the room, so an old agent that rejoins for a moment (woken after a stall, before
        # it finds itself fenced) is not followed.
        if self._trust.offer(participant, self.room.remote_participants):
            self._follow(participant)

    def _on_attributes(self, changed: Mapping[str, str], participant: rtc.Participant) -> None:
        # An agent announces the protocol (``alicia.protocol``) once joined: the clients'
        # rule trusts it from then on.
        if isinstance(participant, rtc.RemoteParticipant):
            self._on_participant(participant)

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        present = self.room.remote_participants
        if not self._trust.leave(present):
            return
        self.sequence.lost()
        if (found := self._trust.successor(present)) is not None:
            self._follow(found)

    def _follow(self, participant: rtc.RemoteParticipant) -> None:
        """Trust moved to ``participant``: resume with it unless it is the first agent
        (the same agent too, back after it left: its rooms's node died, say)."""
        first = not self.agent
        if participant.identity != self.agent:
            self.agent = participant.identity
            self.agents.append((participant.identity, time.monotonic()))
        self._event.set()
        if not first:
            self._open_unnamed_window()
            self._start_resume()

    def _on_reconnected(self) -> None:
        """The SDK brought the link back (perhaps into the room started again on another
        node): resume with the agent if it is here, as the client library does (else with
        it once it is back)."""
        self.reconnected.append(time.monotonic())
        if self._trust.identity is not None:
            self._open_unnamed_window()
            self._start_resume()

    def _open_unnamed_window(self) -> None:
        self._unnamed_until = time.monotonic() + UNNAMED_WINDOW_S

    def _start_resume(self) -> None:
        """One resume at a time, as the client library: a later one replaces it (the SDK
        can report two reconnections of one outage; two resumes repeating their
        Configurations side by side run into the agent's resume rate, 504)."""
        if self._resuming is not None and not self._resuming.done():
            self._resuming.cancel()
        task = asyncio.get_running_loop().create_task(self._resume())
        self._resuming = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        sender = packet.participant
        if packet.topic == DATA_TOPIC and sender is None:
            self._unnamed(packet.data)
        if packet.topic != DATA_TOPIC or sender is None or sender.kind != AGENT:
            return
        self.heard.append((sender.identity, time.monotonic(), bytes(packet.data)))
        if sender.identity != self.agent:
            self._on_participant(sender)  # followed only if ours is no longer here
        if sender.identity != self.agent:
            # As the clients do (alicia.client.session): an agent not followed is not
            # heeded. A killed agent's last packets can arrive after its departure was
            # signalled and the resume with its successor asked for what they carry.
            return
        env = decode(packet.data)
        if env.stanza_id < 0:
            held = self._held.get(env.stanza_id)
            if held is None:
                self._held[env.stanza_id] = bytes(packet.data)
                self.sequence.accept(sender.identity, env.stanza_id)
                body = env.body
                if isinstance(body, ErrorMessage) and self.questions.is_noise(body):
                    self.noise.add(body.id)
                elif isinstance(body, Acknowledgement):
                    self.questions.heard(body.acknowledged_message_id)
                self.box.append(env)
                self._event.set()
            elif held == packet.data:
                self.duplicates += 1
                if not any(-env.stanza_id > seen for seen in self.resumed_from):
                    self.unexplained.append(env)
            else:
                self.conflicts.append(env)

    def _unnamed(self, data: bytes) -> None:
        """A packet from a sender the SDK cannot name yet (the agent's data outran the
        news of its rejoining): not taken, but resumed from below it, as the client
        library does (after a resume in flight: its answer may be what was dropped; once
        per window after the link or the agent came back)."""
        if time.monotonic() > self._unnamed_until:  # no window, or its resume spent
            return
        try:
            stanza = decode(data).stanza_id
        except ProtocolError:
            return
        if not self.sequence.suspect(stanza):
            return
        self.unnamed += 1
        self._unnamed_until = 0.0  # the window's one resume
        if self._resuming is not None and not self._resuming.done():
            self._resync = True
        elif self._trust.identity is not None:
            self._start_resume()

    async def _resume(self) -> None:
        self._resync = False
        seen, suspects = self.sequence.asking()
        held = self.highest  # the reply is numbered above all of it (a replay may not be)
        self.resumed_from.append(seen)
        body = Configuration(
            conversation_id=self.conversation_id,
            last_sequence_seen=seen,
            features=["reasoning_step_display", "streaming"],
        )
        stanza = self.counter.next()
        data = encode(envelope(body, stanza_id=stanza, conversation_id=self.conversation_id))
        # The first packets to a new agent can be lost before its link is up, and its reply
        # before ours is: repeat the same envelope, as the clients do (the agent answers each
        # repeat in full within its resume rate), soon, then less often.
        for wait in (0.5, 0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0):
            await self.room.local_participant.publish_data(
                data, reliable=True, destination_identities=[self.agent], topic=DATA_TOPIC
            )
            with contextlib.suppress(TimeoutError):
                await self.wait_for(Configuration, within=wait, after=held)
                self.resumed.append(time.monotonic())
                self.sequence.resumed(suspects)
                if self._resync and self.sequence.suspected:
                    self._resuming = None  # this task ends here
                    self._start_resume()
                return

    async def wait_for_agent(self, within: float = 30.0) -> None:
        async with asyncio.timeout(within):
            while not self.agent:
                self._event.clear()
                await self._event.wait()

    async def send(self, body: Body) -> int:
        """Send ``body`` to the current agent; its stanzaId."""
        return (await self._send(body)).stanza_id

    async def _send(self, body: Body) -> Envelope[Any]:
        env = envelope(body, stanza_id=self.counter.next(), conversation_id=self.conversation_id)
        await self._publish(env)
        return env

    async def _publish(self, env: Envelope[Any]) -> None:
        await self.room.local_participant.publish_data(
            encode(env), reliable=True, destination_identities=[self.agent], topic=DATA_TOPIC
        )

    async def aclose(self) -> None:
        """Stop the client's tasks (resumes, repeats)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def handshake(self) -> None:
        for _ in range(15):
            await self.send(Configuration(features=["reasoning_step_display", "streaming"]))
            with contextlib.suppress(TimeoutError):
                await self.wait_for(Configuration, within=1.0)
                return
        raise TimeoutError("no Configuration reply")

    async def ask(self, text: str) -> str:
        """Send a UserMessage (repeated until its turn is heard of, as the clients do);
        its id."""
        message = UserMessage(id=new_id("msg"), conversation_id=self.conversation_id, content=text)
        self.questions.sent(message.id, await self._send(message))
        if not any(t.get_name() == "repeat" for t in self._tasks):
            task = asyncio.get_running_loop().create_task(self._repeat(), name="repeat")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return message.id

    async def _repeat(self) -> None:
        """The clients' repeats of questions not heard of (alicia.client.questions)."""
        while self.questions:
            await asyncio.sleep(REPEAT_INTERVAL_S)
            if self._resuming is not None and not self._resuming.done():
                continue
            for repeat in self.questions.due(self._heard_of):
                self.asked_again += 1
                try:
                    if repeat.verbatim(self.counter.last):
                        await self._publish(repeat.envelope)
                    else:
                        env = await self._send(repeat.envelope.body)
                        self.questions.sent(repeat.message_id, env)
                except Exception:  # the room went away
                    return

    def _heard_of(self, user_id: str) -> bool:
        """The agent sent something for the turn of ``user_id``."""
        for e in self.box:
            b = e.body
            if getattr(b, "previous_id", None) == user_id or (
                isinstance(b, ErrorMessage) and b.originating_id == user_id
            ):
                return True
        return False

    async def wait_for(
        self, kind: type[Any], within: float = 30.0, after: int = 0, **match: Any
    ) -> Any:
        """The first ``kind`` body received with ``|stanzaId| > after`` matching ``match``."""
        async with asyncio.timeout(within):
            while True:
                for env in self.box:
                    body = env.body
                    if (
                        -env.stanza_id > after
                        and isinstance(body, kind)
                        and all(getattr(body, k) == v for k, v in match.items())
                    ):
                        return body
                self._event.clear()
                await self._event.wait()

    async def wait_turn_end(self, user_id: str, within: float = 60.0) -> None:
        """Until the turn of ``user_id`` is closed (final sentence, answer or error)."""
        async with asyncio.timeout(within):
            while not self.turn_ended(user_id):
                self._event.clear()
                await self._event.wait()

    def turn_ended(self, user_id: str) -> bool:
        """The turn of ``user_id`` got its final sentence, its AssistantMessage or an error."""
        answers = {
            e.body.id
            for e in self.box
            if isinstance(e.body, AssistantMessage) and e.body.previous_id == user_id
        }
        starts = {
            e.body.id
            for e in self.box
            if type(e.body).__name__ == "StartAnswer" and e.body.previous_id == user_id
        }
        for e in self.box:
            b = e.body
            if isinstance(b, AssistantSentence) and b.previous_id in starts and b.is_final:
                return True
            if (
                isinstance(b, ErrorMessage)
                and b.originating_id == user_id
                and b.id not in self.noise
            ):
                return True
        return bool(answers)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e.body for e in self.box if isinstance(e.body, kind)]

    def steps(self) -> list[ReasoningStep]:
        return self.of(ReasoningStep)


@contextlib.asynccontextmanager
async def following_client(
    server: LiveKitServer, room: str, identity: str, attributes: dict[str, str] | None = None
) -> AsyncIterator[FollowingClient]:
    """A :class:`FollowingClient` joined to ``room`` (its agent not yet awaited);
    ``attributes``: its token's (default: the debugging grant, full reasoning)."""
    r = rtc.Room()
    await r.connect(server.url, server.token(identity, room, attributes=attributes))
    route_room(r)  # many rooms in one process: each gets only its own events
    client = FollowingClient(r, room)
    try:
        yield client
    finally:
        await client.aclose()
        await r.disconnect()


async def logged_for(url: str, room: str, identity: str, level: str) -> list[int]:
    """The logged server stanzas a client of ``identity`` and ``level`` should hold."""
    rows = await fetch(
        url,
        "SELECT stanza, recipients, level FROM alicia_sent_log "
        f"WHERE conversation_id = '{room}' ORDER BY stanza",
    )
    return [
        r["stanza"]
        for r in rows
        if (r["recipients"] is None or identity in r["recipients"])
        and (r["level"] is None or r["level"] == level)
    ]


async def rooms_mid_turn(
    livekit: LiveKitServer,
    llm: RecordedLLM,
    stack: contextlib.AsyncExitStack,
    n: int,
    stream: str,
    *,
    pace: float = 0.1,
) -> list[tuple[str, FollowingClient, str]]:
    """``n`` rooms, each with a client whose question (recorded ``stream``, slowed
    down to ``pace`` seconds a chunk: at 0.1 about 35 s) is being answered: a step in.
    (room, client, user message id) each."""
    spec = llm.spec(stream)
    out = []
    for i in range(n):
        room = new_id("conv")
        client = await stack.enter_async_context(following_client(livekit, room, f"user{i}"))
        out.append((room, client, ""))
    for _, client, _ in out:
        await client.wait_for_agent(30)
        await client.handshake()
    llm.script(*[Play(stream, chunk_delay=pace)] * n)
    asked = []
    for room, client, _ in out:
        asked.append((room, client, await client.ask(spec.user)))
    for _, client, _ in asked:
        await client.wait_for(ReasoningStep, within=30)
    return asked


async def agents_in(livekit: LiveKitServer, room: str) -> set[str]:
    """Identities of the agent participants livekit-server has in ``room``."""
    async with api.LiveKitAPI(livekit.http_url, livekit.api_key, livekit.api_secret) as lk:
        reply = await lk.room.list_participants(api.ListParticipantsRequest(room=room))
    return {p.identity for p in reply.participants if p.kind == api.ParticipantInfo.Kind.AGENT}
