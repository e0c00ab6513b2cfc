"""Grants only from what livekit-server vouches for: :func:`peer_of`.

A participant's attributes are grants (``alicia.reasoning``, ``alicia.operator``) only if
it could never set them itself. LiveKit does not say who set an attribute: a value from
the join token and one the participant set with ``canUpdateOwnMetadata`` look the same,
and a permission lowered later (``UpdateParticipant`` with a permission that lacks
``canUpdateMetadata``, as any mute or moderation call makes) leaves the self-set values
in place. So :class:`RoomGrants` follows each participant's session (its ``sid``) from
the moment the agent is in the room: one that could set its own attributes at any moment
it was seen (or whose permissions the server did not send) has no grant from its
attributes for the rest of that session, whatever its permissions say later. A new
session (a new join, a new sid) starts afresh from its token.

What the agent cannot see it cannot count: a participant whose permission was lowered
before the agent joined the room looks like one whose token never allowed it. Tokens
for people who see reasoning should not carry ``canUpdateOwnMetadata`` at all (the web
page's never do).
"""

from __future__ import annotations

import weakref
from typing import Any, Final

from livekit import rtc

from alicia.agent.engine.transport import Peer

__all__ = ["RoomGrants", "grants_of", "peer_of"]

_KINDS: Final = {
    rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD: "standard",
    rtc.ParticipantKind.PARTICIPANT_KIND_INGRESS: "ingress",
    rtc.ParticipantKind.PARTICIPANT_KIND_EGRESS: "egress",
    rtc.ParticipantKind.PARTICIPANT_KIND_SIP: "sip",
    rtc.ParticipantKind.PARTICIPANT_KIND_AGENT: "agent",
}


def _could_set_own(participant: rtc.RemoteParticipant) -> bool:
    """The server says ``participant`` may set its own attributes now, or says nothing."""
    info: Any = participant._info  # the ParticipantInfo the SDK keeps (HasField is there)
    if not (hasattr(info, "HasField") and info.HasField("permission")):
        return True
    return bool(participant.permissions.can_update_metadata)


class RoomGrants:
    """Which sessions of one room's participants could ever set their own attributes."""

    def __init__(self, room: rtc.Room) -> None:
        """Follow ``room`` (connected or about to be) from now on."""
        self._room = room
        self._self_set: set[str] = set()
        """Participant sids (sessions) whose attributes are never grants."""
        room.on("participant_connected", self.look)
        room.on("participant_permissions_changed", self._permissions)
        room.on("participant_attributes_changed", self._attributes)
        room.on("participant_disconnected", self._left)
        self.look_all()

    def look_all(self) -> None:
        """Note what the server says now of everyone in the room (call it as the room's
        connection returns: the participants already there came with it, no event)."""
        for participant in list(self._room.remote_participants.values()):
            self.look(participant)

    def look(self, participant: rtc.RemoteParticipant) -> None:
        """Note what the server says of ``participant`` now (idempotent)."""
        if participant.sid and _could_set_own(participant):
            self._self_set.add(participant.sid)

    def _permissions(self, participant: rtc.Participant, *_: object) -> None:
        if isinstance(participant, rtc.RemoteParticipant):
            self.look(participant)

    def _attributes(self, _changed: object, participant: rtc.Participant) -> None:
        if isinstance(participant, rtc.RemoteParticipant):
            self.look(participant)

    def _left(self, participant: rtc.RemoteParticipant) -> None:
        self._self_set.discard(participant.sid)

    def self_set(self, participant: rtc.RemoteParticipant) -> bool:
        """``participant`` could set its own attributes at some moment of this session."""
        self.look(participant)
        return participant.sid in self._self_set or not participant.sid

    def close(self) -> None:
        """Stop following the room."""
        self._room.off("participant_connected", self.look)
        self._room.off("participant_permissions_changed", self._permissions)
        self._room.off("participant_attributes_changed", self._attributes)
        self._room.off("participant_disconnected", self._left)


_GRANTS: weakref.WeakKeyDictionary[rtc.Room, RoomGrants] = weakref.WeakKeyDictionary()


def grants_of(room: rtc.Room) -> RoomGrants:
    """``room``'s :class:`RoomGrants`, following it from the first call on: call it
    before the room is joined and :meth:`~RoomGrants.look_all` as it is (the worker does),
    or as soon as possible after (``attach_reasoning`` does)."""
    grants = _GRANTS.get(room)
    if grants is None:
        grants = _GRANTS[room] = RoomGrants(room)
    return grants


def peer_of(room: rtc.Room, participant: rtc.RemoteParticipant) -> Peer:
    """The engine's view of ``participant`` in ``room``, from what livekit-server told
    the room: its kind, its attributes, and whether they may be grants (see the module
    docstring)."""
    return Peer(
        kind=_KINDS.get(participant.kind, "other"),
        attributes=participant.attributes,
        can_update_own_attributes=grants_of(room).self_set(participant),
    )
