"""What a run's ``messages`` tell the engine: the question, the past exchanges, and the
reasoning the provider needs back, opened from the values the client returns.

AG-UI keeps the conversation at the client: every run sends the whole history. From it
the endpoint rebuilds what the worker keeps in memory:

* the question: the last message, a user message;
* the past exchanges (user text, answer text; never reasoning), in order;
* the encrypted values the client sends back, each opened with the conversation's key;
  every value is bound (as authenticated data) to the thread, to what it holds, to the
  message or tool call it was issued on and to the caller it was issued to: a reasoning
  message's value must open as that message's steps, a tool call's as that call's; an
  answer's value holds the provider's pass-back material (the Responses API's reasoning
  items) for that answer, restored onto that exchange so the next request carries it. A
  value that does not open (changed, another conversation's, another message's or
  caller's, another deployment's, or not a value at all) rejects the run, naming the
  message that carried it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ag_ui.core import AssistantMessage, Message, ReasoningMessage, TextPart, UserMessage

from alicia.agent.engine.keeper import Keeper, Kept
from alicia.agent.engine.turn import Exchange

__all__ = ["Prompt", "RejectedInput", "read_messages"]


class RejectedInput(Exception):
    """The run's messages cannot be served; ``message_id`` names the culprit."""

    def __init__(self, message: str, message_id: str | None = None) -> None:
        super().__init__(message)
        self.message_id = message_id


@dataclass(slots=True)
class Prompt:
    """The turn a run asks for."""

    user_id: str
    text: str
    history: list[Exchange] = field(default_factory=list)
    opened: int = 0
    """Encrypted values opened (each one checked)."""


def read_messages(
    messages: Sequence[Message],
    *,
    requester: str,
    open_value: Callable[..., str] | None,
    keeper: Keeper,
) -> Prompt:
    """The question and history of a run (see the module docstring).

    ``open_value(value, knd=..., ref=...)`` opens a sealed value of this conversation
    issued to ``requester`` for that use and message (raising on failure); None when
    the deployment has no reasoning keys (then a value is refused).
    """
    if not messages or not isinstance(messages[-1], UserMessage):
        raise RejectedInput("the last message of a run must be the user's question")
    question = messages[-1]
    text = _text(question)
    if not text.strip():
        raise RejectedInput("the question is empty", question.id)
    history: list[Exchange] = []
    pending: UserMessage | None = None
    opened = 0

    def check(value: str, message_id: str, **bind: str) -> str:
        nonlocal opened
        if open_value is None:
            raise RejectedInput(
                "this server holds no reasoning keys, so it cannot read encrypted values",
                message_id,
            )
        try:
            plain = open_value(value, **bind)
        except Exception as exc:
            raise RejectedInput(f"encrypted value rejected: {exc}", message_id) from None
        opened += 1
        return plain

    for message in messages[:-1]:
        if isinstance(message, UserMessage):
            pending = message
        elif isinstance(message, ReasoningMessage):
            if message.encrypted_value:
                check(message.encrypted_value, message.id, knd="step", ref=message.id)
        elif isinstance(message, AssistantMessage):
            for call in message.tool_calls or ():
                if call.encrypted_value:
                    check(call.encrypted_value, message.id, knd="step", ref=call.id)
            kept: Kept | None = None
            if message.encrypted_value:
                check(message.encrypted_value, message.id, knd="passback", ref=message.id)
                kept = Kept(sealed=message.encrypted_value)
                try:
                    keeper.open(kept)
                except Exception:
                    raise RejectedInput(
                        "encrypted value rejected: not this answer's reasoning", message.id
                    ) from None
            answer = message.content or ""
            if pending is not None and answer.strip():
                history.append(
                    Exchange(pending.id, _text(pending), message.id, answer, requester, kept=kept)
                )
                pending = None
        # system, developer, tool and activity messages: not part of the model's history
    return Prompt(question.id, text, history, opened)


def _text(message: UserMessage) -> str:
    """A user message's text (its text parts, joined, when it has parts)."""
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if isinstance(part, TextPart))
