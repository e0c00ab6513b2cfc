"""The stored rows themselves, one JSON object per line, in conversation order.

The first line is the conversation (``alicia_conversations``); then, per turn, the user
message, its reasoning steps and tool uses in time order, and its answers. Each object is
``{"record": "conversation" | "message" | "reasoning_step" | "tool_use", <column>: value,
…}`` with every column of the row as stored (timestamps as RFC 3339 UTC, JSON columns as
JSON). A step stored under zero data retention keeps its ``content`` as stored: the JWE.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import uuid
from collections.abc import Iterator
from typing import Any

from .turns import StoredConversation, StoredStep, iso

__all__ = ["dumps", "records"]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return iso(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _record(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    return {"record": kind, **{k: _plain(v) for k, v in row.items()}}


def records(conv: StoredConversation) -> Iterator[dict[str, Any]]:
    """Every live row of the conversation as a plain JSON object, in order."""
    yield _record("conversation", conv.row)
    for turn in conv.turns:
        if turn.user is not None:
            yield _record("message", turn.user.row)
        for w in turn.work:
            yield _record("reasoning_step" if isinstance(w, StoredStep) else "tool_use", w.row)
        for answer in turn.answers:
            yield _record("message", answer.row)


def dumps(conv: StoredConversation) -> str:
    """The export file: JSON Lines, one row per line."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records(conv))
