"""Turn assembly: fold the server's envelopes into per-user-message turns.

Pure bookkeeping, no I/O: :class:`TurnAssembler` is fed decoded envelopes and returns
the :data:`Event` values a renderer shows. Links follow PROTOCOL.md §4.2-§4.4:

* ReasoningStep / ToolUseRequest ``previousId`` → the user message (or, as seen in
  other implementations, the StartAnswer id);
* ToolUseResult ``requestId`` → its request's turn;
* StartAnswer ``previousId`` → the user message; AssistantSentence ``previousId`` →
  the StartAnswer id (or, as some servers chain them, an earlier sentence's id); the
  sentence with ``isFinal`` (or an AssistantMessage) ends it;
* ErrorMessage ``originatingId`` → that turn, and ends it.

Envelopes are placed only by these ids, never "into the latest open turn": in a room
with several users, a step or answer for a user message this client did not send opens
a turn of its own (:attr:`Turn.own` False, question unknown), so every user's turn
shows its own answer. What names no known id is an :class:`OtherReceived`.

Steps are ordered by ``stepIndex`` and de-duplicated by ``id``; sentences by
``sequence``. At most ``max_turns`` turns are kept (oldest dropped).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Configuration,
    Envelope,
    ErrorMessage,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
)

__all__ = [
    "AnswerDone",
    "AnswerStarted",
    "ConfigurationReceived",
    "ErrorReceived",
    "Event",
    "OtherReceived",
    "SentenceReceived",
    "StepReceived",
    "ToolRequested",
    "ToolResulted",
    "Turn",
    "TurnAssembler",
]


@dataclass(slots=True)
class Turn:
    """Everything the server sent about one user message."""

    user_message_id: str
    question: str
    steps: list[ReasoningStep] = field(default_factory=list)
    """Reasoning steps received, ordered by ``stepIndex`` (shown or not)."""
    hidden_steps: int = 0
    """How many of them arrived while show-reasoning was off (not displayed)."""
    tool_requests: list[ToolUseRequest] = field(default_factory=list)
    tool_results: list[ToolUseResult] = field(default_factory=list)
    answer_id: str | None = None
    sentences: list[AssistantSentence] = field(default_factory=list)
    """Answer chunks, ordered by ``sequence``."""
    message: AssistantMessage | None = None
    """The whole answer when the server did not stream."""
    error: ErrorMessage | None = None
    finished: bool = False
    own: bool = True
    """This client sent the user message; False for another participant's turn."""

    @property
    def answer(self) -> str:
        """The answer text so far (sentences joined by a space, or the whole message)."""
        if self.message is not None:
            return self.message.content
        return " ".join(s.text.strip() for s in self.sentences if s.text.strip())

    @property
    def heard(self) -> bool:
        """The server sent something for this turn: it has the user message."""
        return bool(self.steps or self.tool_requests or self.answer_id is not None or self.finished)

    @property
    def total_steps(self) -> int | None:
        """The announced step count, if the server sent one."""
        totals = [s.total_steps for s in self.steps if s.total_steps is not None]
        return max(totals) if totals else None


@dataclass(frozen=True, slots=True)
class StepReceived:
    """A new reasoning step (``shown`` is False when show-reasoning is off: do not display)."""

    turn: Turn
    step: ReasoningStep
    shown: bool


@dataclass(frozen=True, slots=True)
class ToolRequested:
    """The server announced or delegated a tool call."""

    turn: Turn
    request: ToolUseRequest


@dataclass(frozen=True, slots=True)
class ToolResulted:
    """A tool call's outcome."""

    turn: Turn
    result: ToolUseResult


@dataclass(frozen=True, slots=True)
class AnswerStarted:
    """StartAnswer: the streamed answer opened."""

    turn: Turn
    start: StartAnswer


@dataclass(frozen=True, slots=True)
class SentenceReceived:
    """One new answer sentence, in ``sequence`` order of arrival."""

    turn: Turn
    sentence: AssistantSentence


@dataclass(frozen=True, slots=True)
class AnswerDone:
    """The turn is over: final sentence, AssistantMessage, or an error ended it."""

    turn: Turn


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    """An ErrorMessage (``turn`` is None when it concerns no open turn)."""

    turn: Turn | None
    error: ErrorMessage


@dataclass(frozen=True, slots=True)
class ConfigurationReceived:
    """The server's Configuration (handshake reply or settings update answer)."""

    config: Configuration


@dataclass(frozen=True, slots=True)
class OtherReceived:
    """Any other envelope (acks, memory traces, unknown types …)."""

    envelope: Envelope[Any]


Event: TypeAlias = (
    StepReceived
    | ToolRequested
    | ToolResulted
    | AnswerStarted
    | SentenceReceived
    | AnswerDone
    | ErrorReceived
    | ConfigurationReceived
    | OtherReceived
)


class TurnAssembler:
    """Builds :class:`Turn` objects from the server's envelopes (see module docstring)."""

    def __init__(self, *, show_reasoning: bool = True, max_turns: int = 256) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.show_reasoning = show_reasoning
        self._max = max_turns
        self._turns: OrderedDict[str, Turn] = OrderedDict()
        self._by_answer: dict[str, str] = {}
        self._by_request: dict[str, str] = {}
        self._step_ids: dict[str, set[str]] = {}

    @property
    def turns(self) -> list[Turn]:
        """The kept turns, oldest first."""
        return list(self._turns.values())

    def turn(self, user_message_id: str) -> Turn | None:
        """The turn of ``user_message_id`` if it is kept."""
        return self._turns.get(user_message_id)

    def start(self, message: UserMessage) -> Turn:
        """Open the turn for a user message this client sends."""
        return self._add(Turn(user_message_id=message.id, question=message.content))

    def _add(self, turn: Turn) -> Turn:
        self._turns[turn.user_message_id] = turn
        self._step_ids[turn.user_message_id] = set()
        while len(self._turns) > self._max:
            old_id, old = self._turns.popitem(last=False)
            self._step_ids.pop(old_id, None)
            if old.answer_id is not None:
                self._by_answer.pop(old.answer_id, None)
            for req in old.tool_requests:
                self._by_request.pop(req.id, None)
            for sentence in old.sentences:
                if sentence.id:
                    self._by_answer.pop(sentence.id, None)
        return turn

    def _foreign(self, user_message_id: str) -> Turn:
        """The turn of another participant's message (opened on its first envelope)."""
        return self._turns.get(user_message_id) or self._add(
            Turn(user_message_id=user_message_id, question="", own=False)
        )

    def feed(self, env: Envelope[Any]) -> list[Event]:
        """Apply one envelope from the server; the events it causes, in order."""
        body = env.body
        if isinstance(body, ReasoningStep):
            return self._step(body)
        if isinstance(body, ToolUseRequest):
            turn = self._lookup(body.previous_id)
            if turn is None and body.previous_id:
                turn = self._foreign(body.previous_id)
            if turn is None:
                return [OtherReceived(env)]
            turn.tool_requests.append(body)
            self._by_request[body.id] = turn.user_message_id
            return [ToolRequested(turn, body)]
        if isinstance(body, ToolUseResult):
            owner = self._by_request.get(body.request_id)
            turn = self._turns.get(owner) if owner is not None else None
            if turn is None:
                return [OtherReceived(env)]
            turn.tool_results.append(body)
            return [ToolResulted(turn, body)]
        if isinstance(body, StartAnswer):
            turn = self._turns.get(body.previous_id) or self._foreign(body.previous_id)
            turn.answer_id = body.id
            self._by_answer[body.id] = turn.user_message_id
            return [AnswerStarted(turn, body)]
        if isinstance(body, AssistantSentence):
            return self._sentence(env, body)
        if isinstance(body, AssistantMessage):
            turn = self._lookup(body.previous_id)
            if turn is None and body.previous_id:
                turn = self._foreign(body.previous_id)
            if turn is None or turn.finished:
                return [OtherReceived(env)]
            turn.message = body
            turn.answer_id = body.id
            turn.finished = True
            return [AnswerDone(turn)]
        if isinstance(body, ErrorMessage):
            turn = self._lookup(body.originating_id)
            if turn is None:
                return [ErrorReceived(None, body)]
            turn.error = body
            if turn.finished:
                return [ErrorReceived(turn, body)]
            turn.finished = True
            return [ErrorReceived(turn, body), AnswerDone(turn)]
        if isinstance(body, Configuration):
            return [ConfigurationReceived(body)]
        if isinstance(body, Acknowledgement):
            return [OtherReceived(env)]
        return [OtherReceived(env)]

    def _lookup(self, some_id: str | None) -> Turn | None:
        if some_id is None:
            return None
        turn = self._turns.get(some_id)
        if turn is None and some_id in self._by_answer:
            turn = self._turns.get(self._by_answer[some_id])
        return turn

    def _step(self, step: ReasoningStep) -> list[Event]:
        turn = self._lookup(step.previous_id) or self._foreign(step.previous_id)
        seen = self._step_ids.setdefault(turn.user_message_id, set())
        if step.id in seen:
            return []
        seen.add(step.id)
        if not self.show_reasoning:
            turn.hidden_steps += 1
        steps = turn.steps
        pos = len(steps)
        while pos > 0 and steps[pos - 1].step_index > step.step_index:
            pos -= 1
        steps.insert(pos, step)
        return [StepReceived(turn, step, shown=self.show_reasoning)]

    def _sentence(self, env: Envelope[Any], sentence: AssistantSentence) -> list[Event]:
        owner = self._by_answer.get(sentence.previous_id)
        turn = self._turns.get(owner) if owner is not None else None
        if turn is None or turn.finished:
            return [OtherReceived(env)]
        if sentence.id:  # some servers chain sentences to the previous sentence's id
            self._by_answer[sentence.id] = turn.user_message_id
        sentences = turn.sentences
        if any(s.sequence == sentence.sequence for s in sentences):
            return []
        pos = len(sentences)
        while pos > 0 and sentences[pos - 1].sequence > sentence.sequence:
            pos -= 1
        sentences.insert(pos, sentence)
        events: list[Event] = [SentenceReceived(turn, sentence)]
        if sentence.is_final:
            turn.finished = True
            events.append(AnswerDone(turn))
        return events
