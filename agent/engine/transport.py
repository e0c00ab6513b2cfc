"""The transport port: how a conversation reaches the participants it talks to.

:class:`Transport` is the interface :class:`~alicia.agent.engine.conversation.Conversation`
sees: ``send`` bytes to some participants, iterate incoming packets (and departures),
``aclose``. One envelope is one packet; the transport neither encodes nor decodes.
Front ends implement it: ``alicia.agent.gate.transport.RoomTransport`` on a LiveKit room;
``tests/support/fakes.py`` has an in-memory one.

Exception tree::

    Exception
    └── TransportError   a send failed (LiveKit's error is the cause, or its text)

Using a closed transport, or opening one twice, raises ``RuntimeError``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from alicia.protocol import ProtocolError

__all__ = [
    "UNKNOWN_PEER",
    "Incoming",
    "Left",
    "Packet",
    "Peer",
    "Transport",
    "TransportError",
    "Typed",
]


class TransportError(Exception):
    """Sending failed; the front end's own error is chained as ``__cause__``."""


@dataclass(frozen=True, slots=True)
class Peer:
    """What the front end vouches for about a sender (from its verified join token)."""

    kind: str = "standard"
    """Participant kind: ``standard``, ``agent``, ``sip``, ``ingress``, ``egress``, …"""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Attributes as the server knows them (set by the token, or by the participant
    itself when ``can_update_own_attributes``)."""
    can_update_own_attributes: bool = False
    """The participant may change its own attributes (LiveKit ``canUpdateOwnMetadata``):
    then no attribute of it is a grant."""

    def grant(self, name: str) -> str | None:
        """Attribute ``name`` as a grant: ``None`` if absent or self-assignable."""
        if self.can_update_own_attributes:
            return None
        return self.attributes.get(name)


UNKNOWN_PEER = Peer()
"""A sender the front end knows nothing more about: no grants."""


@dataclass(frozen=True, slots=True)
class Packet:
    """One data packet received from ``sender`` (a participant identity)."""

    sender: str
    data: bytes
    peer: Peer = UNKNOWN_PEER
    """The sender as the front end knows it (kind, attributes, permissions)."""
    received_at: float = field(default_factory=time.monotonic, compare=False)
    """``time.monotonic()`` when the front end received it: the packet rate limit counts
    packets as they arrived, however late a busy conversation reads them."""


@dataclass(frozen=True, slots=True)
class Left:
    """``identity`` left the room: forget its state."""

    identity: str


@dataclass(frozen=True, slots=True)
class Typed:
    """``sender`` typed ``text`` outside the protocol (the front end's own chat input, e.g.
    LiveKit's ``lk.chat``): a user turn, under the same rules as a UserMessage."""

    sender: str
    text: str
    peer: Peer = UNKNOWN_PEER
    refused: ProtocolError | None = None
    """The front end refused the input (too many open, too slow, too fast): ``text`` is
    empty and the sender gets this error."""


@dataclass(frozen=True, slots=True)
class Regranted:
    """The front end vouches anew for ``identity`` (its attributes or permissions changed,
    e.g. a grant lowered by the server API): what it may see follows ``peer`` from now on."""

    identity: str
    peer: Peer


Incoming = Packet | Left | Typed | Regranted


class Transport(Protocol):
    """Packets to and from the participants of one room."""

    async def send(self, data: bytes, *, to: Sequence[str] | None = None) -> None:
        """Send one packet reliably to the identities in ``to`` (``None``: everyone).

        Raises :class:`TransportError` if it could not be sent.
        """
        ...

    def __aiter__(self) -> AsyncIterator[Incoming]:
        """Incoming packets, typed input and departures, in arrival order; ends when the
        room closes."""
        ...

    async def aclose(self) -> None:
        """Stop receiving; iteration ends."""
        ...
