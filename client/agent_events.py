"""What happens to the agent a client follows, as events for the user (no I/O).

:class:`~alicia.client.session.ClientSession` reports them to its
:meth:`~alicia.client.session.ClientSession.on_agent` listeners: the trusted agent left
(:class:`AgentLeft`, the session waits for another), another took over
(:class:`AgentReplaced`, the session resumes with it), the resume was answered
(:class:`AgentResumed`) or not (:class:`AgentResumeFailed`), or no agent came back
(:class:`AgentLost`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

__all__ = [
    "AgentEvent",
    "AgentLeft",
    "AgentLost",
    "AgentReplaced",
    "AgentResumeFailed",
    "AgentResumed",
]


@dataclass(frozen=True, slots=True)
class AgentReplaced:
    """Trust moved to a new agent participant; the session is resuming with it."""

    identity: str
    previous: str | None
    """The agent trusted before (``None``: it had left before this one came)."""


@dataclass(frozen=True, slots=True)
class AgentResumed:
    """The new agent answered the resume (§4.9): the conversation continues."""

    identity: str
    previous: str | None
    """The agent trusted before it (the same identity: the agent rejoined)."""
    last_sequence_seen: int
    """The highest server |stanzaId| received before the resume (what it was told)."""
    replayed: bool
    """True when the agent accepted ``last_sequence_seen`` (it replays what was missed);
    False when it could not and the session continued without a replay."""
    reason: str | None = None
    """Why there was no replay (the agent's error), when ``replayed`` is False."""


@dataclass(frozen=True, slots=True)
class AgentResumeFailed:
    """The new agent answered neither the resume nor a plain Configuration."""

    identity: str
    reason: str


@dataclass(frozen=True, slots=True)
class AgentLeft:
    """The trusted agent left; the session waits up to ``wait`` seconds for another."""

    identity: str
    wait: float


@dataclass(frozen=True, slots=True)
class AgentLost:
    """No agent came back within the wait: open turns and new requests fail."""

    identity: str
    waited: float


AgentEvent: TypeAlias = AgentReplaced | AgentResumed | AgentResumeFailed | AgentLeft | AgentLost
