"""A stored conversation as turns, in conversation order (pure: no database here).

:func:`build_turns` groups a conversation's live rows: each user message opens a turn,
with the reasoning steps and tool uses that name it (``message_id``) interleaved by
``sent_at``, then the answers whose ``previous_id`` is it. An answer with no live user
message is a turn of its own; steps and tool uses of a deleted message are left out with it.

Under zero data retention a step's ``content`` column holds the step sealed with the
conversation's data key (JWE compact). Nothing here decrypts: :attr:`StoredStep.text` is
``None`` for such a step and :attr:`StoredStep.encrypted_value` is the stored value.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FINISHED",
    "StoredConversation",
    "StoredMessage",
    "StoredStep",
    "StoredToolUse",
    "Turn",
    "Work",
    "build_turns",
    "is_sealed",
    "iso",
    "utc",
]

FINISHED = frozenset({"success", "error", "cancelled"})
"""Tool use statuses that mean a ToolUseResult was stored."""


def utc(value: dt.datetime) -> dt.datetime:
    """An aware UTC datetime (SQLite gives naive UTC ones back)."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def iso(value: dt.datetime) -> str:
    """RFC 3339 in UTC with a ``Z``: ``2025-03-01T12:00:00.100000Z``."""
    return utc(value).isoformat().replace("+00:00", "Z")


def is_sealed(content: str) -> bool:
    """True if ``content`` is a JWE compact value (a step stored under zero data retention)."""
    parts = content.split(".")
    if len(parts) != 5 or not content.startswith("eyJ"):
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(header, dict) and "alg" in header and "enc" in header


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A row of ``alicia_messages``."""

    id: str
    role: str
    contents: str
    status: str
    previous_id: str | None
    sequence_number: int
    sent_at: dt.datetime
    row: dict[str, Any] = field(repr=False)


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A row of ``alicia_reasoning_steps``."""

    id: str
    message_id: str
    index: int
    content: str
    sent_at: dt.datetime
    row: dict[str, Any] = field(repr=False)

    @property
    def sealed(self) -> bool:
        """Stored only encrypted (zero data retention)."""
        return is_sealed(self.content)

    @property
    def text(self) -> str | None:
        """The step's plaintext; ``None`` when it is stored only encrypted."""
        return None if self.sealed else self.content

    @property
    def encrypted_value(self) -> str | None:
        """The stored JWE of a step kept only encrypted, else ``None``."""
        return self.content if self.sealed else None


@dataclass(frozen=True, slots=True)
class StoredToolUse:
    """A row of ``alicia_tool_uses``: a ToolUseRequest and its result once stored."""

    id: str
    message_id: str
    name: str
    arguments: dict[str, Any]
    result: Any
    status: str
    error_code: str | None
    error_message: str | None
    sequence_number: int
    sent_at: dt.datetime
    completed_at: dt.datetime | None
    row: dict[str, Any] = field(repr=False)

    @property
    def finished(self) -> bool:
        """A result was stored (success, error or cancelled)."""
        return self.status in FINISHED

    @property
    def failed(self) -> bool:
        """The stored result is an error or a cancellation."""
        return self.status in ("error", "cancelled")

    def result_text(self) -> str:
        """The result as text: JSON of the stored result, ``""`` when there is none."""
        return "" if self.result is None else json.dumps(self.result, ensure_ascii=False)

    def error_text(self) -> str:
        """Why the tool failed: the stored message, else its code, else the status."""
        return self.error_message or self.error_code or self.status


Work = StoredStep | StoredToolUse
"""What happens inside a turn between its user message and its answer."""


@dataclass(frozen=True, slots=True)
class Turn:
    """A user message, its steps and tool uses in time order, then its answers."""

    user: StoredMessage | None
    work: tuple[Work, ...]
    answers: tuple[StoredMessage, ...]

    @property
    def steps(self) -> tuple[StoredStep, ...]:
        """The turn's reasoning steps, in order."""
        return tuple(w for w in self.work if isinstance(w, StoredStep))

    @property
    def tools(self) -> tuple[StoredToolUse, ...]:
        """The turn's tool uses, in order."""
        return tuple(w for w in self.work if isinstance(w, StoredToolUse))


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """One conversation's live rows, as turns in conversation order."""

    id: str
    row: dict[str, Any] = field(repr=False)
    turns: tuple[Turn, ...]


def _work_key(w: Work) -> tuple[dt.datetime, int, int, str]:
    return (w.sent_at, 0 if isinstance(w, StoredStep) else 1, _seq(w), w.id)


def _seq(w: Work) -> int:
    return w.index if isinstance(w, StoredStep) else w.sequence_number


def build_turns(
    msgs: Iterable[StoredMessage], steps: Iterable[StoredStep], tools: Iterable[StoredToolUse]
) -> tuple[Turn, ...]:
    """Group live rows into turns in conversation order (see the module docstring)."""
    ordered = sorted(msgs, key=lambda m: (m.sent_at, m.sequence_number, m.id))
    opened: dict[str, tuple[StoredMessage | None, list[Work], list[StoredMessage]]] = {}
    order: list[tuple[tuple[dt.datetime, int, str], str]] = []
    for m in ordered:
        if m.role != "assistant":
            opened[m.id] = (m, [], [])
            order.append(((m.sent_at, m.sequence_number, m.id), m.id))
    owner: dict[str, str] = {uid: uid for uid in opened}
    for m in ordered:
        if m.role != "assistant":
            continue
        if m.previous_id is not None and m.previous_id in opened:
            opened[m.previous_id][2].append(m)
            owner[m.id] = m.previous_id
        else:
            opened[m.id] = (None, [], [m])
            owner[m.id] = m.id
            order.append(((m.sent_at, m.sequence_number, m.id), m.id))
    rows: list[Work] = [*steps, *tools]
    for w in rows:
        key = owner.get(w.message_id)
        if key is not None:
            opened[key][1].append(w)
    turns = []
    for _, key in sorted(order):
        user, work, answers = opened[key]
        turns.append(Turn(user, tuple(sorted(work, key=_work_key)), tuple(answers)))
    return tuple(turns)
