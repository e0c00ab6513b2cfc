"""RoomTransport over a real livekit-server room, and the MemoryTransport fake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from livekit import api, rtc

from alicia.agent.engine.transport import Incoming, Left, Packet, Peer, Regranted, TransportError
from alicia.agent.gate import transport
from alicia.agent.gate.ffi_routing import set_attributes
from alicia.agent.gate.transport import RoomTransport, announce
from alicia.harness import LiveKitServer
from alicia.protocol import DATA_TOPIC, new_id
from tests.support.fakes import MemoryTransport, Sent
from tests.support.livekit_rooms import Inbox, joined, wait_for_participant

pytestmark = pytest.mark.integration

GRANTED = Peer(attributes={"alicia.reasoning": "full"})
"""What the server says of a participant joined with the harness's debugging token."""


async def next_item(items: AsyncIterator[Incoming], within: float = 10.0) -> Incoming:
    async with asyncio.timeout(within):
        return await anext(items)


async def test_packets_flow_both_ways_and_departures_are_reported(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    async with (
        joined(livekit_server, room, "agent") as agent_room,
        joined(livekit_server, room, "alice") as alice,
        joined(livekit_server, room, "bob") as bob,
    ):
        for who in ("alice", "bob"):
            await wait_for_participant(agent_room, who)
        await wait_for_participant(alice, "agent")
        await wait_for_participant(bob, "agent")
        alice_inbox, bob_inbox = Inbox(alice, DATA_TOPIC), Inbox(bob, DATA_TOPIC)
        async with RoomTransport(agent_room) as transport:
            items = aiter(transport)
            # Incoming: only our topic, with the sender's identity, in order.
            await alice.local_participant.publish_data(b"other", reliable=True, topic="x")
            for i in range(3):
                await alice.local_participant.publish_data(
                    f"a{i}".encode(),
                    reliable=True,
                    destination_identities=["agent"],
                    topic=DATA_TOPIC,
                )
            got = [await next_item(items) for _ in range(3)]
            assert [(p.sender, p.data) for p in got if isinstance(p, Packet)] == [
                ("alice", b"a0"),
                ("alice", b"a1"),
                ("alice", b"a2"),
            ]
            # Outgoing: to one identity, then to several.
            await transport.send(b"only-bob", to=["bob"])
            await transport.send(b"both", to=["alice", "bob"])
            b = await bob_inbox.wait_for(2)
            a = await alice_inbox.wait_for(1)
            assert [p.data for p in b] == [b"only-bob", b"both"]
            assert [p.data for p in a] == [b"both"]
            assert all(p.topic == DATA_TOPIC for p in a + b)
            await bob.disconnect()
            assert await next_item(items) == Left("bob")
        # Closed: iteration ends, sending is a usage error, reopening too.
        assert [item async for item in transport] == []
        with pytest.raises(RuntimeError):
            await transport.send(b"late")
        with pytest.raises(RuntimeError):
            transport.start()


async def test_iteration_ends_when_the_room_closes_and_sends_then_fail(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    async with joined(livekit_server, room, "agent") as agent_room:
        transport = RoomTransport(agent_room).start()
        items = aiter(transport)
        async with api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk:
            await lk.room.delete_room(api.DeleteRoomRequest(room=room))
        async with asyncio.timeout(10):
            assert [item async for item in items] == []
        with pytest.raises(TransportError) as info:
            await transport.send(b"x", to=["nobody"])
        assert "publish_data failed" in str(info.value)
        await transport.aclose()


async def test_a_full_incoming_queue_drops_and_counts(livekit_server: LiveKitServer) -> None:
    room = new_id("conv")
    async with (
        joined(livekit_server, room, "agent") as agent_room,
        joined(livekit_server, room, "alice") as alice,
    ):
        await wait_for_participant(agent_room, "alice")
        async with RoomTransport(agent_room, max_pending=2) as transport:
            for i in range(5):
                await alice.local_participant.publish_data(
                    bytes([i]), reliable=True, topic=DATA_TOPIC
                )
            async with asyncio.timeout(10):
                while transport.dropped < 3:
                    await asyncio.sleep(0.01)
            items = aiter(transport)
            assert [await next_item(items), await next_item(items)] == [
                Packet("alice", b"\x00", GRANTED),
                Packet("alice", b"\x01", GRANTED),
            ]


async def test_memory_transport_records_sends_and_replays_deliveries() -> None:
    seen: list[Sent] = []
    transport = MemoryTransport(handler=seen.append)
    transport.deliver("alice", b"hello")
    transport.leave("alice")
    await transport.send(b"x", to=["alice"])
    await transport.send(b"y")
    assert seen == transport.sent == [Sent(b"x", ("alice",)), Sent(b"y", None)]
    assert seen[0].reaches("alice") and not seen[0].reaches("bob") and seen[1].reaches("bob")
    transport.fail_sends = True
    with pytest.raises(TransportError):
        await transport.send(b"z")
    await transport.aclose()
    assert [i async for i in transport] == [Packet("alice", b"hello"), Left("alice")]
    with pytest.raises(RuntimeError):
        await transport.send(b"after close")


async def test_routed_rooms_in_one_process_still_get_their_own_packets(
    livekit_server: LiveKitServer,
) -> None:
    from livekit.rtc._ffi_client import FfiClient

    from alicia.agent.gate.ffi_routing import FfiRouter

    one, two = new_id("conv"), new_id("conv")
    async with (
        joined(livekit_server, one, "agent") as agent_one,
        joined(livekit_server, two, "agent") as agent_two,
        joined(livekit_server, one, "alice") as alice,
        joined(livekit_server, two, "bob") as bob,
    ):
        await wait_for_participant(agent_one, "alice")
        await wait_for_participant(agent_two, "bob")
        async with RoomTransport(agent_one) as t1, RoomTransport(agent_two) as t2:
            # Both rooms left the SDK's fan-out for the router (SDK internals it relies on).
            router = FfiRouter.get()
            assert router is not None
            assert router.routed(agent_one) and router.routed(agent_two)
            fanout = FfiClient.instance.queue._subscribers
            assert not any(q is agent_one._ffi_queue for q, _, _ in fanout)
            # Traffic still flows both ways in both rooms.
            await alice.local_participant.publish_data(
                b"to-one", reliable=True, destination_identities=["agent"], topic=DATA_TOPIC
            )
            await bob.local_participant.publish_data(
                b"to-two", reliable=True, destination_identities=["agent"], topic=DATA_TOPIC
            )
            assert await next_item(aiter(t1)) == Packet("alice", b"to-one", GRANTED)
            assert await next_item(aiter(t2)) == Packet("bob", b"to-two", GRANTED)
            bob_inbox = Inbox(bob, DATA_TOPIC)
            for i in range(20):
                await t2.send(bytes([i]), to=["bob"])
            got = await bob_inbox.wait_for(20)
            assert [p.data for p in got] == [bytes([i]) for i in range(20)]
    # Disconnected rooms leave the router (its unsubscribe path).
    assert not router.routed(agent_one) and not router.routed(agent_two)


def _token(server: LiveKitServer, room: str, identity: str, *, self_update: bool) -> str:
    grants = api.VideoGrants(room_join=True, room=room, can_update_own_metadata=self_update)
    return (
        api.AccessToken(server.api_key, server.api_secret)
        .with_identity(identity)
        .with_grants(grants)
        .with_attributes({"alicia.operator": "true"})
        .to_jwt()
    )


async def test_packets_carry_what_the_server_says_of_their_sender(
    livekit_server: LiveKitServer,
) -> None:
    """Kind, token attributes and canUpdateOwnMetadata reach the engine; a participant
    that may set its own attributes (and does) gets no grant from them."""
    room = new_id("conv")
    granted = _token(livekit_server, room, "granted", self_update=False)
    selfish = _token(livekit_server, room, "selfish", self_update=True)
    async with (
        joined(livekit_server, room, "agent") as agent_room,
        joined(livekit_server, room, "granted", granted) as a,
        joined(livekit_server, room, "selfish", selfish) as b,
    ):
        await b.local_participant.set_attributes({"alicia.operator": "true", "x": "1"})
        for who in ("granted", "selfish"):
            await wait_for_participant(agent_room, who)
        async with RoomTransport(agent_room) as transport:
            items = aiter(transport)
            for sender in (a, b):
                await sender.local_participant.publish_data(
                    b"hi", reliable=True, destination_identities=["agent"], topic=DATA_TOPIC
                )
            got = [await next_item(items) for _ in range(2)]
    peers = {p.sender: p.peer for p in got if isinstance(p, Packet)}
    assert peers["granted"] == Peer("standard", {"alicia.operator": "true"}, False)
    assert peers["granted"].grant("alicia.operator") == "true"
    assert peers["selfish"].can_update_own_attributes is True
    assert peers["selfish"].grant("alicia.operator") is None


async def test_a_grant_changed_by_the_server_is_handed_on_and_a_self_made_change_is_not(
    livekit_server: LiveKitServer,
) -> None:
    """The server API lowers a participant's grant: the engine gets ``Regranted`` with the
    new attributes. A participant that may set its own attributes sets them 50 times:
    nothing is queued (they are never grants), before or after."""
    room = new_id("conv")
    granted = _token(livekit_server, room, "granted", self_update=False)
    selfish = _token(livekit_server, room, "selfish", self_update=True)
    async with (
        joined(livekit_server, room, "agent") as agent_room,
        joined(livekit_server, room, "granted", granted),
        joined(livekit_server, room, "selfish", selfish) as b,
        api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk,
    ):
        for who in ("granted", "selfish"):
            await wait_for_participant(agent_room, who)
        async with RoomTransport(agent_room) as transport:
            items = aiter(transport)
            for i in range(50):
                await b.local_participant.set_attributes({"alicia.reasoning": f"full{i}"})
            await lk.room.update_participant(
                api.UpdateParticipantRequest(
                    room=room, identity="granted", attributes={"alicia.reasoning": "none"}
                )
            )
            item = await next_item(items)
            await asyncio.sleep(0.5)  # anything else would have come by now
            left = transport._queue.qsize()
    assert isinstance(item, Regranted) and item.identity == "granted", item
    assert item.peer.grant("alicia.reasoning") == "none"
    assert left == 0


async def test_an_announcement_that_fails_is_tried_again_until_the_room_sees_it(
    livekit_server: LiveKitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal link can time a request out (as while it is rebuilt: fD's agent logged
    ``signal failure: request timeout``). An agent left unannounced is trusted by no
    client without an agent name, so the announcement is tried again: here its first two
    tries fail as that one did, and the room still sees ``alicia.protocol``."""
    room = new_id("conv")
    grants = api.VideoGrants(room_join=True, room=room, agent=True, can_update_own_metadata=True)
    token = (  # as livekit-server mints an agent's at dispatch: it may set its attributes
        api.AccessToken(livekit_server.api_key, livekit_server.api_secret)
        .with_identity("agent")
        .with_kind("agent")
        .with_grants(grants)
        .to_jwt()
    )
    async with (
        joined(livekit_server, room, "agent", token) as agent_room,
        joined(livekit_server, room, "alice") as alice,
    ):
        await wait_for_participant(alice, "agent")
        tries: list[dict[str, str]] = []

        async def flaky(room: rtc.Room, attributes: dict[str, str]) -> None:
            tries.append(attributes)
            if len(tries) <= 2:
                raise RuntimeError("attributes not set: engine: signal failure: request timeout")
            await set_attributes(room, attributes)

        monkeypatch.setattr(transport, "set_attributes", flaky)
        await announce(agent_room, {"lk.agent.state": "listening"})
        async with asyncio.timeout(10):
            while alice.remote_participants["agent"].attributes.get("alicia.protocol") != "1":
                await asyncio.sleep(0.05)
    assert len(tries) == 3
    assert alice.remote_participants["agent"].attributes["lk.agent.state"] == "listening"
