"""Per-participant protocol state: features, stanza order, rate limits, pending work.

Each client in a room gets one :class:`Participant`. It remembers what the client asked
for in its Configuration (reasoning steps shown? streamed answers?), checks that its
stanzaIds rise, limits how fast it may send (and how many ErrorMessages it gets back),
and holds a bounded queue of work (turns, variations) that one task runs in order.

Errors the worker reports to a client, on top of ``alicia.protocol.errors``::

    ProtocolError
    ├── DecodeError
    │   └── PacketTooLarge       incoming packet over one packet's size (101)
    ├── WrongConversation        envelope/Configuration names another conversation (201)
    ├── InvalidState             e.g. a variation of an unknown message (202)
    ├── NotPermitted             not the sender's message or turn, or a server-only type (203)
    ├── DuplicateId              an incoming id the conversation already has (204)
    ├── Overloaded               queue full or flood (504, warning, recoverable)
    ├── LLMUnavailable           the LLM endpoint failed (503)
    ├── TurnCut                  the agent was replaced mid-turn: regenerate (503)
    └── InternalError            something unexpected failed inside the worker (501)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from alicia.protocol import (
    Acknowledgement,
    AudioChunk,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    DecodeError,
    ErrorCode,
    ErrorMessage,
    Feature,
    ProtocolError,
    Severity,
    StanzaOrder,
    UnknownBody,
    UserMessage,
)

from .transport import UNKNOWN_PEER, Peer

__all__ = [
    "FROM_CLIENTS",
    "OPERATOR_GRANT",
    "REASONING_FEATURES",
    "REASONING_GRANT",
    "STREAMING_FEATURES",
    "VISIBILITY_LEVELS",
    "DuplicateId",
    "InternalError",
    "InvalidState",
    "LLMUnavailable",
    "NotPermitted",
    "Overloaded",
    "PacketTooLarge",
    "Participant",
    "ParticipantLimits",
    "TokenBucket",
    "TurnCut",
    "TurnRequest",
    "Visibility",
    "WrongConversation",
    "is_operator",
    "visibility_of",
]

FROM_CLIENTS: Final = (
    Configuration, UserMessage, ControlStop, ControlVariation, Commentary, Acknowledgement,
    AudioChunk, ErrorMessage, UnknownBody,
)  # fmt: skip
"""Body types a client may send (PROTOCOL.md §3): the rest is refused, counted, never stored
(ToolUseResult too: no tool is delegated to clients); a client's ErrorMessage is logged."""

REASONING_GRANT: Final = "alicia.reasoning"
"""Participant attribute (in the join token) naming the reasoning a participant may see:
``full``, ``summary``, ``encrypted`` or ``none``. Honoured only from participants that
cannot update their own attributes; without it, the deployment default applies."""
Visibility = Literal["full", "summary", "encrypted", "none"]
"""How much reasoning a participant may see (most to least)."""
VISIBILITY_LEVELS: Final[tuple[Visibility, ...]] = ("full", "summary", "encrypted", "none")

OPERATOR_GRANT: Final = "alicia.operator"
"""Participant attribute (in the join token) that lets a participant stop, edit and
regenerate anyone's turns: value ``true``. Honoured only from participants that cannot
update their own attributes."""
_TRUE: Final = frozenset({"true", "1", "yes"})


def is_operator(peer: Peer) -> bool:
    """``peer`` holds the operator grant (:data:`OPERATOR_GRANT`) from a trusted attribute."""
    value = peer.grant(OPERATOR_GRANT)
    return value is not None and value.strip().lower() in _TRUE


REASONING_FEATURES: Final = frozenset({Feature.REASONING_STEP_DISPLAY, Feature.REASONING_STEPS})
"""Either name asks for ReasoningSteps (PROTOCOL.md §4.8)."""
STREAMING_FEATURES: Final = frozenset({Feature.STREAMING, Feature.PARTIAL_RESPONSES})
"""Either name asks for StartAnswer + AssistantSentence instead of AssistantMessage."""


def visibility_of(value: str | None, default: Visibility) -> Visibility:
    """A grant's level; ``default`` when absent or not a level (never more than asked)."""
    level = (value or "").strip().lower()
    return level if level in VISIBILITY_LEVELS else default


class TurnCut(ProtocolError):
    """The agent that ran a turn was replaced before it finished (failover): the answer
    is partial; regenerating the user message gives a whole one."""

    code = ErrorCode.SERVICE_UNAVAILABLE
    severity = Severity.WARNING


class PacketTooLarge(DecodeError):
    """An incoming packet is larger than one protocol packet; it is not decoded."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"packet of {size} bytes is over the {limit}-byte limit")


class WrongConversation(ProtocolError):
    """The client names a conversation other than this room's."""

    code = ErrorCode.CONVERSATION_NOT_FOUND
    severity = Severity.ERROR


class InvalidState(ProtocolError):
    """The request does not fit the conversation's state (e.g. unknown target message)."""

    code = ErrorCode.INVALID_STATE
    severity = Severity.WARNING


class NotPermitted(ProtocolError):
    """The sender may not do this: another participant's message or turn, or a message
    type only the agent sends."""

    code = ErrorCode.NOT_PERMITTED
    severity = Severity.WARNING


class DuplicateId(ProtocolError):
    """An incoming message reuses an id this conversation already has."""

    code = ErrorCode.DUPLICATE_ID
    severity = Severity.WARNING


class Overloaded(ProtocolError):
    """Too much input from one participant: a full queue or a flood of packets."""

    code = ErrorCode.OVERLOADED
    severity = Severity.WARNING


class LLMUnavailable(ProtocolError):
    """The LLM endpoint failed or timed out; the turn ends early."""

    code = ErrorCode.SERVICE_UNAVAILABLE
    severity = Severity.ERROR


class InternalError(ProtocolError):
    """Something unexpected failed inside the worker during a turn."""

    code = ErrorCode.INTERNAL_ERROR


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; ``take`` spends one."""

    __slots__ = ("_burst", "_clock", "_last", "_rate", "_tokens")

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Start full."""
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def take(self, at: float | None = None) -> bool:
        """Spend one token if there is one; False means over the limit. ``at``: when the
        spending happened on the bucket's clock (default: now; never before the last)."""
        now = max(self._clock() if at is None else at, self._last)
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One turn to run: answer ``text`` as the user message ``user_id``.

    ``replaces`` names the user message this turn supersedes (edit/regenerate): history
    from that message on is dropped first. ``voice`` marks a spoken (transcribed) turn.
    ``continues`` names the answer this turn continues (ControlVariation ``continue``):
    ``text`` is then the instruction to continue, and the new answer follows that one.
    """

    user_id: str
    text: str
    requester: str
    replaces: str | None = None
    voice: bool = False
    continues: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ParticipantLimits:
    """Each participant's limits and defaults (the worker's documented defaults)."""

    show_reasoning_default: bool = True
    """A client whose Configuration lists no ``features`` receives ReasoningSteps."""
    reasoning_visibility: Visibility = "none"
    """The reasoning a participant may see when its token grants none."""
    queue_size: int = 8
    """Pending turns/variations per participant."""
    rate_per_s: float = 20.0
    """Sustained packets per second accepted."""
    rate_burst: int = 40
    """Packets accepted in one burst."""
    error_rate_per_s: float = 2.0
    """ErrorMessages per second sent back."""
    error_burst: int = 5
    """ErrorMessages sent back in one burst."""
    resume_rate_per_s: float = 0.1
    """Resume Configurations per second once the burst is spent."""
    resume_burst: int = 3
    """Resume Configurations in one burst."""


@dataclass(slots=True, eq=False)
class Participant:
    """What the worker knows about one client in the room."""

    identity: str
    show_reasoning: bool
    """The client asked for ReasoningSteps (Configuration features, else the server
    default); it gets them only if its :attr:`visibility` also allows."""
    packets: TokenBucket
    errors: TokenBucket
    queue: asyncio.Queue[TurnRequest]
    streaming: bool = False
    """Streamed answers (StartAnswer + AssistantSentence); else one AssistantMessage."""
    audio_output: bool = False
    configured: bool = False
    """A Configuration was answered."""
    active: bool = False
    """The client sent at least one valid envelope: it receives answers."""
    order: StanzaOrder = field(default_factory=lambda: StanzaOrder("client"))
    last_packet: bytes = b""
    """The last envelope accepted, as received (a verbatim repeat of it is a resend)."""
    answered_at: float = 0.0
    """When its last Configuration was answered (``time.monotonic``): a repeat received
    before then crossed that answer, one received after it says the answer was lost."""
    peer: Peer = UNKNOWN_PEER
    """Who the front end says this is (kind, attributes, permissions)."""
    resumes: TokenBucket | None = None
    """Resume Configurations this participant may still ask for (replay budget)."""
    default_visibility: Visibility = "none"
    """The deployment's level for participants without a grant."""
    pending_edit: str | None = None
    """User message id named by an ``edit`` variation, waiting for its new UserMessage."""
    edit_timer: asyncio.Task[None] | None = None
    runner: asyncio.Task[None] | None = None

    @classmethod
    def new(
        cls,
        identity: str,
        limits: ParticipantLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> Participant:
        """A participant just seen, with ``limits``."""
        s = limits
        return cls(
            identity=identity,
            show_reasoning=s.show_reasoning_default,
            packets=TokenBucket(s.rate_per_s, s.rate_burst, clock=clock),
            errors=TokenBucket(s.error_rate_per_s, s.error_burst, clock=clock),
            queue=asyncio.Queue(maxsize=s.queue_size),
            resumes=TokenBucket(s.resume_rate_per_s, s.resume_burst, clock=clock),
            default_visibility=s.reasoning_visibility,
        )

    def accept(self, stanza_id: int, data: bytes) -> bool:
        """Check ``stanza_id``'s order: True for a new envelope, False for a verbatim
        repeat of the last one (a client resending what got no reply yet), else
        :class:`OrderingError`."""
        if data == self.last_packet and self.order.seen(stanza_id):
            return False
        self.order.check(stanza_id)
        self.last_packet = data
        return True

    @property
    def operator(self) -> bool:
        """Holds the operator grant (:data:`OPERATOR_GRANT`) from a trusted attribute."""
        return is_operator(self.peer)

    def drop_queued(self, user_id: str) -> bool:
        """Remove the waiting (not yet started) turn for ``user_id``; True if there was one."""
        waiting: list[TurnRequest] = []
        while not self.queue.empty():
            waiting.append(self.queue.get_nowait())
        kept = [r for r in waiting if r.user_id != user_id]
        for request in kept:
            self.queue.put_nowait(request)
        return len(kept) < len(waiting)

    @property
    def visibility(self) -> Visibility:
        """The reasoning this participant may see: its trusted grant, else the default."""
        return visibility_of(self.peer.grant(REASONING_GRANT), self.default_visibility)

    @property
    def step_level(self) -> Visibility | None:
        """The rendition of each step this participant gets: its level if it asked for
        reasoning and is granted some, else ``None`` (no steps)."""
        level = self.visibility
        return level if self.show_reasoning and level != "none" else None

    @property
    def receives_steps(self) -> bool:
        """Plaintext ReasoningSteps go to this participant: granted ``full`` and asked."""
        return self.step_level == "full"

    def find_queued(self, user_id: str) -> TurnRequest | None:
        """The waiting turn for ``user_id``, left in place; None if there is none."""
        waiting: list[TurnRequest] = []
        while not self.queue.empty():
            waiting.append(self.queue.get_nowait())
        for request in waiting:
            self.queue.put_nowait(request)
        return next((r for r in waiting if r.user_id == user_id), None)

    def apply_features(self, features: Iterable[str] | None) -> None:
        """Take a Configuration's ``features``; ``None`` (absent) keeps the current values."""
        if features is None:
            return
        names = set(features)
        self.show_reasoning = bool(names & REASONING_FEATURES)
        self.streaming = bool(names & STREAMING_FEATURES)
        self.audio_output = Feature.AUDIO_OUTPUT in names

    def features(self, *, sealing: bool, tool_use: bool) -> list[str]:
        """The Configuration reply's features: what reasoning this participant gets, as
        granted and asked for (the server decides), then the rest."""
        level = self.step_level
        reasoning: list[Feature] = []
        if level == "full":
            reasoning = [Feature.REASONING_STEPS]
        elif level == "summary":
            reasoning = [Feature.REASONING_SUMMARY]
            if sealing:
                reasoning.append(Feature.REASONING_ENCRYPTED)
        elif level == "encrypted" and sealing:
            reasoning = [Feature.REASONING_ENCRYPTED]
        rest = [Feature.STREAMING, *([Feature.TOOL_USE] if tool_use else [])]
        return [str(f) for f in (*reasoning, *rest)]
