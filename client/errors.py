"""The client session's errors, and the features it announces.

Exceptions::

    ClientError
    ├── ConnectError       cannot join the room (bad URL, server down, bad token)
    ├── AgentMissingError  no agent participant joined the room in time (or came back)
    ├── HandshakeError     no Configuration reply, or the server refused it
    └── TurnTimeoutError   a turn was not answered in time
"""

from __future__ import annotations

from alicia.protocol import Feature

__all__ = [
    "AgentMissingError",
    "ClientError",
    "ConnectError",
    "HandshakeError",
    "TurnTimeoutError",
    "features_for",
]


class ClientError(Exception):
    """Base of the client session's errors."""


class ConnectError(ClientError):
    """Joining the LiveKit room failed."""


class AgentMissingError(ClientError):
    """No agent participant joined the room in time."""


class HandshakeError(ClientError):
    """The Configuration handshake or update got no reply, or an error."""


class TurnTimeoutError(ClientError):
    """A turn did not finish in time."""


def features_for(show_reasoning: bool) -> list[str]:
    """The Configuration ``features`` this client announces (§4.8)."""
    features = [str(Feature.STREAMING)]
    if show_reasoning:
        features.append(str(Feature.REASONING_STEP_DISPLAY))
    return features
