"""The engine's one rule for who may use a way in: :class:`Right` and :func:`admits`.

Every door the front ends open (a data topic, a stream topic, an HTTP route) names the
right it needs in the table of doors (``alicia.agent.gate.doors``); rights that depend on
who the sender is are decided here, from what the front end vouches for (:class:`Peer`),
and nowhere else. A right held by an attribute counts only if its participant could never
set its own attributes in this session (:meth:`Peer.grant`).
"""

from __future__ import annotations

import enum
from typing import Final

from .participants import OPERATOR_GRANT, is_operator
from .transport import Peer

__all__ = ["Right", "admits"]


class Right(enum.Enum):
    """What a door asks of whoever comes through it."""

    ANYONE = "anyone in the room"
    """Any participant of the room (its join token, verified by livekit-server)."""
    OPERATOR = f"{OPERATOR_GRANT}=true"
    """The operator grant, from an attribute the server vouches for."""
    PUBLISHER = "the publisher of the track it names"
    """Only the participant that published the track the request names."""
    SERVER = "livekit-server only"
    """Changes the server makes (its API, with the API secret); a participant's own change
    to its attributes is never a grant."""
    NOBODY = "nobody (not served)"
    """Not served: whatever comes is refused (or left to the SDK, which drops it)."""
    ROOM_TOKEN = "a LiveKit token for the room"
    """HTTP: ``Authorization: Bearer`` a join token signed with the API secret, for the
    room (or thread) named; its ``alicia.reasoning`` attribute is the caller's level."""
    SIGNED = "livekit-server's webhook signature"
    """HTTP: a body signed by livekit-server with the API secret."""
    DEV_TOKENS = "anyone who reaches the page, with ALICIA_WEB_TOKENS=dev only"
    """HTTP: a development convenience, off by default."""
    LOCAL = "whoever reaches the listen address (loopback by default)"
    """HTTP: read-only, no conversation content; reachable where the operator listens."""

    @property
    def of_participants(self) -> bool:
        """Decided from the sender as a room participant (:func:`admits`)."""
        return self in _PEER_RIGHTS


_PEER_RIGHTS: Final = frozenset(
    {Right.ANYONE, Right.OPERATOR, Right.PUBLISHER, Right.SERVER, Right.NOBODY}
)


def admits(right: Right, peer: Peer, *, publisher: bool = False) -> bool:
    """Whether ``peer`` may use a door that needs ``right``. ``publisher``: the sender
    published what its request names (for :attr:`Right.PUBLISHER`). Rights that are not
    about room participants (HTTP) raise ``ValueError``: their routes check them."""
    if right is Right.ANYONE:
        return True
    if right is Right.OPERATOR:
        return is_operator(peer)
    if right is Right.PUBLISHER:
        return publisher
    if right in (Right.SERVER, Right.NOBODY):
        return False
    raise ValueError(f"{right.name} is checked by its route, not from a participant")
