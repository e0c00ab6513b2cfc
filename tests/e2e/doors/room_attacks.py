"""Attackers for a room's doors: real participants of a real room served by the worker.

Each attack is made by identities of its own (so the worker's refusal lines, at most one
per door, sender, reason and minute, are this attack's), holding the door's right unless the attack
is about the right. What a door refused is read back from the worker's log (its
``alicia.gate`` line names the door, the sender and the reason); what a protocol client
was told, from the ErrorMessages it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from livekit import api, rtc
from livekit.protocol.agent_pb import agent_session as pb

from alicia.agent.engine.rights import Right
from alicia.agent.gate.doors import Door, Kind
from alicia.harness import LiveKitServer
from alicia.protocol import (
    MAX_PACKET_BYTES,
    ControlStop,
    ErrorMessage,
    new_id,
)
from tests.e2e.doors.matrix import Attack
from tests.e2e.worker import WorkerProcess
from tests.support.livekit_rooms import ProtocolClient

__all__ = ["RoomSide", "rss_mb", "settled_rss_mb"]

CHUNK = 15 * 1024
"""Bytes per write: one data packet's worth."""
FILLER = 512 * 1024
"""Bytes an attacker goes on writing to a stream its door refused (the worker must not
keep them)."""
PUBLISHED_WITHIN_S = 60.0
"""How long the agent may take to subscribe to a new participant's track, which it does
once it knows the track (a voice worker subscribes to every audio track)."""

_CELL: contextvars.ContextVar[list[rtc.Room]] = contextvars.ContextVar("cell")
"""The rooms one attack joined (each attack runs in a task of its own), left after it."""


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children, in MB (``/proc``)."""
    import psutil

    proc = psutil.Process(pid)
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 1e6


async def settled_rss_mb(pid: int, *, within: float = 5.0) -> float:
    """What ``pid``'s memory settles to once what is in flight is freed: the least of
    samples 0.25 s apart, ending once a second of them stays within 0.3 MB (at most
    ``within`` seconds). A flood's chunks still queued in the SDK's event queue, or
    freed memory glibc has not handed back yet, are not kept memory; a leak does not
    shrink."""
    samples = [rss_mb(pid)]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        samples.append(rss_mb(pid))
        last = samples[-5:]
        if len(last) == 5 and max(last) - min(last) <= 0.3:
            break
    return min(samples)


def token(
    server: LiveKitServer, room: str, identity: str, attributes: dict[str, str], *, own: bool
) -> str:
    """A join token; ``own``: may set its own attributes (``canUpdateOwnMetadata``)."""
    grants = api.VideoGrants(room_join=True, room=room, can_update_own_metadata=own)
    tok = api.AccessToken(server.api_key, server.api_secret).with_identity(identity)
    if attributes:
        tok = tok.with_attributes(attributes)
    return tok.with_grants(grants).to_jwt()


def session_request(kind: str) -> bytes:
    """A session host request of ``kind`` (``ping``, ``run_input``) as sent on the wire."""
    request = pb.SessionRequest(request_id=new_id("req"))
    if kind == "run_input":
        request.run_input.CopyFrom(pb.SessionRequest.RunInput(text="doors-canary: obey me"))
    elif kind == "get_agent_info":
        request.get_agent_info.CopyFrom(pb.SessionRequest.GetAgentInfo())
    else:
        request.ping.CopyFrom(pb.SessionRequest.Ping())
    return pb.AgentSessionMessage(request=request).SerializeToString()


@dataclass
class RoomSide:
    """The attacked room, its agent, and the worker serving it."""

    server: LiveKitServer
    worker: WorkerProcess
    room: str
    agent: str
    alice: ProtocolClient
    """An honest participant with a turn to protect (granted ``full``)."""
    lk: api.LiveKitAPI
    stack: contextlib.AsyncExitStack
    turn_id: str = ""
    """A user message of alice's (the target of other people's ControlStop)."""
    counter: int = 0
    tracks: dict[str, str] = field(default_factory=dict)

    # -- participants -------------------------------------------------------------------

    def name(self, door: Door, attack: Attack) -> str:
        """A fresh identity for one attack on one door."""
        self.counter += 1
        return f"x{self.counter}-{door.name.replace(' ', '')[:8]}-{attack.name.lower()[:8]}"

    async def join(
        self, identity: str, attributes: dict[str, str] | None = None, *, own: bool = False
    ) -> rtc.Room:
        """``identity`` in the room (left when the harness ends, or by :meth:`leave`)."""
        room = rtc.Room()
        await room.connect(  # subscribing to nothing: the agent's subscription is news
            self.server.url,
            token(self.server, self.room, identity, attributes or {}, own=own),
            rtc.RoomOptions(auto_subscribe=False),
        )
        cell = _CELL.get(None)
        if cell is not None:
            cell.append(room)
        else:
            self.stack.push_async_callback(room.disconnect)
        return room

    async def crowd(self, names: list[str]) -> list[rtc.Room]:
        """Many identities at once."""
        return list(await asyncio.gather(*(self.join(n) for n in names)))

    async def known(self, room: rtc.Room) -> None:
        """Until the agent knows this participant (it answers its Configuration): one that
        leaves before livekit-server announced it was never in the agent's room, and its
        streams end at their deadline instead."""
        client = ProtocolClient(room, self.room)
        await client.wait_for_agent()
        await client.handshake()

    async def publish_track(self, room: rtc.Room) -> str:
        """A microphone track with the pre-connect buffer feature; its sid."""
        source = rtc.AudioSource(16_000, 1)
        track = rtc.LocalAudioTrack.create_audio_track("microphone", source)
        options = rtc.TrackPublishOptions(
            source=rtc.TrackSource.SOURCE_MICROPHONE, preconnect_buffer=True
        )
        publication = await room.local_participant.publish_track(track, options)
        # the agent knows the track once it subscribes to it (a fixed 3.5 s was not always
        # enough on a loaded machine: a stream refused as naming a track not the sender's)
        async with asyncio.timeout(PUBLISHED_WITHIN_S):
            await publication.wait_for_subscription()
        return publication.sid

    # -- what the worker said -------------------------------------------------------------

    def refusals(self, door: Door, identity: str) -> list[str]:
        """The reasons the worker logged for refusing ``identity`` at ``door``."""
        found = []
        for line in self.worker.text().splitlines():
            if '"door"' not in line or identity not in line:
                continue
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("door") == door.name and record.get("from") == identity:
                    found.append(str(record.get("message", "")))
        return found

    async def refused(
        self, door: Door, identity: str, reason: str, within: float = 30.0, also: str = ""
    ) -> str:
        """Wait for ``door``'s refusal of ``identity`` with ``reason`` (or ``also``); the
        outcome line."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within
        while True:
            lines = self.refusals(door, identity)
            for said in (reason, *also.split("|")):
                if said and any(said in line for line in lines):
                    return f"refused ({said})"
            if loop.time() > until:
                raise AssertionError(f"no refusal {reason!r} of {identity}; got {lines}")
            await asyncio.sleep(0.1)

    # -- writing to a door ------------------------------------------------------------------

    async def open_stream(
        self, room: rtc.Room, door: Door, attributes: dict[str, str] | None = None
    ) -> Any:
        """A stream to the agent on ``door``'s topic, opened (nothing written yet)."""
        to = [self.agent]
        if door.kind is Kind.TEXT_STREAMS:
            return await room.local_participant.stream_text(
                topic=door.at, destination_identities=to, attributes=attributes
            )
        return await room.local_participant.stream_bytes(
            "doors", topic=door.at, destination_identities=to, attributes=attributes
        )

    async def write(
        self,
        writer: Any,
        door: Door,
        size: int,
        *,
        pace: float = 0.0,
        until: asyncio.Event | None = None,
    ) -> None:
        """``size`` bytes (or characters) of filler, one packet's worth at a time (or until
        ``until`` is set)."""
        left = size
        while left > 0 and not (until is not None and until.is_set()):
            n = min(CHUNK, left)
            data: Any = "a" * n if door.kind is Kind.TEXT_STREAMS else os.urandom(n)
            await writer.write(data)
            left -= n
            if pace:
                await asyncio.sleep(pace)

    # -- the attacks ------------------------------------------------------------------------

    async def attack(self, door: Door, attack: Attack) -> tuple[bool, str]:
        """Make ``attack`` on ``door``; ``(held, outcome)``. Its participants leave after."""
        rooms: list[rtc.Room] = []
        _CELL.set(rooms)
        try:
            return await self._attack(door, attack)
        finally:
            for r in rooms:
                with contextlib.suppress(Exception):
                    await r.disconnect()

    async def _attack(self, door: Door, attack: Attack) -> tuple[bool, str]:
        kind = {
            Kind.PACKETS: self.on_packets,
            Kind.TEXT_STREAMS: self.on_streams,
            Kind.BYTE_STREAMS: self.on_streams,
            Kind.RPC: self.on_rpc,
            Kind.CHANGES: self.on_changes,
        }[door.kind]
        return await kind(door, attack)

    # streams

    def attributes(self, door: Door, track: str, *, sane: bool = True) -> dict[str, str] | None:
        """What a stream of ``door`` names (the pre-connect audio names its track)."""
        if door.right is not Right.PUBLISHER:
            return None
        return {"trackId": track, **({"sampleRate": "16000", "channels": "1"} if sane else {})}

    async def holder(self, door: Door, identity: str) -> tuple[rtc.Room, str]:
        """``identity`` joined, holding ``door``'s right; (its room, its track if any)."""
        room = await self.join(identity)
        track = await self.publish_track(room) if door.right is Right.PUBLISHER else ""
        return room, track

    async def on_streams(self, door: Door, attack: Attack) -> tuple[bool, str]:
        b = door.bounds
        who = self.name(door, attack)
        if door.right is Right.NOBODY:
            room, _ = await self.holder(door, who)
            writer = await room.local_participant.stream_bytes(
                "doors", topic="x.not-a-door", destination_identities=[self.agent]
            )
            await self.write(writer, door, FILLER)
            await writer.aclose()
            return True, f"dropped by the SDK: {FILLER // 1024} KiB on a topic no handler takes"
        if attack in (Attack.NO_GRANT, Attack.SELF_GRANT, Attack.GRANT_CHANGED):
            return await self.stream_rights(door, attack, who)
        room, track = await self.holder(door, who)
        attributes = self.attributes(door, track)
        if attack is Attack.TOO_MANY:
            assert b.open_each is not None
            writers = [
                await self.open_stream(room, door, attributes) for _ in range(b.open_each + 1)
            ]
            for w in writers:
                await self.write(w, door, 16)
            at_once = await self.refused(door, who, "too many open")
            return True, f"{at_once}; {await self.too_fast(door)}"
        if attack is Attack.TOO_BIG:
            assert b.bytes_each is not None
            writer = await self.open_stream(room, door, attributes)
            # cut at its bytes, or at its deadline if they cannot arrive in time (then the
            # rest of its bytes is not written: the filler after shows the same)
            cut = asyncio.Event()
            sending = asyncio.ensure_future(
                self.write(writer, door, b.bytes_each + CHUNK, until=cut)
            )
            try:
                outcome = await self.refused(door, who, "too big", also="too slow")
            finally:
                cut.set()
                await sending
            await self.write(writer, door, FILLER)  # to a reader closed at once
            return True, f"{outcome}, then {FILLER // 1024} KiB more sent"
        if attack is Attack.TOO_SLOW:
            assert b.deadline_s is not None
            writer = await self.open_stream(room, door, attributes)
            steps = math.ceil(b.deadline_s / 0.5) + 4
            for _ in range(steps):
                await writer.write("a" if door.kind is Kind.TEXT_STREAMS else b"a")
                await asyncio.sleep(0.5)
            return True, await self.refused(door, who, "too slow")
        if attack is Attack.NEVER_FINISHED:
            assert b.deadline_s is not None
            writer = await self.open_stream(room, door, attributes)
            await self.write(writer, door, 1024)
            return True, await self.refused(door, who, "too slow", within=b.deadline_s + 30)
        if attack is Attack.MALFORMED:
            return await self.malformed(door, who, room, track)
        if attack is Attack.AFTER_LEAVING:
            await self.known(room)
            writer = await self.open_stream(room, door, attributes)
            await self.write(writer, door, 1024)
            await asyncio.sleep(0.3)  # on its way before the leave
            await room.disconnect()
            # ended when the agent hears of the leave (or the SDK ends the stream as it
            # does: aborted), or at its deadline if that is sooner
            within = (b.deadline_s or 0) + 30
            outcome = await self.refused(door, who, "its sender left", within, "too slow|aborted")
            return True, outcome
        if attack is Attack.MANY_IDENTITIES:
            assert b.open_all is not None and b.open_each is not None
            n = b.open_all // b.open_each + 1
            names = [f"{who}-{i}" for i in range(n)]
            rooms = await self.crowd(names)
            if door.right is Right.PUBLISHER:
                tracks = await asyncio.gather(*(self.publish_track(r) for r in rooms))
            else:
                tracks = [""] * len(rooms)

            async def fill(r: rtc.Room, track: str) -> None:
                w = await self.open_stream(r, door, self.attributes(door, track))
                await self.write(w, door, 16)

            await asyncio.gather(
                *(
                    fill(r, t)
                    for r, t in zip(rooms, tracks, strict=True)
                    for _ in range(b.open_each)
                )
            )
            await asyncio.sleep(0.5)
            said = [x for name in names for x in self.refusals(door, name)]
            held = any("too many open in the room" in line for line in said)
            return held, f"{n} identities x {b.open_each}: {said[:1] or 'no refusal'}"
        raise AssertionError(f"no stream attack for {attack}")

    async def too_fast(self, door: Door) -> str:
        """Whole, harmless messages one after the other, past the door's burst: refused as
        they open once its rate is spent."""
        b = door.bounds
        if b.rate_per_s is None or b.burst is None:
            return "no rate of its own"
        if door.right is Right.PUBLISHER:
            return "its rate is past its one open stream (a stream waits for its publication)"
        who = f"{self.name(door, Attack.TOO_MANY)}-fast"
        room = await self.join(who)
        each = 1 if door.kind is Kind.TEXT_STREAMS else (b.open_each or 1)

        async def one() -> None:
            if door.kind is Kind.TEXT_STREAMS:  # an empty message is no turn
                writer = await self.open_stream(room, door)
                await writer.aclose()
            else:  # a ping, answered to its sender
                await room.local_participant.send_bytes(
                    session_request("ping"), topic=door.at, destination_identities=[self.agent]
                )

        sent = 0  # as fast as this machine allows, until refused (a slow machine sends longer)
        async with asyncio.timeout(60):
            while not any("too fast" in line for line in self.refusals(door, who)):
                await asyncio.gather(*(one() for _ in range(each)))
                sent += each
                await asyncio.sleep(0.01)
        return f"refused (too fast) after {sent} whole messages one after the other"

    async def stream_rights(self, door: Door, attack: Attack, who: str) -> tuple[bool, str]:
        """The attacks on a stream door's right."""
        if door.right is Right.PUBLISHER:  # a stream naming a track not its own
            room = await self.join(who)
            track = "TR_" + new_id("t")[2:14]
            writer = await self.open_stream(room, door, self.attributes(door, track))
            await self.write(writer, door, 4096)
            await writer.aclose()
            return True, await self.refused(door, who, "not the sender's")
        needs = [op for op, r in door.operations.items() if r is Right.OPERATOR]
        operation = "get_agent_info" if "get_agent_info" in needs else needs[0]
        payload = session_request(operation)
        if attack is Attack.GRANT_CHANGED:
            room = await self.join(who, {"alicia.operator": "true"})
            await room.local_participant.send_bytes(
                session_request(operation), topic=door.at, destination_identities=[self.agent]
            )
            await asyncio.sleep(1.0)
            before = self.refusals(door, who)
            await self.lk.room.update_participant(
                api.UpdateParticipantRequest(
                    room=self.room, identity=who, attributes={"alicia.operator": "false"}
                )
            )
            await asyncio.sleep(0.5)
            await room.local_participant.send_bytes(
                payload, topic=door.at, destination_identities=[self.agent]
            )
            outcome = await self.refused(door, who, "operator grant")
            return not before, f"allowed while granted; lowered: {outcome}"
        own = attack is Attack.SELF_GRANT
        room = await self.join(who, own=own)
        if own:
            await room.local_participant.set_attributes(
                {"alicia.operator": "true", "alicia.reasoning": "full"}
            )
            await asyncio.sleep(0.3)
        await room.local_participant.send_bytes(
            payload, topic=door.at, destination_identities=[self.agent]
        )
        return True, f"{operation}: " + await self.refused(door, who, "operator grant")

    async def malformed(self, door: Door, who: str, room: rtc.Room, track: str) -> tuple[bool, str]:
        if door.right is Right.PUBLISHER:
            writer = await self.open_stream(room, door, self.attributes(door, track, sane=False))
            await self.write(writer, door, 4096)
            await writer.aclose()
            return True, await self.refused(door, who, "sampleRate")
        if door.kind is Kind.BYTE_STREAMS:
            await room.local_participant.send_bytes(
                b"\xff\x00 not a protobuf \xff" * 8,
                topic=door.at,
                destination_identities=[self.agent],
            )
            return True, await self.refused(door, who, "malformed")
        return True, "n/a: any text is a message (then under the UserMessage rules)"

    # packets

    async def on_packets(self, door: Door, attack: Attack) -> tuple[bool, str]:
        who = self.name(door, attack)
        own = attack is Attack.SELF_GRANT
        attributes = {"alicia.operator": "true"} if attack is Attack.GRANT_CHANGED else {}
        room = await self.join(who, attributes, own=own)
        client = ProtocolClient(room, self.room)
        await client.wait_for_agent()
        await client.handshake()

        def codes() -> list[int]:
            return [e.code for e in client.of(ErrorMessage)]

        async def told(code: int, within: float = 30.0) -> bool:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    while code not in codes():
                        await asyncio.sleep(0.05)
            return code in codes()

        stop = ControlStop(conversation_id=self.room, target_id=self.turn_id)
        nothing = ControlStop(conversation_id=self.room, target_id=new_id("msg"))
        """A flood that starts no turn: stops of a message nobody sent."""
        if attack in (Attack.NO_GRANT, Attack.SELF_GRANT):
            if own:
                await room.local_participant.set_attributes({"alicia.operator": "true"})
                await asyncio.sleep(0.3)
            await client.send(stop)
            return await told(203), f"ControlStop of alice's turn: {codes()}"
        if attack is Attack.GRANT_CHANGED:
            await client.send(stop)
            await asyncio.sleep(1.0)
            granted = 203 not in codes()
            await self.lk.room.update_participant(
                api.UpdateParticipantRequest(
                    room=self.room, identity=who, attributes={"alicia.operator": "false"}
                )
            )
            await asyncio.sleep(0.5)
            await client.send(stop)
            lowered = await told(203)
            return granted and lowered, f"granted: no 203; lowered: {codes()}"
        if attack is Attack.TOO_MANY:
            assert door.bounds.burst is not None
            # past its burst, twenty at a time, until told (a loaded machine sends 60 one by
            # one no faster than the rate refills: no 504 was due)
            sent, started = 0, asyncio.get_running_loop().time()
            while sent < 20 * door.bounds.burst and 504 not in codes():
                await asyncio.gather(*(client.send(nothing) for _ in range(20)))
                sent += 20
                if sent > door.bounds.burst:
                    await told(504, within=0.2)
            took = asyncio.get_running_loop().time() - started
            held = await told(504)
            return held, f"{sent} sent in {took:.1f} s: 504 in {sorted(set(codes()))}"
        if attack is Attack.TOO_BIG:
            try:
                await client.send_raw(b"\x00" * (MAX_PACKET_BYTES + 1))
            except Exception as exc:  # the SDK may refuse to send it at all
                return True, f"refused by the sender's SDK: {type(exc).__name__}"
            return await told(101), f"{MAX_PACKET_BYTES + 1} bytes: {codes()}"
        if attack is Attack.MALFORMED:
            await client.send_raw(b"\xc1 not msgpack")
            return await told(101), f"garbage: {codes()}"
        if attack is Attack.MANY_IDENTITIES:
            others = [
                ProtocolClient(r, self.room)
                for r in await self.crowd([f"{who}-{i}" for i in range(3)])
            ]
            for c in others:
                await c.wait_for_agent()
                await c.handshake()
            for c in others:  # each past its own burst, twenty at a time, until told
                sent = 0
                while sent < 20 * (door.bounds.burst or 40) and not any(
                    e.code == 504 for e in c.of(ErrorMessage)
                ):
                    await asyncio.gather(*(c.send(nothing) for _ in range(20)))
                    sent += 20
                    if sent > (door.bounds.burst or 40):
                        await asyncio.sleep(0.2)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30):
                    while not all(
                        c.of(ErrorMessage) and 504 in [e.code for e in c.of(ErrorMessage)]
                        for c in others
                    ):
                        await asyncio.sleep(0.1)
            each = [504 in [e.code for e in c.of(ErrorMessage)] for c in others]
            return all(each), f"3 identities, each its own budget: 504 to each: {each}"
        raise AssertionError(f"no packet attack for {attack}")

    # rpc and changes

    async def on_rpc(self, door: Door, attack: Attack) -> tuple[bool, str]:
        room = await self.join(self.name(door, attack))
        payload = "x" * (15_000 if attack is Attack.TOO_BIG else 10)
        try:
            await room.local_participant.perform_rpc(
                destination_identity=self.agent, method="alicia.anything", payload=payload
            )
        except rtc.RpcError as exc:
            return exc.code in (1400, 1402), f"RpcError {exc.code} ({exc.message})"
        return False, "the agent answered an RPC"

    async def on_changes(self, door: Door, attack: Attack) -> tuple[bool, str]:
        seen = await self.grant_scenario()
        n = seen["steps"]  # what alice got in each of the three turns
        if attack is Attack.NO_GRANT:
            held = seen["nog"] == [0] and not seen["canary_to"]
            return held, f"no grant: steps {seen['nog']} of {n}"
        if attack is Attack.SELF_GRANT:
            held = seen["eve"] == [0] and seen["eve_stop"] and not seen["canary_to"]
            return held, (
                f"set itself full and operator, then the backend's UpdateParticipant (a "
                f"permission without canUpdateMetadata): steps {seen['eve']} of {n}, its "
                f"ControlStop of alice's turn: 203"
            )
        if attack is Attack.GRANT_CHANGED:
            held = seen["gina"] == [n[0], 0, n[2]] and min(n) > 0
            return held, f"full, lowered to none, raised to full: steps {seen['gina']} of {n}"
        raise AssertionError(f"no change attack for {attack}")

    _grants: asyncio.Future[dict[str, Any]] | None = None

    async def grant_scenario(self) -> dict[str, Any]:
        """Three of alice's turns with a reasoning canary, watched by: ``nog`` (no grant),
        ``eve`` (may set her own attributes: sets herself ``full`` and operator, then the
        backend changes her permissions without ``canUpdateMetadata``), ``gina`` (granted
        ``full``, lowered to ``none`` after the first turn, raised again after the
        second). Made once; each watcher's ReasoningSteps per turn."""
        if self._grants is None:
            self._grants = asyncio.ensure_future(self._grant_scenario())
        return await asyncio.shield(self._grants)

    async def _grant_scenario(self) -> dict[str, Any]:
        from tests.e2e.doors.grant_scenario import grant_scenario

        return await grant_scenario(self)

    ask: Callable[[], Awaitable[tuple[str, int]]] | None = None
    """Alice asks a question with reasoning; its id and the number of steps of its turn."""
    canary: str = ""
