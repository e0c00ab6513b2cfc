"""Queued envelopes -> table rows: the pure half of the storage writer.

:func:`build_rows` groups one batch by table. Every row is keyed by its protocol id;
rows a record refers to (its conversation, the message its ``previousId`` names) are
listed as placeholders so the batch can be written on its own, in any order relative
to other batches. Text is made storable (no NUL, no lone surrogates), JSON values
JSON-safe, so the database refuses as little as possible.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from alicia.agent.engine.sink import (
    META_FIRST_REASONING_MS,
    META_FROM,
    META_SEALED,
    META_SENT,
    META_USAGE,
    REMARK_TYPE,
)
from alicia.protocol import (
    AssistantMessage,
    AssistantSentence,
    Commentary,
    Configuration,
    ControlStop,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    UnknownBody,
    UserMessage,
)

from .spill import Item

__all__ = ["Rows", "build_rows", "join_sentences"]


_UTC: Final = dt.UTC

_NUL: Final = "\x00"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _text(s: str) -> str:
    """Storable text: NUL (PostgreSQL text cannot hold it) and lone surrogates (not
    UTF-8) become U+FFFD, so the record is kept instead of refused."""
    if _NUL in s:
        s = s.replace(_NUL, "\ufffd")
    if not s.isascii():
        try:
            s.encode()
        except UnicodeEncodeError:
            s = _SURROGATE.sub("\ufffd", s)
    return s


def _json(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy: NUL-free strings, bytes as base64, non-finite floats as null."""
    if depth > 64:
        return None
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {_text(str(k)): _json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v, depth + 1) for v in value]
    if isinstance(value, msgspec.Struct):
        return _json(msgspec.to_builtins(value), depth + 1)
    return _text(str(value))


def join_sentences(texts: Sequence[str]) -> str:
    """Chunks joined as one answer: a space only where neither side has whitespace."""
    out: list[str] = []
    for t in texts:
        if out and t and out[-1] and not out[-1][-1].isspace() and not t[0].isspace():
            out.append(" ")
        out.append(t)
    return "".join(out)


def _model_of(env: Envelope[Any]) -> str | None:
    meta = env.meta
    if not meta:
        return None
    model = meta.get("model")
    return _text(model) if isinstance(model, str) and model else None


_INT_MAX: Final = 2**31 - 1
"""Largest value of an ``INTEGER`` column (PostgreSQL ``int4``)."""
_USAGE_KEYS: Final = (
    ("promptTokens", "b_prompt"),
    ("completionTokens", "b_completion"),
    ("reasoningTokens", "b_reasoning"),
)


def _count(value: Any) -> int | None:
    """A token count as stored: an int in ``[0, 2**31 - 1]``, else None."""
    if type(value) is int and 0 <= value <= _INT_MAX:
        return value
    return None


def _millis(value: Any) -> float | None:
    """A duration as stored: a finite number >= 0, else None."""
    if type(value) not in (int, float):  # not bool, not a numeric string
        return None
    try:
        ms = float(value)
    except OverflowError:  # an int beyond float range
        return None
    return ms if math.isfinite(ms) and ms >= 0 else None


def _figures(mid: str, meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The answer's token usage and time to first reasoning from the storage-only meta
    keys of :mod:`alicia.agent.engine.sink`, as UPDATE parameters; None if there is none.

    Each figure is checked on its own: a malformed one is left out (NULL, or the value
    already stored), never raised about, so the record itself is always stored.
    """
    if not isinstance(meta, dict) or not meta:
        return None
    usage = meta.get(META_USAGE)
    if not isinstance(usage, dict):
        usage = {}
    params: dict[str, Any] = {"b_id": mid}
    for key, param in _USAGE_KEYS:
        params[param] = _count(usage.get(key))
    params["b_first_reasoning_ms"] = _millis(meta.get(META_FIRST_REASONING_MS))
    if all(v is None for k, v in params.items() if k != "b_id"):
        return None
    return params


def _tool_status(result: ToolUseResult) -> str:
    if result.success:
        return "success"
    code = (result.error_code or "").lower()
    return "cancelled" if code in ("tool_cancelled", "cancelled") else "error"


@dataclass(slots=True)
class Rows:
    """The rows of one batch, grouped by table, ready to be written in one transaction."""

    convs: dict[str, list[Any]] = field(default_factory=dict)
    """conversation id -> [max client stanza | None, min server stanza | None, prefs | None]."""
    holders: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    sentences: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    tool_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    tool_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    stops: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[dict[str, Any]] = field(default_factory=list)
    """AssistantMessages with ``state: partial``: the answer is marked failed."""
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    """answer id -> its token usage / time to first reasoning (UPDATE parameters), from
    the meta of its AssistantMessage or (streamed) AssistantSentence; the first wins."""
    final_seen: set[str] = field(default_factory=set)
    sent: list[dict[str, Any]] = field(default_factory=list)
    """``alicia_sent_log`` rows (failover: envelopes as sent)."""
    remarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``alicia_remarks`` rows by Commentary id (the first of the batch wins)."""

    def conv(self, cid: str) -> list[Any]:
        c = self.convs.get(cid)
        if c is None:
            c = self.convs[cid] = [None, None, None]
        return c

    def figure(self, mid: str, meta: dict[str, Any] | None) -> None:
        if mid not in self.figures:
            params = _figures(mid, meta)
            if params is not None:
                self.figures[mid] = params

    def holder(self, mid: str, cid: str, role: str, at: dt.datetime) -> None:
        if mid not in self.holders:
            self.conv(cid)
            self.holders[mid] = {
                "id": mid,
                "conversation_id": cid,
                "sequence_number": 0,
                "message_role": role,
                "contents": "",
                "completion_status": "pending",
                "placeholder": True,
                "sent_at": at,
            }

    def message(
        self,
        env: Envelope[Any],
        at: dt.datetime,
        *,
        mid: str,
        cid: str,
        previous: str | None,
        role: str,
        contents: str,
        status: str,
        completed: dt.datetime | None,
        model: str | None,
        participant: str | None = None,
    ) -> None:
        self.holder(mid, cid, role, at)
        if previous:
            self.holder(previous, cid, "assistant" if role == "user" else "user", at)
        if mid in self.messages:
            return
        self.messages[mid] = {
            "id": mid,
            "conversation_id": cid,
            "sequence_number": abs(env.stanza_id),
            "previous_id": previous or None,
            "message_role": role,
            "contents": _text(contents),
            "completion_status": status,
            "placeholder": False,
            "model": model,
            "sent_at": at,
            "completed_at": completed,
            "participant": participant,
        }


def build_rows(items: Iterable[Item]) -> Rows:
    """Group queued envelopes into table rows (pure; envelopes that store nothing only
    update their conversation's stanza marks)."""
    rows = Rows()
    for item in items:
        env = item.env
        body = env.body
        kind = type(body)
        if kind is UnknownBody:
            continue
        cid_env = env.conversation_id
        if cid_env:
            c = rows.conv(cid_env)
            sid = env.stanza_id
            if sid > 0:
                if c[0] is None or sid > c[0]:
                    c[0] = sid
            elif sid < 0 and (c[1] is None or sid < c[1]):
                c[1] = sid
        at = dt.datetime.fromtimestamp(item.at, _UTC)
        sent = env.meta.get(META_SENT) if env.meta else None
        if isinstance(sent, dict) and cid_env:
            rows.sent.append(_sent_row(cid_env, env.stanza_id, sent, at))
            if not sent.get("rows", True):
                continue  # another rendition of a stored envelope: the log only
        if kind is ReasoningStep:
            cid = body.conversation_id or cid_env
            rows.conv(cid)
            rows.holder(body.previous_id, cid, "user", at)
            rows.steps.append(
                (
                    body.id,
                    body.previous_id,
                    cid,
                    # Under zero data retention the agent stores the step only encrypted.
                    _text(body.content or body.encrypted_value or ""),
                    body.step_index,
                    body.total_steps,
                    at,
                )
            )
        elif kind is UserMessage or (kind is Transcription and body.final):
            rows.message(
                env,
                at,
                mid=body.id,
                cid=body.conversation_id or cid_env,
                previous=body.previous_id,
                role="user",
                contents=body.content if kind is UserMessage else body.text,
                status="completed",
                completed=at,
                model=None,
                participant=_participant(env.meta),
            )
        elif kind is StartAnswer:
            rows.message(
                env,
                at,
                mid=body.id,
                cid=body.conversation_id or cid_env,
                previous=body.previous_id,
                role="assistant",
                contents="",
                status="streaming",
                completed=None,
                model=_model_of(env),
            )
        elif kind is AssistantMessage:
            rows.message(
                env,
                at,
                mid=body.id,
                cid=body.conversation_id or cid_env,
                previous=body.previous_id,
                role="assistant",
                contents=body.content,
                status="failed" if body.state == "partial" else "completed",
                completed=at,
                model=_model_of(env),
            )
            if body.state == "partial":
                rows.incomplete.append({"b_id": body.id, "b_at": at})
            rows.figure(body.id, env.meta)
        elif kind is AssistantSentence:
            cid = body.conversation_id or cid_env
            rows.holder(body.previous_id, cid, "assistant", at)
            key = (body.previous_id, body.sequence)
            if body.is_final:
                rows.final_seen.add(body.previous_id)
            rows.figure(body.previous_id, env.meta)
            if key not in rows.sentences:
                rows.sentences[key] = {
                    "message_id": body.previous_id,
                    "sentence_sequence_number": body.sequence,
                    "id": body.id,
                    "text": _text(body.text),
                    "is_final": bool(body.is_final),
                    "sent_at": at,
                }
        elif kind is ToolUseRequest:
            cid = body.conversation_id or cid_env
            mid = body.previous_id or item.turn or f"{cid}:unknown-turn"
            rows.conv(cid)
            rows.holder(mid, cid, "user", at)
            if body.id not in rows.tool_requests:
                rows.tool_requests[body.id] = {
                    "id": body.id,
                    "message_id": mid,
                    "conversation_id": cid,
                    "tool_name": _text(body.tool_name),
                    "tool_arguments": _json(body.parameters),
                    "status": "running" if body.execution == "server" else "pending",
                    "execution": body.execution,
                    "sent_at": at,
                }
        elif kind is ToolUseResult:
            rows.tool_results[body.request_id] = {
                "b_id": body.request_id,
                "status": _tool_status(body),
                "tool_result": _json(body.result),
                "error_code": _text(body.error_code) if body.error_code else None,
                "error_message": _text(body.error_message) if body.error_message else None,
                "completed_at": at,
            }
        elif kind is ControlStop and cid_env and body.target_id not in rows.final_seen:
            # Stops apply before this batch's sentences; one aimed at an answer whose
            # final sentence came earlier in the batch arrived too late to stop it.
            rows.stops.append({"b_conv": cid_env, "b_target": body.target_id, "b_at": at})
        elif kind is Configuration and env.stanza_id > 0 and cid_env:
            prefs = {
                "features": body.features,
                "preferredLanguage": body.preferred_language,
                "device": body.device,
                "clientVersion": body.client_version,
                "enableReordering": body.enable_reordering,
            }
            rows.conv(cid_env)[2] = _json({k: v for k, v in prefs.items() if v is not None})
        elif (
            kind is Commentary
            and body.author_role == "assistant"
            and body.comment_type == REMARK_TYPE
            and env.stanza_id <= 0  # sent by the agent: a client cannot make one up
        ):
            cid = body.conversation_id or cid_env
            if cid and body.id not in rows.remarks:
                rows.conv(cid)
                rows.remarks[body.id] = _remark_row(body, cid, env, at)
    return rows


def _remark_row(body: Commentary, cid: str, env: Envelope[Any], at: dt.datetime) -> dict[str, Any]:
    """An ``alicia_remarks`` row: the spoken text, or under zero data retention (meta
    :data:`META_SEALED`) only its sealed value, never the plaintext."""
    meta = env.meta
    if meta and META_SEALED in meta:
        sealed = meta[META_SEALED]
        content, kept = None, _text(sealed) if isinstance(sealed, str) else None
    else:
        content, kept = _text(body.content), None
    return {
        "id": body.id,
        "conversation_id": cid,
        "target_id": _text(body.target_id) if body.target_id else None,
        "sequence_number": abs(env.stanza_id),
        "content": content,
        "sealed": kept,
        "spoken_at": _epoch_ms(body.timestamp) or at,
        "sent_at": at,
    }


def _epoch_ms(value: Any) -> dt.datetime | None:
    """A ``timestamp`` (ms since the epoch) as an aware UTC time; None if unusable."""
    if type(value) is not int or value <= 0:
        return None
    try:
        return dt.datetime.fromtimestamp(value / 1000, _UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _participant(meta: dict[str, Any] | None) -> str | None:
    value = meta.get(META_FROM) if meta else None
    return value if isinstance(value, str) else None


def _sent_row(cid: str, stanza_id: int, sent: dict[str, Any], at: dt.datetime) -> dict[str, Any]:
    """An ``alicia_sent_log`` row from a stored envelope's ``alicia.sent`` meta."""
    to = sent.get("to")
    data = sent.get("data")
    sealed = sent.get("sealed")
    level = sent.get("level")
    return {
        "conversation_id": cid,
        "stanza": abs(stanza_id),
        "recipients": [str(i) for i in to] if isinstance(to, list | tuple) else None,
        "level": level if isinstance(level, str) else None,
        "data": bytes(data) if isinstance(data, bytes | bytearray) else None,
        "sealed": sealed if isinstance(sealed, str) else None,
        "sent_at": at,
    }
