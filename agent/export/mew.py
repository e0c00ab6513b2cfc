"""MEW protocol v0.4 envelopes (MEUP's successor), one JSON envelope per line.

Every envelope has ``protocol`` (``mew/v0.4``), ``id``, ``ts`` (RFC 3339), ``from``,
``kind`` and ``payload``; ``correlation_id`` (always an array) and ``context`` where the
spec links messages. Per turn, following the spec's reasoning pattern (§3.5):

* the user message as ``chat`` (``{"text", "format": "plain"}``) from ``user``, its id
  the stored message id;
* ``reasoning/start`` at the top level, ``correlation_id`` = [user message id]; its id
  (``<user id>.reasoning``) is the ``context`` of everything up to the conclusion:
* a ``reasoning/thought`` per step (``{"message": text}``; a step stored only encrypted
  has ``message: ""`` and ``encrypted_value``, the stored JWE, never decrypted here);
* a tool use as ``mcp/request`` (JSON-RPC 2.0, ``tools/call``, ``params`` ``name`` and
  ``arguments``) and, once its result is stored, the ``mcp/response`` correlated to it
  (``result.content`` text, ``isError``, ``structuredContent`` for object results);
* ``reasoning/conclusion``; then the answer as ``chat`` from ``alicia``, correlated to
  the user message.

JSON Lines, because MEW's own tools read and write envelopes one per line (the gateway's
``.mew/logs/envelope-history.jsonl``, stdio participants).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

from .turns import StoredConversation, StoredMessage, StoredStep, StoredToolUse, Turn, iso

__all__ = ["AGENT", "PROTOCOL", "USER", "dumps", "envelopes"]

PROTOCOL: Final = "mew/v0.4"
AGENT: Final = "alicia"
"""``from`` of the agent's envelopes."""
USER: Final = "user"
"""``from`` of the user's messages."""


def envelope(
    eid: str,
    at: dt.datetime,
    sender: str,
    kind: str,
    payload: dict[str, Any],
    *,
    correlation: str | None = None,
    context: str | None = None,
) -> dict[str, Any]:
    """One MEW envelope (broadcast: no ``to``)."""
    env: dict[str, Any] = {"protocol": PROTOCOL, "id": eid, "ts": iso(at), "from": sender}
    env["kind"] = kind
    if correlation is not None:
        env["correlation_id"] = [correlation]
    if context is not None:
        env["context"] = context
    env["payload"] = payload
    return env


def _chat(m: StoredMessage, sender: str, correlation: str | None = None) -> dict[str, Any]:
    payload = {"text": m.contents, "format": "plain"}
    return envelope(m.id, m.sent_at, sender, "chat", payload, correlation=correlation)


def _thought(step: StoredStep, context: str) -> dict[str, Any]:
    sealed = step.encrypted_value
    payload: dict[str, Any] = {"message": step.content}
    if sealed is not None:
        payload = {"message": "", "encrypted_value": sealed}
    return envelope(step.id, step.sent_at, AGENT, "reasoning/thought", payload, context=context)


def _tool(t: StoredToolUse, context: str) -> list[dict[str, Any]]:
    request = {
        "jsonrpc": "2.0",
        "id": t.id,
        "method": "tools/call",
        "params": {"name": t.name, "arguments": t.arguments},
    }
    out = [envelope(t.id, t.sent_at, AGENT, "mcp/request", request, context=context)]
    if t.finished:
        text = t.error_text() if t.failed else t.result_text()
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
        if isinstance(t.result, dict) and not t.failed:
            result["structuredContent"] = t.result
        result["isError"] = t.failed
        response = {"jsonrpc": "2.0", "id": t.id, "result": result}
        at = t.completed_at or t.sent_at
        out.append(
            envelope(
                f"{t.id}.result",
                at,
                AGENT,
                "mcp/response",
                response,
                correlation=t.id,
                context=context,
            )
        )
    return out


def _ends(turn: Turn) -> dt.datetime:
    times = [w.sent_at for w in turn.work]
    times += [t.completed_at for t in turn.tools if t.completed_at is not None]
    return max(times)


def _turn(turn: Turn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    question = turn.user.id if turn.user is not None else None
    if turn.user is not None:
        sender = "system" if turn.user.role == "system" else USER
        out.append(_chat(turn.user, sender))
    if turn.work:
        anchor = question or turn.answers[0].id
        start = f"{anchor}.reasoning"
        first = turn.work[0].sent_at
        out.append(
            envelope(start, first, AGENT, "reasoning/start", {"message": ""}, correlation=question)
        )
        for w in turn.work:
            if isinstance(w, StoredStep):
                out.append(_thought(w, start))
            else:
                out.extend(_tool(w, start))
        out.append(
            envelope(
                f"{anchor}.conclusion",
                _ends(turn),
                AGENT,
                "reasoning/conclusion",
                {"message": ""},
                context=start,
            )
        )
    out.extend(_chat(a, AGENT, question) for a in turn.answers)
    return out


def envelopes(conv: StoredConversation) -> list[dict[str, Any]]:
    """The conversation as MEW envelopes, in order."""
    return [env for turn in conv.turns for env in _turn(turn)]


def dumps(conv: StoredConversation) -> str:
    """The export file: JSON Lines, one envelope per line."""
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in envelopes(conv))
