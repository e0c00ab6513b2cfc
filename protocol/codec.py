"""MessagePack encoding and validated decoding of envelopes.

``encode(Envelope) -> bytes`` and ``decode(bytes) -> Envelope`` run on codec objects
built once at import (msgspec's typed MessagePack codec; see ``bench/codec.py`` for
the measurement that chose it over ``msgpack`` + dict conversion).

Decoding is two-step (envelope with a raw body, then the body by its ``type``):

* fast path: the raw body is decoded straight into its Struct, which forbids unknown
  keys; a conformant body (our own encoder's output) never leaves this path;
* slow path, taken only when the fast path fails: the body is read as a map, ``nil``
  values are dropped (nil = absent), alias keys are mapped to primary keys, unknown
  keys are dropped, and the result is validated into the Struct. Errors from this
  path are final and name the offending field.

An unknown ``type`` code decodes to an :class:`UnknownBody` and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec

from .envelope import Envelope
from .errors import (
    DecodeError,
    EncodeError,
    PacketTooLargeError,
    ProtocolError,
    Severity,
    ValidationError,
)
from .messages import (
    BODY_TYPES,
    Body,
    ErrorMessage,
    Int32,
    MessageType,
    UInt16,
    UnknownBody,
)

__all__ = [
    "DATA_TOPIC",
    "MAX_PACKET_BYTES",
    "TEXT_BUDGET_BYTES",
    "decode",
    "encode",
    "error_body",
    "split_text",
]

DATA_TOPIC: Final = "alicia"
"""LiveKit data-packet topic our envelopes travel on (a transport choice; see DECISIONS.md)."""

MAX_PACKET_BYTES: Final = 15 * 1024
"""Largest encoded envelope we send: one reliable LiveKit data packet (15 KiB)."""

TEXT_BUDGET_BYTES: Final = MAX_PACKET_BYTES - 1024
"""UTF-8 bytes of text per ReasoningStep/AssistantSentence, leaving 1 KiB for the rest."""


class _EnvelopeIn(msgspec.Struct, kw_only=True, rename="camel"):
    stanza_id: Int32
    type: UInt16
    body: msgspec.Raw
    conversation_id: str | None = None
    meta: dict[str, Any] | None = None


_encoder: Final = msgspec.msgpack.Encoder()
_envelope_decoder: Final = msgspec.msgpack.Decoder(_EnvelopeIn)
_any_decoder: Final = msgspec.msgpack.Decoder()
_body_decoders: Final[dict[int, msgspec.msgpack.Decoder[Any]]] = {
    int(code): msgspec.msgpack.Decoder(cls) for code, cls in BODY_TYPES.items()
}
_code_of: Final[dict[type[Any], int]] = {cls: int(code) for code, cls in BODY_TYPES.items()}
_wire_fields: Final[dict[int, frozenset[str]]] = {
    int(code): frozenset(cls.__struct_encode_fields__) for code, cls in BODY_TYPES.items()
}
_required_nullable: Final[dict[int, tuple[str, ...]]] = {
    int(MessageType.COMMENTARY): ("targetId",),  # nil/absent = the whole conversation
}


# --- alias tables (PROTOCOL.md §3 "Aliases") -----------------------------------------


def _same(v: Any) -> Any:
    return v


def _zero_based(v: Any) -> Any:
    # ``sequence`` for ReasoningStep is seen 0-based; stepIndex is 1-based.
    return v + 1 if isinstance(v, int) and not isinstance(v, bool) else v


_SEVERITY_NAMES: Final = {s.name.lower(): int(s) for s in Severity}


def _severity(v: Any) -> Any:
    return _SEVERITY_NAMES.get(v.lower(), v) if isinstance(v, str) else v


def _stringify_int(v: Any) -> Any:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


_Alias = tuple[str, str, Callable[[Any], Any]]  # (alias key, primary key, value transform)
_ALIASES: Final[dict[int, tuple[_Alias, ...]]] = {
    MessageType.ERROR_MESSAGE: (("content", "message", _same),),
    MessageType.AUDIO_CHUNK: (("sequence", "seq", _same), ("durationMs", "duration", _same)),
    MessageType.REASONING_STEP: (
        ("messageId", "previousId", _same),
        ("sequence", "stepIndex", _zero_based),
    ),
    MessageType.TOOL_USE_REQUEST: (("messageId", "previousId", _same),),
    MessageType.TOOL_USE_RESULT: (("data", "result", _same), ("error", "errorMessage", _same)),
    MessageType.TRANSCRIPTION: (("isFinal", "final", _same),),
    MessageType.MEMORY_TRACE: (
        ("messageId", "previousId", _same),
        ("relevance", "confidence", _same),
        ("usage", "action", _same),
    ),
    MessageType.COMMENTARY: (
        ("messageId", "targetId", _same),
        ("previousId", "targetId", _same),
        ("commentaryType", "commentType", _same),
    ),
}
_VALUE_FIXES: Final[dict[int, tuple[tuple[str, Callable[[Any], Any]], ...]]] = {
    MessageType.ERROR_MESSAGE: (("severity", _severity), ("originatingId", _stringify_int)),
}


def _normalise(code: int, fields: dict[Any, Any]) -> dict[str, Any]:
    """Drop nils, map aliases to primary keys, apply value fixes, drop unknown keys."""
    body = {k: v for k, v in fields.items() if v is not None and isinstance(k, str)}
    for alias, primary, fix in _ALIASES.get(code, ()):
        if alias in body and primary not in body:
            body[primary] = fix(body[alias])
    for key, fix in _VALUE_FIXES.get(code, ()):
        if key in body:
            body[key] = fix(body[key])
    known = _wire_fields[code]
    out = {k: v for k, v in body.items() if k in known}
    for key in _required_nullable.get(code, ()):
        out.setdefault(key, None)
    return out


def _validation_error(cls: type[Any], exc: msgspec.ValidationError) -> ValidationError:
    text = str(exc).replace("`$", "`$.body", 1)
    if "`$.body" not in text:
        text += " - at `$.body`"
    return ValidationError(f"{cls.__name__}: {text}")


def _decode_body(code: int, raw: msgspec.Raw) -> Body | UnknownBody:
    decoder = _body_decoders.get(code)
    if decoder is None:
        try:
            return UnknownBody(code, _any_decoder.decode(raw))
        except msgspec.DecodeError as exc:
            raise DecodeError(f"malformed body of unknown type {code}: {exc}") from exc
    try:
        body: Body = decoder.decode(raw)
        return body
    except msgspec.ValidationError:
        pass  # alias, nil, extension key or real error: take the slow path
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed body: {exc}") from exc
    cls = BODY_TYPES[MessageType(code)]
    try:
        fields = _any_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed body: {exc}") from exc
    if not isinstance(fields, dict):
        raise ValidationError(
            f"{cls.__name__}: Expected `object`, got `{type(fields).__name__}` - at `$.body`"
        )
    try:
        return msgspec.convert(_normalise(code, fields), cls)
    except msgspec.ValidationError as exc:
        raise _validation_error(cls, exc) from exc


def decode(data: bytes | bytearray | memoryview) -> Envelope[Any]:
    """Decode and validate one envelope.

    Raises :class:`~protocol.errors.DecodeError` for bytes that are not a MessagePack
    envelope and :class:`~protocol.errors.ValidationError` for a missing, ill-typed or
    out-of-range field. An unknown ``type`` yields a body of :class:`UnknownBody`.
    """
    try:
        head = _envelope_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"Envelope: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a MessagePack envelope: {exc}") from exc
    return Envelope(
        stanza_id=head.stanza_id,
        conversation_id=head.conversation_id or "",
        type=head.type,
        body=_decode_body(head.type, head.body),
        meta=head.meta,
    )


def encode(env: Envelope[Any]) -> bytes:
    """Encode an envelope to MessagePack bytes (primary keys only, absent fields omitted).

    Raises :class:`~protocol.errors.EncodeError` if ``type`` does not match the body,
    a value cannot be encoded or ``stanzaId`` is outside int32, and
    :class:`~protocol.errors.PacketTooLargeError` above :data:`MAX_PACKET_BYTES`.
    """
    body = env.body
    expected = _code_of.get(type(body))
    if expected is None:
        if not isinstance(body, UnknownBody):
            raise EncodeError(f"not a protocol body: {type(body).__name__}")
        expected = body.type_code
    if env.type != expected:
        raise EncodeError(f"envelope type {env.type} does not match body {type(body).__name__}")
    if not -(2**31) <= env.stanza_id < 2**31:
        raise EncodeError(f"stanzaId {env.stanza_id} is outside int32")
    try:
        if isinstance(body, UnknownBody):
            data = _encoder.encode(
                {
                    "stanzaId": env.stanza_id,
                    "conversationId": env.conversation_id,
                    "type": env.type,
                    **({"meta": env.meta} if env.meta is not None else {}),
                    "body": body.fields,
                }
            )
        else:
            data = _encoder.encode(env)
    except (TypeError, OverflowError, msgspec.EncodeError) as exc:
        raise EncodeError(f"cannot encode {type(body).__name__}: {exc}") from exc
    if len(data) > MAX_PACKET_BYTES:
        raise PacketTooLargeError(len(data), MAX_PACKET_BYTES)
    return data


def split_text(text: str, max_bytes: int = TEXT_BUDGET_BYTES) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_bytes`` UTF-8 bytes at word boundaries.

    Each cut falls after a run of whitespace when one exists in the piece (a single
    word longer than the budget is cut between characters). ``"".join(pieces) == text``.
    """
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4 (one UTF-8 character)")
    if len(text.encode()) <= max_bytes:
        return [text]
    pieces: list[str] = []
    rest = text
    while rest:
        raw = rest.encode()
        if len(raw) <= max_bytes:
            pieces.append(rest)
            break
        # Longest prefix within the budget, on a character boundary.
        head = raw[:max_bytes].decode("utf-8", errors="ignore")
        cut = len(head)
        # Prefer to cut right after the last whitespace in that prefix.
        for i in range(cut - 1, 0, -1):
            if head[i].isspace():
                cut = i + 1
                break
        pieces.append(rest[:cut])
        rest = rest[cut:]
    return pieces


def error_body(
    exc: ProtocolError,
    *,
    id: str,
    conversation_id: str,
    originating_id: str | None = None,
) -> ErrorMessage:
    """The ErrorMessage body that reports ``exc`` to the peer that caused it."""
    return ErrorMessage(
        id=id,
        conversation_id=conversation_id,
        code=int(exc.code),
        message=str(exc),
        severity=exc.severity,
        recoverable=exc.recoverable,
        originating_id=originating_id,
    )
