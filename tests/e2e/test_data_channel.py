"""Two participants exchange every protocol type over a real livekit-server room."""

from __future__ import annotations

import asyncio

import pytest

from alicia.harness import LiveKitServer
from alicia.protocol import DATA_TOPIC, MessageType, StanzaCounter, decode, encode, envelope
from tests.support.livekit_rooms import Inbox, joined, wait_for_participant
from tests.support.samples import CONV, every_type

pytestmark = pytest.mark.integration


async def test_every_type_crosses_a_real_room_in_order(livekit_server: LiveKitServer) -> None:
    room = "e2e-every-type"
    async with (
        joined(livekit_server, room, "agent") as sender,
        joined(livekit_server, room, "alice") as alice,
        joined(livekit_server, room, "bob") as bob,
    ):
        alice_inbox = Inbox(alice)
        bob_inbox = Inbox(bob)
        for r in (alice, bob):
            await wait_for_participant(r, "agent")
        await wait_for_participant(sender, "alice")
        await wait_for_participant(sender, "bob")

        counter = StanzaCounter("server")
        sent = [envelope(b, stanza_id=counter.next(), conversation_id=CONV) for b in every_type()]
        # Everything to alice only, on our topic; then one broadcast on another topic.
        for env in sent:
            await sender.local_participant.publish_data(
                encode(env), reliable=True, destination_identities=["alice"], topic=DATA_TOPIC
            )
        await sender.local_participant.publish_data(b"not ours", reliable=True, topic="other")

        packets = await alice_inbox.wait_for(len(sent) + 1)
        ours = [p for p in packets if p.topic == DATA_TOPIC]
        assert [p.participant.identity for p in ours if p.participant] == ["agent"] * len(sent)
        decoded = [decode(p.data) for p in ours]
        assert decoded == sent
        assert [d.type for d in decoded] == [int(t) for t in MessageType]
        assert [d.stanza_id for d in decoded] == list(range(-1, -17, -1))

        # bob was not a destination: he gets only the broadcast on the other topic.
        other = await bob_inbox.wait_for(1)
        await asyncio.sleep(0.3)
        assert [(p.topic, p.data) for p in bob_inbox.packets] == [("other", b"not ours")]
        assert other[0].participant is not None and other[0].participant.identity == "agent"
