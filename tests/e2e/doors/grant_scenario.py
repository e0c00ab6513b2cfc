"""The grants door's scenario: three of alice's turns watched by three participants.

``nog`` holds no grant; ``eve`` may set her own attributes (she sets herself ``full`` and
operator, then the backend changes her permissions without ``canUpdateMetadata``);
``gina`` is granted ``full``, lowered to ``none`` after the first turn and raised again
after the second. What each received of each turn is returned (see
:meth:`~tests.e2e.doors.room_attacks.RoomSide.grant_scenario`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from livekit import api

from alicia.protocol import ControlStop, ErrorMessage, ReasoningStep
from tests.support.livekit_rooms import ProtocolClient

if TYPE_CHECKING:
    from tests.e2e.doors.room_attacks import RoomSide

__all__ = ["grant_scenario"]


async def grant_scenario(self: RoomSide) -> dict[str, Any]:
    """Alice's three turns and what each watcher received of each (see the module)."""
    assert self.ask is not None
    nog = ProtocolClient(await self.join("grants-nog"), self.room)
    eve = ProtocolClient(await self.join("grants-eve", own=True), self.room)
    gina = ProtocolClient(await self.join("grants-gina", {"alicia.reasoning": "full"}), self.room)
    for c in (nog, eve, gina):
        await c.wait_for_agent()
        await c.handshake()
    await eve.room.local_participant.set_attributes(
        {"alicia.reasoning": "full", "alicia.operator": "true"}
    )
    permission = api.ParticipantPermission(
        can_subscribe=True, can_publish=True, can_publish_data=True
    )
    await self.lk.room.update_participant(
        api.UpdateParticipantRequest(room=self.room, identity="grants-eve", permission=permission)
    )
    await asyncio.sleep(1.0)
    counts: dict[str, list[int]] = {"nog": [], "eve": [], "gina": [], "alice": []}
    levels = ["none", "full"]
    for turn in range(3):
        asked, steps = await self.ask()
        counts["alice"].append(steps)
        await asyncio.sleep(0.5)
        for k, c in (("nog", nog), ("eve", eve), ("gina", gina)):  # this turn's, by its id
            counts[k].append(len([s for s in c.of(ReasoningStep) if s.previous_id == asked]))
        if turn < 2:
            await self.lk.room.update_participant(
                api.UpdateParticipantRequest(
                    room=self.room,
                    identity="grants-gina",
                    attributes={"alicia.reasoning": levels[turn]},
                )
            )
            await asyncio.sleep(0.5)
    await eve.send(ControlStop(conversation_id=self.room, target_id=self.turn_id))
    with contextlib.suppress(TimeoutError):
        await eve.wait_for(ErrorMessage, within=30.0, code=203)
    canary = self.canary
    plaintext = [
        k for k, c in (("nog", nog), ("eve", eve)) if any(canary in repr(e.body) for e in c.box)
    ]
    alice = counts["alice"]
    return {
        "steps": alice,
        "nog": sorted(set(counts["nog"])),
        "eve": sorted(set(counts["eve"])),
        "canary_to": plaintext,
        "gina": counts["gina"],
        "eve_stop": 203 in [e.code for e in eve.of(ErrorMessage)],
    }
