"""What the engine is told, as values: the front ends read the settings, the engine never.

:class:`EngineOptions` is everything a :class:`~alicia.agent.engine.session.ProtocolSession`
and its turns need to know about the deployment (as livekit-agents' ``AgentSession`` takes
its options as arguments). A front end builds it from its own configuration
(``Settings.engine_options()`` for the worker); tests build it directly. Nothing here reads
the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .participants import ParticipantLimits
from .turn import TurnOptions

__all__ = ["EngineOptions", "ParticipantLimits", "TurnOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """One conversation's options (defaults: the worker's documented defaults)."""

    turn: TurnOptions
    """How turns talk to the model."""
    participants: ParticipantLimits = field(default_factory=ParticipantLimits)
    """Each participant's limits and defaults."""
    replay_keep: int = 200
    """Server envelopes kept in memory for a resuming client."""
    replay_max_bytes: int = 65536
    """Bytes one resume may replay."""
    failover: bool = False
    """Store every envelope before it leaves (a room can be taken over)."""
    zdr: bool = False
    """Zero data retention: no plaintext reasoning at rest."""
    reasoning_keys: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    """Master keys ``(kid, key)``: the first encrypts, every one decrypts."""
    summary_model: str | None = None
    """Model that summarises steps for ``summary`` participants (None: extractive)."""
    summary_timeout_s: float = 3.0
    """Seconds one model summary may take."""
    summary_concurrency: int = 2
    """Model summaries made at once per conversation."""
    timing_meta: bool = False
    """Add ``meta.closedAtNs`` to each ReasoningStep (for the latency benchmark)."""
    tools_enabled: bool = True
    """Offer the server-executed function tools to the model."""
    edit_timeout_s: float = 5.0
    """Seconds to wait for the new UserMessage after an ``edit`` variation."""

    @property
    def model(self) -> str:
        """The model turns ask."""
        return self.turn.model
