"""Debug clients for the Alicia protocol: a reusable session, turn assembly and a CLI.

``ClientSession`` joins a LiveKit room, performs the Configuration handshake, sends
user messages and folds the agent's envelopes into :class:`Turn` objects. The
``alicia-client`` console script (:mod:`alicia.client.cli`) renders them live with rich.
The session trusts only the agent participant and follows it across takeovers
(:mod:`alicia.client.trust`), reporting each change as an :data:`AgentEvent`.
"""

from .agent_events import (
    AgentEvent,
    AgentLeft,
    AgentLost,
    AgentReplaced,
    AgentResumed,
    AgentResumeFailed,
)
from .assembly import (
    AnswerDone,
    AnswerStarted,
    ConfigurationReceived,
    ErrorReceived,
    Event,
    OtherReceived,
    SentenceReceived,
    StepReceived,
    ToolRequested,
    ToolResulted,
    Turn,
    TurnAssembler,
)
from .session import (
    CLIENT_VERSION,
    AgentMissingError,
    ClientError,
    ClientSession,
    ConnectError,
    HandshakeError,
    TurnTimeoutError,
    features_for,
)
from .tokens import mint_token, valid_name

__all__ = [
    "CLIENT_VERSION",
    "AgentEvent",
    "AgentLeft",
    "AgentLost",
    "AgentMissingError",
    "AgentReplaced",
    "AgentResumeFailed",
    "AgentResumed",
    "AnswerDone",
    "AnswerStarted",
    "ClientError",
    "ClientSession",
    "ConfigurationReceived",
    "ConnectError",
    "ErrorReceived",
    "Event",
    "HandshakeError",
    "OtherReceived",
    "SentenceReceived",
    "StepReceived",
    "ToolRequested",
    "ToolResulted",
    "Turn",
    "TurnAssembler",
    "TurnTimeoutError",
    "features_for",
    "mint_token",
    "valid_name",
]
