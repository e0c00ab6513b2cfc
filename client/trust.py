"""Which participant speaks for the agent, packet by packet, across takeovers.

Trust goes to one *participant*, never to an identity: the room's participant of kind
AGENT (a kind only a token minted with the API secret can carry, and that no participant
can change) that announces the protocol (attribute ``alicia.protocol`` = ``1``: an avatar
or another framework's agent in the room is not ours), with ``agent_name`` only one whose
``lk.agent_name`` attribute (put in its token by livekit-server at dispatch) names it, and
with ``expected_identity`` only that identity. :meth:`AgentTrust.trusts` checks all of it
again for every packet, plus the participant's ``sid``: a standard participant that joins
under the agent's identity (livekit-server then removes the real agent as a duplicate) is
a new participant of the wrong kind and never gains trust.

Takeovers: trust stays with the trusted agent while it is in the room (an agent that
joins meanwhile is another agent, or a late second dispatch that the workers' leases
make leave again). When it leaves (its worker died: the watcher removes it, or
livekit-server times it out), a matching agent already in the room takes over, one
dispatched under the same ``lk.agent_name`` first; else the first one to join.

The session reports changes to the user as :data:`~alicia.client.agent_events.AgentEvent`
values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from livekit import rtc

from alicia.protocol import PROTOCOL_ATTRIBUTE

__all__ = ["AGENT_NAME_ATTRIBUTE", "AgentTrust"]

AGENT_NAME_ATTRIBUTE: Final = "lk.agent_name"
"""Attribute livekit-server puts in an explicitly dispatched agent's token: its agent name."""


class AgentTrust:
    """The participant trusted as the agent (see the module docstring)."""

    def __init__(self, *, agent_name: str | None, expected_identity: str | None) -> None:
        """``agent_name`` / ``expected_identity``: only an agent with that name / identity."""
        self.agent_name = agent_name
        self.expected_identity = expected_identity
        self.identity: str | None = None
        """The trusted agent's identity (``None``: no agent trusted now)."""
        self.sid: str | None = None
        self.dispatch_name: str | None = None
        """The trusted agent's ``lk.agent_name`` when it was trusted ("" when none)."""

    def matches(self, p: rtc.RemoteParticipant) -> bool:
        """``p`` may speak for the agent: kind AGENT announcing the protocol, and the name /
        identity if set."""
        if p.kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
            return False
        if p.attributes.get(PROTOCOL_ATTRIBUTE) != "1":
            return False
        if self.expected_identity is not None and p.identity != self.expected_identity:
            return False
        name = self.agent_name
        return name is None or p.attributes.get(AGENT_NAME_ATTRIBUTE) == name

    def trusts(self, p: rtc.RemoteParticipant | None) -> bool:
        """``p`` is the trusted agent participant and still matches (for every packet)."""
        return (
            p is not None
            and self.identity is not None
            and p.identity == self.identity
            and p.sid == self.sid
            and self.matches(p)
        )

    def current(self, present: Mapping[str, rtc.RemoteParticipant]) -> rtc.RemoteParticipant | None:
        """The trusted agent if it is still in the room (``present``) and still matches."""
        p = present.get(self.identity) if self.identity is not None else None
        return p if p is not None and self.trusts(p) else None

    def offer(self, p: rtc.RemoteParticipant, present: Mapping[str, rtc.RemoteParticipant]) -> bool:
        """A participant joined (or was found): True if trust now moves to it."""
        if not self.matches(p) or self.current(present) is not None:
            return False  # not an agent of ours, or ours is still here
        self._adopt(p)
        return True

    def leave(self, present: Mapping[str, rtc.RemoteParticipant]) -> bool:
        """Forget the trusted agent if it is no longer in the room as itself (it left, or
        its identity now belongs to another participant); True if it was trusted until now."""
        if self.identity is None or self.current(present) is not None:
            return False
        self.identity = self.sid = None
        return True

    def successor(
        self, present: Mapping[str, rtc.RemoteParticipant]
    ) -> rtc.RemoteParticipant | None:
        """A matching agent already in the room (one dispatched under the same name first)."""
        candidates = [p for p in present.values() if self.matches(p)]
        same = [
            p
            for p in candidates
            if p.attributes.get(AGENT_NAME_ATTRIBUTE, "") == self.dispatch_name
        ]
        found = same or candidates
        if not found:
            return None
        self._adopt(found[-1])
        return found[-1]

    def _adopt(self, p: rtc.RemoteParticipant) -> None:
        self.identity = p.identity
        self.sid = p.sid
        self.dispatch_name = p.attributes.get(AGENT_NAME_ATTRIBUTE, "")
