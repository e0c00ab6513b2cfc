"""OpenHands events: a JSON array in the form of OpenHands' ``event_to_dict`` (a trajectory).

Every event has ``id`` (0, 1, …), ``timestamp``, ``source`` and ``message``; actions add
``action`` and ``args``, observations ``cause`` (the action's id), ``observation``,
``content`` and ``extras``. Per turn:

* the user message: ``MessageAction`` (``action: "message"``, source ``user``,
  ``args.content``);
* each tool use: ``MCPAction`` (``action: "call_tool_mcp"``, ``args.name``,
  ``args.arguments``, ``args.thought``) and, once its result is stored, an ``MCPObservation``
  (``observation: "mcp"``, ``extras.name``/``arguments``) or, when it failed, an
  ``ErrorObservation`` (``observation: "error"``, ``extras.error_id``);
* the answer: an agent ``MessageAction`` whose args carry ``thought`` (``""``: no visible
  thought is stored) and ``reasoning_content``, the turn's reasoning steps joined with
  newlines, left out when empty, as OpenHands flattens its ``Thought`` on the wire. A turn
  with reasoning and no answer ends with an ``AgentThinkAction`` carrying it instead.

OpenHands has no field for encrypted reasoning: steps stored only encrypted (zero data
retention) are not in ``reasoning_content`` and are never decrypted.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from .turns import StoredConversation, StoredToolUse, Turn, iso

__all__ = ["dumps", "events", "reasoning_content"]


class _Stream:
    """Numbers events as OpenHands' event stream does."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, at: dt.datetime, source: str, message: str, **rest: Any) -> int:
        eid = len(self.events)
        self.events.append(
            {"id": eid, "timestamp": iso(at), "source": source, "message": message, **rest}
        )
        return eid


def reasoning_content(turn: Turn) -> str:
    """The turn's plaintext reasoning steps joined with newlines (``""`` if none)."""
    return "\n".join(text for s in turn.steps if (text := s.text))


def _tool(stream: _Stream, t: StoredToolUse) -> None:
    shown = json.dumps(t.arguments, ensure_ascii=False)
    message = (
        f"I am interacting with the MCP server with name:\n```\n{t.name}\n```\n"
        f"and arguments:\n```\n{shown}\n```"
    )
    args = {"name": t.name, "arguments": t.arguments, "thought": ""}
    cause = stream.add(t.sent_at, "agent", message, action="call_tool_mcp", args=args)
    if not t.finished:
        return
    at = t.completed_at or t.sent_at
    if t.failed:
        text = t.error_text()
        extras: dict[str, Any] = {"error_id": t.error_code or ""}
        stream.add(at, "agent", text, cause=cause, observation="error", content=text, extras=extras)
        return
    text = t.result_text()
    extras = {"name": t.name, "arguments": t.arguments}
    stream.add(at, "agent", text, cause=cause, observation="mcp", content=text, extras=extras)


def _turn(stream: _Stream, turn: Turn) -> None:
    if turn.user is not None:
        args: dict[str, Any] = {
            "content": turn.user.contents,
            "image_urls": None,
            "wait_for_response": False,
        }
        source = "environment" if turn.user.role == "system" else "user"
        stream.add(turn.user.sent_at, source, turn.user.contents, action="message", args=args)
    for t in turn.tools:
        _tool(stream, t)
    reasoning = reasoning_content(turn)
    for n, answer in enumerate(turn.answers):
        args = {
            "content": answer.contents,
            "image_urls": None,
            "wait_for_response": True,
            "thought": "",
        }
        if reasoning and n == 0:
            args["reasoning_content"] = reasoning
        stream.add(answer.sent_at, "agent", answer.contents, action="message", args=args)
    if reasoning and not turn.answers:
        at = turn.work[-1].sent_at
        args = {"thought": "", "reasoning_content": reasoning}
        stream.add(at, "agent", "I am thinking...: ", action="think", args=args)


def events(conv: StoredConversation) -> list[dict[str, Any]]:
    """The conversation as OpenHands event dicts, in order."""
    stream = _Stream()
    for turn in conv.turns:
        _turn(stream, turn)
    return stream.events


def dumps(conv: StoredConversation) -> str:
    """The export file: a JSON array of events."""
    return json.dumps(events(conv), ensure_ascii=False, indent=2) + "\n"
