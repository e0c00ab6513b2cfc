"""The narrow interface between the worker and persistence.

The worker hands every envelope it sends, and every valid one it receives, to a
:class:`StepSink`. ``submit`` never blocks and never raises because of the database:
persistence must not slow or break the realtime path. :class:`NullSink` is the sink
when persistence is off (no ``DATABASE_URL``): nothing is written anywhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, runtime_checkable

from alicia.protocol import Envelope

logger = logging.getLogger("alicia.storage")

__all__ = [
    "META_FIRST_REASONING_MS",
    "META_FROM",
    "META_SEALED",
    "META_SENT",
    "META_USAGE",
    "REMARK_TYPE",
    "STORAGE_ONLY_META",
    "ConversationStore",
    "Fenced",
    "MessageIndex",
    "NullSink",
    "SentRecord",
    "StepSink",
    "StoredConversation",
    "StoredMessage",
    "StoredTurn",
    "TurnState",
    "lookup_message",
]

META_USAGE: Final = "alicia.usage"
"""Meta key of a stored AssistantMessage (never sent): the turn's provider-reported token
counts, ``{"promptTokens", "completionTokens", "reasoningTokens"}`` summed over rounds."""
META_FIRST_REASONING_MS: Final = "alicia.firstReasoningMs"
"""Meta key of a stored AssistantMessage (never sent): milliseconds from the turn's first
LLM request to its first reasoning text."""
META_FROM: Final = "alicia.from"
"""Meta key of a stored UserMessage (never sent): the identity that sent it (its owner)."""
META_SENT: Final = "alicia.sent"
"""Meta key of a stored envelope (never sent), with failover on: how the envelope was
sent, for the sent log: ``{"to": [identity, …] | None (everyone), "level": str | None,
"data": bytes (as sent) | None, "sealed": str | None (those bytes sealed, under ZDR),
"rows": bool (also stored as table rows)}``."""
META_SEALED: Final = "alicia.sealed"
"""Meta key of a stored remark (never sent), under zero data retention: its text sealed
with the conversation's data key. The row keeps only that (``content`` NULL), whatever
the envelope's ``content`` holds."""
REMARK_TYPE: Final = "progress"
"""``commentType`` of an assistant Commentary that announces a spoken progress remark."""
STORAGE_ONLY_META: Final = (
    META_USAGE,
    META_FIRST_REASONING_MS,
    META_FROM,
    META_SENT,
    META_SEALED,
)
"""Meta keys that only the stored copy of an envelope carries."""


@dataclass(frozen=True, slots=True)
class SentRecord:
    """One logged server envelope: as sent, to whom, at which reasoning level."""

    stanza: int
    """``|stanzaId|``."""
    to: tuple[str, ...] | None
    """Recipients; None = every client in the room."""
    level: str | None
    """The reasoning level of a ReasoningStep rendition (None for other types)."""
    data: bytes | None
    """The envelope's bytes as sent (None when only ``sealed`` is kept)."""
    sealed: str | None = None
    """The bytes, base64 and sealed with the conversation's data key (zero data retention)."""


TurnState = Literal["complete", "streaming", "missing", "failed"]
"""What became of a stored turn's answer: finished; begun (StartAnswer) and cut; never
begun; closed as partial."""


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One turn as storage holds it (for the agent that takes a conversation over)."""

    user_id: str
    user_text: str
    requester: str | None
    answer_id: str | None
    answer_text: str
    state: TurnState
    sentences: int = 0
    """The highest AssistantSentence ``sequence`` stored for the answer."""


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """What a conversation left in storage."""

    last_stanza: int
    """``|stanzaId|`` of the last server envelope logged (0: none)."""
    turns: Sequence[StoredTurn] = field(default_factory=tuple)
    """Its last turns, oldest first."""


class Fenced(Exception):
    """This agent no longer holds the conversation (another agent took it over): it must
    store and send nothing more, and leave."""


@runtime_checkable
class ConversationStore(Protocol):
    """Storage an agent can take a conversation over from (failover)."""

    async def durable(self) -> None:
        """Return once everything submitted so far is stored; :class:`Fenced` once the
        agent's writes are refused because another agent took the conversation over."""
        ...

    async def load_conversation(self, conversation_id: str, *, limit: int) -> StoredConversation:
        """The conversation's last logged stanza and its last ``limit`` turns."""
        ...

    async def sent_after(self, conversation_id: str, after: int, *, limit: int) -> list[SentRecord]:
        """Logged server envelopes with ``|stanzaId| > after``, in order (at most ``limit``)."""
        ...


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A stored message's id is taken: by whom, in which conversation, as what."""

    conversation_id: str
    role: str
    """``user`` or ``assistant``."""
    owner: str | None
    """User messages: the identity that sent it (None when it was not recorded)."""


@runtime_checkable
class MessageIndex(Protocol):
    """Storage that can say whether a message id is taken (ids are unique everywhere)."""

    async def index_ready(self) -> None:
        """Return once look-ups can be served (a fresh process may first check the
        schema: not a look-up, and slow on a busy machine); raise if they cannot be."""
        ...

    async def stored_message(self, message_id: str) -> StoredMessage | None:
        """The stored message with ``message_id`` (None: the id is free)."""
        ...


@runtime_checkable
class StepSink(Protocol):
    """Where protocol traffic goes to be stored."""

    def submit(self, env: Envelope[Any]) -> None:
        """Queue ``env`` for storage and return at once (direction = sign of stanzaId)."""
        ...

    async def last_step_index(self, previous_id: str) -> int:
        """The highest stored ``stepIndex`` of ``previous_id``'s chain (0 if none)."""
        ...

    async def aclose(self) -> None:
        """Flush what can be flushed (or spill it) and release resources."""
        ...


class NullSink:
    """Persistence off: accepts everything, stores nothing."""

    def submit(self, env: Envelope[Any]) -> None:
        """Drop ``env``."""

    async def last_step_index(self, previous_id: str) -> int:
        """Always 0: nothing is stored."""
        return 0

    async def aclose(self) -> None:
        """Nothing to release."""


LOOKUP_TIMEOUT_S: Final = 1.0
"""Longest wait for storage to say whether a message id is taken."""
READY_TIMEOUT_S: Final = 10.0
"""Longest wait for storage to be ready for look-ups (once per process and database:
the schema check a fresh job process makes, which took over a second on a loaded machine
and then let a taken id through unchecked)."""
LOOKUP_PAUSE_S: Final = 5.0
"""After a failed look-up, ids are not checked in that storage for this long (a database
outage costs each message nothing, not a timeout each)."""
_paused: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()


async def lookup_message(sink: object, message_id: str) -> StoredMessage | None:
    """Who holds ``message_id`` in storage; None when it is free, or when storage keeps
    no index, is not ready within :data:`READY_TIMEOUT_S` or does not answer within
    :data:`LOOKUP_TIMEOUT_S` (logged, and not asked again for :data:`LOOKUP_PAUSE_S`: a
    database outage never stops a conversation)."""
    if not isinstance(sink, MessageIndex) or _paused.get(sink, 0.0) > time.monotonic():
        return None
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await sink.index_ready()
        async with asyncio.timeout(LOOKUP_TIMEOUT_S):
            return await sink.stored_message(message_id)
    except Exception as exc:
        _paused[sink] = time.monotonic() + LOOKUP_PAUSE_S
        logger.warning("message ids not checked in storage", extra={"error": repr(exc)})
        return None
