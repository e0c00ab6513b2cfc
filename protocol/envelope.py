"""The envelope that wraps every body on the wire, and the meta key names."""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

import msgspec

from .messages import BODY_TYPES, Body, Int32, MessageType, UInt16, UnknownBody

__all__ = [
    "META_CLIENT_VERSION",
    "META_SPAN_ID",
    "META_TIMESTAMP",
    "META_TRACE_ID",
    "Envelope",
    "envelope",
    "type_code_of",
]

META_TIMESTAMP: Final = "timestamp"
META_CLIENT_VERSION: Final = "clientVersion"
META_TRACE_ID: Final = "messaging.trace_id"
META_SPAN_ID: Final = "messaging.span_id"

B = TypeVar("B", bound=Body | UnknownBody)

_CODE_OF: Final[dict[type[Any], MessageType]] = {cls: code for code, cls in BODY_TYPES.items()}


class Envelope(
    msgspec.Struct,
    Generic[B],
    kw_only=True,
    frozen=True,
    rename="camel",
    omit_defaults=True,
):
    """``{stanzaId, conversationId, type, meta, body}`` (PROTOCOL.md §1.2).

    Build one with :func:`envelope`, which fills ``type`` from the body's class.
    """

    stanza_id: Int32
    conversation_id: str
    type: UInt16
    body: B
    meta: dict[str, Any] | None = None


def type_code_of(body: Body) -> MessageType:
    """The wire type code of a body instance; ``KeyError`` if it is not a protocol body."""
    return _CODE_OF[type(body)]


def envelope(
    body: B,
    *,
    stanza_id: int,
    conversation_id: str,
    meta: dict[str, Any] | None = None,
) -> Envelope[B]:
    """Wrap ``body`` in an envelope with the matching ``type`` code."""
    code = body.type_code if isinstance(body, UnknownBody) else _CODE_OF[type(body)]
    return Envelope(
        stanza_id=stanza_id, conversation_id=conversation_id, type=code, body=body, meta=meta
    )
