"""One turn's events as AG-UI events, in the rendition the caller's reasoning level allows.

:class:`AguiProjection` is fed a :class:`~alicia.agent.engine.turn.Turn`'s events in order
and returns the ``ag_ui.core`` events to stream (``RUN_STARTED`` comes from the caller):

* reasoning, per *phase* (the reasoning of one LLM round, up to its answer or tool call):
  ``REASONING_START``, one reasoning message (``REASONING_MESSAGE_START``, role
  ``reasoning``) and ``REASONING_MESSAGE_END``, then ``REASONING_END``. Its content by
  level: ``full`` streams the reasoning as the tokens arrive (``ReasoningDelta``);
  ``summary`` streams one summary per step as each step closes (the provider's own, else
  the step's first sentence); ``encrypted`` has no content; ``none`` gets no reasoning
  event at all. ``summary`` and ``encrypted`` also get the phase's steps sealed
  (``REASONING_ENCRYPTED_VALUE``): subtype ``message`` on the reasoning message before
  ``REASONING_END``, or, when the phase ends in a tool call, subtype ``tool-call`` on the
  round's first call right after ``TOOL_CALL_END``;
* tool calls: ``TOOL_CALL_START`` (parent: an assistant message of its own per round),
  ``TOOL_CALL_ARGS`` (the arguments as JSON), ``TOOL_CALL_END``, then
  ``TOOL_CALL_RESULT``;
* the answer: ``TEXT_MESSAGE_START`` (the answer id), ``TEXT_MESSAGE_CONTENT`` per
  streamed piece, ``TEXT_MESSAGE_END``; where the provider needs its reasoning back in
  later turns (the Responses API), the sealed pass-back material rides on the answer
  (``REASONING_ENCRYPTED_VALUE`` subtype ``message``) for the client to send back;
* ``RUN_FINISHED``, or ``RUN_ERROR`` with the turn's error.

The deprecated ``THINKING_*`` events are never made.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ag_ui.core import (
    BaseEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from alicia.agent.engine.events import (
    AnswerDelta,
    AnswerStarted,
    ReasoningDelta,
    StepReady,
    ToolFinished,
    ToolRequested,
    TurnEnded,
    TurnEvent,
)
from alicia.agent.engine.participants import Visibility
from alicia.agent.llm.summary import extractive_summary
from alicia.protocol import ids as id_prefix
from alicia.protocol import new_id

__all__ = ["AguiProjection"]

_SEPARATOR = "\n\n"
"""Between two step summaries of one reasoning message."""


class AguiProjection:
    """One turn for one caller (see the module docstring)."""

    def __init__(
        self,
        *,
        thread_id: str,
        run_id: str,
        answer_id: str,
        level: Visibility,
        seal: Callable[[str, str], str] | None,
    ) -> None:
        """``seal(text, ref)``: seals a phase's steps for the message or tool call ``ref``
        (None: no key, so no encrypted values)."""
        self.thread_id = thread_id
        self.run_id = run_id
        self.answer_id = answer_id
        self.level = level
        self._seal = seal if level in ("summary", "encrypted") else None
        self._span: str | None = None
        """Id of the open reasoning span (``REASONING_START``), if any."""
        self._message: str | None = None
        """Id of the open reasoning message."""
        self._steps: list[str] = []
        """Step texts of the open phase (sealed when it closes)."""
        self._summaries = 0
        self._round: str | None = None
        """Assistant message id of this round's tool calls."""
        self._for_tool: str | None = None
        """A phase's steps waiting for its round's first tool call, to be sealed for it."""
        self.reasoning_messages: list[str] = []
        """Ids of the reasoning messages made so far."""

    def feed(self, event: TurnEvent) -> list[BaseEvent]:
        """The AG-UI events for one turn event."""
        if isinstance(event, ReasoningDelta):
            out = self._open_phase()
            if self.level == "full" and event.text:
                assert self._message is not None
                out.append(ReasoningMessageContentEvent(message_id=self._message, delta=event.text))
            return out
        if isinstance(event, AnswerDelta):
            if not event.text:
                return []
            return [TextMessageContentEvent(message_id=self.answer_id, delta=event.text)]
        if isinstance(event, StepReady):
            return self._step(event)
        if isinstance(event, ToolRequested):
            return self._tool_call(event)
        if isinstance(event, ToolFinished):
            content = event.outcome.for_llm()
            return [
                ToolCallResultEvent(
                    message_id=new_id(id_prefix.TOOL_USE_RESULT),
                    tool_call_id=event.request_id,
                    content=content,
                    role="tool",
                )
            ]
        if isinstance(event, AnswerStarted):
            out = self._close_phase(tool_call=False)
            self._round = None
            out.append(TextMessageStartEvent(message_id=self.answer_id, role="assistant"))
            return out
        if isinstance(event, TurnEnded):
            return self._end(event)
        return []  # SentenceReady: the streamed pieces carry the same text

    def _open_phase(self) -> list[BaseEvent]:
        if self._span is not None or self.level == "none":
            return []
        self._round = None
        self._span = new_id("rsn")
        self._message = new_id(id_prefix.REASONING_STEP)
        self._summaries = 0
        self.reasoning_messages.append(self._message)
        return [
            ReasoningStartEvent(message_id=self._span),
            ReasoningMessageStartEvent(message_id=self._message, role="reasoning"),
        ]

    def _step(self, step: StepReady) -> list[BaseEvent]:
        out = self._open_phase()
        if self._span is None:
            return out
        self._steps.append(step.text)
        if self.level == "summary" and self._message is not None:
            summary = step.summary if step.summary is not None else extractive_summary(step.text)
            if summary:
                delta = (_SEPARATOR if self._summaries else "") + summary
                self._summaries += 1
                out.append(ReasoningMessageContentEvent(message_id=self._message, delta=delta))
        return out

    def _close_phase(self, *, tool_call: bool) -> list[BaseEvent]:
        """End the open reasoning message and span; seal the phase's steps."""
        if self._span is None or self._message is None:
            return []
        out: list[BaseEvent] = [ReasoningMessageEndEvent(message_id=self._message)]
        if self._seal is not None and self._steps:
            text = _SEPARATOR.join(self._steps)
            if tool_call:
                self._for_tool = text
            else:
                value = self._seal(text, self._message)
                out.append(
                    ReasoningEncryptedValueEvent(
                        subtype="message", entity_id=self._message, encrypted_value=value
                    )
                )
        out.append(ReasoningEndEvent(message_id=self._span))
        self._span = self._message = None
        self._steps = []
        return out

    def _tool_call(self, call: ToolRequested) -> list[BaseEvent]:
        out = self._close_phase(tool_call=True)
        if self._round is None:
            self._round = new_id(id_prefix.MESSAGE)
        parent = self._round
        out += [
            ToolCallStartEvent(
                tool_call_id=call.request_id, tool_call_name=call.name, parent_message_id=parent
            ),
            ToolCallArgsEvent(
                tool_call_id=call.request_id, delta=json.dumps(call.parameters, ensure_ascii=False)
            ),
            ToolCallEndEvent(tool_call_id=call.request_id),
        ]
        if self._for_tool is not None and self._seal is not None:
            value = self._seal(self._for_tool, call.request_id)
            self._for_tool = None
            out.append(
                ReasoningEncryptedValueEvent(
                    subtype="tool-call", entity_id=call.request_id, encrypted_value=value
                )
            )
        return out

    def _end(self, ended: TurnEnded) -> list[BaseEvent]:
        out = self._close_phase(tool_call=False)
        out.append(TextMessageEndEvent(message_id=self.answer_id))
        kept = ended.kept
        if kept is not None and kept.sealed is not None:
            out.append(
                ReasoningEncryptedValueEvent(
                    subtype="message", entity_id=self.answer_id, encrypted_value=kept.sealed
                )
            )
        if ended.status == "failed":
            error = ended.error
            message = str(error) if error is not None else "the turn failed"
            code = str(int(error.code)) if error is not None else None
            out.append(RunErrorEvent(message=message, code=code))
        else:
            out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id))
        return out
