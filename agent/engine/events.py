"""What one turn produces, as typed events (:meth:`alicia.agent.engine.turn.Turn.events`).

A turn yields, in order: any number of :class:`ReasoningDelta` (reasoning text as it
streams) and :class:`StepReady`, :class:`ToolRequested` /
:class:`ToolFinished` pairs (between LLM rounds) and, once the answer starts,
:class:`AnswerStarted` followed by :class:`AnswerDelta` and :class:`SentenceReady`
events; then exactly one :class:`TurnEnded`. :class:`AnswerStarted` always comes before
the end (also for an empty answer), and the last :class:`SentenceReady` before the end
has ``final=True`` (its text may be empty).

Front ends turn these into their own wire form: Alicia envelopes
(:mod:`alicia.agent.engine.conversation`), AG-UI events, or an AgentSession's chat chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from alicia.protocol import ProtocolError

from .keeper import Kept
from .tools import Outcome

__all__ = [
    "AnswerDelta",
    "AnswerStarted",
    "ReasoningDelta",
    "SentenceReady",
    "StepReady",
    "ToolFinished",
    "ToolRequested",
    "TurnEnded",
    "TurnEvent",
    "TurnStatus",
    "Usage",
]

TurnStatus = Literal["complete", "stopped", "failed"]


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning text as the model streamed it, before any step holds it.

    The deltas of a round, joined, are the round's reasoning (raw reasoning, or the
    provider's summaries when it streams only those); the :class:`StepReady` events that
    follow cut the same text into steps. Front ends that stream reasoning token by token
    (AG-UI) use these; the Alicia protocol sends whole steps and ignores them.
    """

    text: str


@dataclass(frozen=True, slots=True)
class StepReady:
    """A reasoning step is complete: ``text`` is its whole content."""

    text: str
    index: int
    """``stepIndex`` in the chain of the turn's user message (1, 2, …; continues across
    regenerations of the same message)."""
    closed_ns: int
    """``time.monotonic_ns()`` when the segmenter closed the step."""
    summary: str | None = None
    """The provider's own summary for this step (Responses API reasoning summaries,
    OpenRouter ``reasoning.summary``), when it sent one; for a provider that streams only
    summaries this is ``text`` itself."""


@dataclass(frozen=True, slots=True)
class AnswerStarted:
    """The answer begins (first answer text, or the end of a turn without any)."""


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """Answer text as the model streamed it (no reasoning, no markers)."""

    text: str


@dataclass(frozen=True, slots=True)
class SentenceReady:
    """A whole answer sentence, ready to show or speak; ``final`` marks the last one."""

    text: str
    final: bool = False


@dataclass(frozen=True, slots=True)
class ToolRequested:
    """The model asked for a tool; it runs right after this event."""

    request_id: str
    name: str
    parameters: dict[str, Any]
    """The decoded arguments, or ``{"raw": …}`` when they were not a JSON object."""
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """The tool of ``request_id`` returned (or failed); its outcome goes back to the LLM."""

    request_id: str
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the provider, summed over the turn's LLM rounds."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def from_provider(cls, usage: dict[str, Any]) -> Usage:
        """A chat-completions ``usage`` object (reasoning tokens from
        ``completion_tokens_details``); missing or odd values count as 0."""
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        return cls(
            _count(usage.get("prompt_tokens")),
            _count(usage.get("completion_tokens")),
            _count(reasoning),
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn is over: nothing follows."""

    status: TurnStatus
    answer: str
    """The whole answer text, stripped (partial when stopped or failed)."""
    steps: int
    """Reasoning steps produced."""
    usage: Usage | None = None
    """Provider-reported usage, when the stream carried any."""
    error: ProtocolError | None = None
    """Why the turn failed (``status == "failed"``), as the error to report."""
    kept: Kept | None = None
    """Reasoning the provider needs in later turns (pass-back ``all_turns``), sealed."""
    first_reasoning_ms: float | None = None
    """Milliseconds from the first LLM request to the first reasoning text, if any."""


TurnEvent = (
    ReasoningDelta
    | StepReady
    | AnswerStarted
    | AnswerDelta
    | SentenceReady
    | ToolRequested
    | ToolFinished
    | TurnEnded
)
"""Any event of a turn."""


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
