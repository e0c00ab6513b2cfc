"""AG-UI message history: a JSON array of ``ag_ui.core`` messages in their wire form.

Per turn: the ``UserMessage``; then, in time order, a ``ReasoningMessage`` per step
(``content``; a step stored only encrypted has ``content: ""`` and its JWE as
``encryptedValue``, never decrypted here) and, per run of consecutive tool uses, one
``AssistantMessage`` with their ``toolCalls`` followed by a ``ToolMessage`` per stored
result (``error`` set when the tool failed); last the answer as an ``AssistantMessage``.
The models are built with ``ag_ui.core`` and dumped by alias (camelCase), absent
optional fields left out, as the AG-UI SDKs put them on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    ReasoningMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter

from .turns import StoredConversation, StoredMessage, StoredStep, StoredToolUse

__all__ = ["MESSAGES", "dumps", "messages", "wire"]

MESSAGES: Final[TypeAdapter[list[Message]]] = TypeAdapter(list[Message])
"""Validates and dumps a list of AG-UI messages (the ``Message`` union, by ``role``)."""


def _opening(m: StoredMessage) -> Message:
    if m.role == "system":
        return SystemMessage(id=m.id, content=m.contents)
    return UserMessage(id=m.id, content=m.contents)


def _reasoning(step: StoredStep) -> ReasoningMessage:
    sealed = step.encrypted_value
    if sealed is not None:
        return ReasoningMessage(id=step.id, content="", encrypted_value=sealed)
    return ReasoningMessage(id=step.id, content=step.content)


def _calls(run: Sequence[StoredToolUse]) -> list[Message]:
    call = AssistantMessage(
        id=f"{run[0].id}.call",
        tool_calls=[
            ToolCall(
                id=t.id,
                function=FunctionCall(
                    name=t.name, arguments=json.dumps(t.arguments, ensure_ascii=False)
                ),
            )
            for t in run
        ],
    )
    out: list[Message] = [call]
    for t in run:
        if not t.finished:
            continue  # no result stored (yet): the call stays unanswered
        error = t.error_text() if t.failed else None
        result = t.result_text()
        out.append(ToolMessage(id=f"{t.id}.result", tool_call_id=t.id, content=result, error=error))
    return out


def messages(conv: StoredConversation) -> list[Message]:
    """The conversation as AG-UI messages, in order."""
    out: list[Message] = []
    for turn in conv.turns:
        if turn.user is not None:
            out.append(_opening(turn.user))
        run: list[StoredToolUse] = []
        for w in turn.work:
            if isinstance(w, StoredToolUse):
                run.append(w)
                continue
            if run:
                out.extend(_calls(run))
                run = []
            out.append(_reasoning(w))
        if run:
            out.extend(_calls(run))
        out.extend(AssistantMessage(id=a.id, content=a.contents) for a in turn.answers)
    return out


def wire(conv: StoredConversation) -> list[dict[str, Any]]:
    """The messages as AG-UI wire JSON values (camelCase, absent fields left out)."""
    dumped: list[dict[str, Any]] = MESSAGES.dump_python(messages(conv), by_alias=True, mode="json")
    return dumped


def dumps(conv: StoredConversation) -> str:
    """The export file: a JSON array of AG-UI messages."""
    return json.dumps(wire(conv), ensure_ascii=False, indent=2) + "\n"
