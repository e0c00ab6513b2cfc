"""MessagePack encoding and validated decoding of envelopes.

``encode(Envelope) -> bytes`` and ``decode(bytes) -> Envelope`` run on codec objects
built once at import (msgspec's typed MessagePack codec; see ``bench/codec.py`` for
the measurement that chose it over ``msgpack`` + dict conversion).

Decoding is two-step (envelope with a raw body, then the body by its ``type``):

* fast path: the raw body is decoded straight into its Struct, which forbids unknown
  keys; a conformant body (our own encoder's output) never leaves this path;
* slow path, taken only when the fast path fails: the body is read as a map, ``nil``
  values are dropped (nil = absent), alias keys are mapped to primary keys, unknown
  keys are dropped, an integral float in an int field becomes that int, and the
  result is validated into the Struct. Errors from this path are final and name the
  offending field.

msgpackr (JavaScript) writes ``undefined`` as extension 0 with the one byte ``00`` and
integers >= 2**32 as float64. Every decoder reads that ``undefined`` as nil (its
``ext_hook``), so it is absent wherever nil is; other extensions keep their meaning.
The envelope head has its own lenient retry, also taken only when the typed decode
fails. Neither costs a conformant packet anything (DECISIONS.md, rows 23-26).

An unknown ``type`` code decodes to an :class:`UnknownBody` and never raises.

Whatever the bytes, :func:`decode` raises only :class:`~alicia.protocol.errors.DecodeError`
(or its :class:`~alicia.protocol.errors.ValidationError`): msgspec errors, invalid UTF-8 and
nesting too deep for the interpreter's recursion limit are all mapped at this boundary.

:func:`encode` (:mod:`.encoding`) is strict where this decoder is lenient: it refuses
what the receiver's decoder would reject.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import msgspec

from .encoding import INT32_MAX, INT32_MIN, MAX_PACKET_BYTES, RULES, UINT16_MAX, Rule, encode
from .envelope import Envelope
from .errors import DecodeError, ProtocolError, Severity, ValidationError
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
    "PROTOCOL_ATTRIBUTE",
    "TEXT_BUDGET_BYTES",
    "decode",
    "encode",
    "error_body",
    "split_text",
]

DATA_TOPIC: Final = "alicia"
"""LiveKit data-packet topic our envelopes travel on (a transport choice; see DECISIONS.md)."""
PROTOCOL_ATTRIBUTE: Final = "alicia.protocol"
"""The attribute an agent that speaks this protocol sets on itself (value ``1``: v1);
clients trust only an agent that announces it."""

TEXT_BUDGET_BYTES: Final = MAX_PACKET_BYTES - 1024
"""UTF-8 bytes of text per ReasoningStep/AssistantSentence, leaving 1 KiB for the rest."""


class _EnvelopeIn(msgspec.Struct, kw_only=True, rename="camel"):
    stanza_id: Int32
    type: UInt16
    body: msgspec.Raw
    conversation_id: str | None = None
    meta: dict[str, Any] | None = None


class _EnvelopeLax(msgspec.Struct, kw_only=True, rename="camel"):
    """The envelope read without types, for the retry after a failed typed decode."""

    body: msgspec.Raw
    stanza_id: Any = msgspec.UNSET
    type: Any = msgspec.UNSET
    conversation_id: Any = msgspec.UNSET
    meta: Any = msgspec.UNSET


class _EnvelopeHead(msgspec.Struct, kw_only=True, rename="camel"):
    """The typed envelope head (without the body), validated after the retry's fixes."""

    stanza_id: Int32
    type: UInt16
    conversation_id: str | None = None
    meta: dict[str, Any] | None = None


def _ext_hook(code: int, data: memoryview) -> Any:
    """msgpackr's ``undefined`` (ext 0, payload ``00``) is nil; other extensions stay Ext."""
    if code == 0 and len(data) == 1 and data[0] == 0:
        return None
    return msgspec.msgpack.Ext(code, bytes(data))


class _Undefined:
    """Marks msgpackr's ``undefined`` when an error message needs to tell it from nil."""


_UNDEFINED: Final = _Undefined()


def _probe_hook(code: int, data: memoryview) -> Any:
    return _UNDEFINED if code == 0 and len(data) == 1 and data[0] == 0 else None


_envelope_decoder: Final = msgspec.msgpack.Decoder(_EnvelopeIn, ext_hook=_ext_hook)
_envelope_lax_decoder: Final = msgspec.msgpack.Decoder(_EnvelopeLax, ext_hook=_ext_hook)
_any_decoder: Final = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
_probe_decoder: Final = msgspec.msgpack.Decoder(ext_hook=_probe_hook)
_body_decoders: Final[dict[int, msgspec.msgpack.Decoder[Any]]] = {
    int(code): msgspec.msgpack.Decoder(cls, ext_hook=_ext_hook) for code, cls in BODY_TYPES.items()
}
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


# --- integral floats in int fields (DECISIONS.md row 25) -------------------------------

_IntRange: TypeAlias = tuple[int, int, frozenset[Any] | None]  # low, high, allowed values


def _int_range(rule: Rule) -> _IntRange | None:
    """The accepted ints of an int (or int-enum) field, or None for another field."""
    _attr, _wire, _required, kind, lo, hi, allowed = rule
    if kind is int:
        return (int(lo), int(hi), None)
    if allowed and all(isinstance(v, int) and not isinstance(v, bool) for v in allowed):
        return (min(allowed), max(allowed), allowed)
    return None


def _int_keys_of(code: int) -> dict[str, _IntRange]:
    """Wire keys (primary and alias) of one body type's int fields, with their ranges."""
    out = {
        rule[1]: found
        for rule in RULES[BODY_TYPES[MessageType(code)]]
        if (found := _int_range(rule)) is not None
    }
    for alias, primary, _fix in _ALIASES.get(code, ()):
        if primary in out:
            out[alias] = out[primary]
    return out


_INT_KEYS: Final[dict[int, dict[str, _IntRange]]] = {
    int(code): _int_keys_of(int(code)) for code in BODY_TYPES
}
"""Type code -> wire key -> accepted ints, for the integral-float fix of the slow path."""


def _integral(value: Any, lo: int, hi: int, allowed: frozenset[Any] | None = None) -> Any:
    """``value`` as an int if it is a float with no fractional part that the field accepts.

    msgpackr writes integers >= 2**32 (``Date.now()``) as float64. Anything else is
    returned unchanged and refused by the usual checks: fractional, NaN, inf, out of range.
    """
    if type(value) is float and value.is_integer() and lo <= value <= hi:
        number = int(value)
        if allowed is None or number in allowed:
            return number
    return value


def _normalise(code: int, fields: dict[Any, Any]) -> dict[str, Any]:
    """Drop nils, map aliases to primary keys, apply value fixes, drop unknown keys."""
    body = {k: v for k, v in fields.items() if v is not None and isinstance(k, str)}
    for key, (lo, hi, allowed) in _INT_KEYS[code].items():
        if type(body.get(key)) is float:
            body[key] = _integral(body[key], lo, hi, allowed)
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


_MISSING: Final = re.compile(r"missing required field `([^`]+)`")


def _validation_error(
    cls: type[Any], exc: msgspec.ValidationError, raw: msgspec.Raw
) -> ValidationError:
    text = str(exc).replace("`$", "`$.body", 1)
    if "`$.body" not in text:
        text += " - at `$.body`"
    missing = _MISSING.search(text)
    if missing and missing.group(1) in _undefined_keys(raw):
        text += " (it is undefined, which counts as absent)"
    return ValidationError(f"{cls.__name__}: {text}")


def _undefined_keys(raw: msgspec.Raw) -> set[str]:
    """Body keys whose value is msgpackr's ``undefined`` (only for an error message)."""
    fields = _probe_decoder.decode(raw)
    return {k for k, v in fields.items() if v is _UNDEFINED} if isinstance(fields, dict) else set()


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
        raise _validation_error(cls, exc, raw) from exc


def _lenient_head(data: bytes | bytearray | memoryview, error: Exception) -> _EnvelopeIn:
    """The envelope after its typed decode failed with ``error``: the retry.

    The leniency rules are applied (``undefined`` counts as nil, so a ``conversationId``
    or ``meta`` that is undefined is absent; an integral float in range is an int in
    ``stanzaId`` and ``type``) and the head is validated again, raising
    ``msgspec.ValidationError`` for the first field still invalid. Bytes that are not
    an envelope map at all re-raise ``error``.
    """
    try:
        lax = _envelope_lax_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise error from None
    fields = {
        "stanzaId": _integral(lax.stanza_id, INT32_MIN, INT32_MAX),
        "type": _integral(lax.type, 0, UINT16_MAX),
        "conversationId": lax.conversation_id,
        "meta": lax.meta,
    }
    present = {k: v for k, v in fields.items() if v is not msgspec.UNSET}
    head = msgspec.convert(present, _EnvelopeHead)
    return _EnvelopeIn(
        stanza_id=head.stanza_id,
        type=head.type,
        body=lax.body,
        conversation_id=head.conversation_id,
        meta=head.meta,
    )


def decode(data: bytes | bytearray | memoryview) -> Envelope[Any]:
    """Decode and validate one envelope.

    Raises :class:`~alicia.protocol.errors.DecodeError` for bytes that are not a MessagePack
    envelope and :class:`~alicia.protocol.errors.ValidationError` for a missing, ill-typed or
    out-of-range field; no other exception for any bytes (a non-bytes argument is a
    ``TypeError``). An unknown ``type`` yields a body of :class:`UnknownBody`.
    """
    try:
        try:
            head = _envelope_decoder.decode(data)
        except msgspec.ValidationError as exc:
            head = _lenient_head(data, exc)  # raises for a head still invalid
        body = _decode_body(head.type, head.body)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"Envelope: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a MessagePack envelope: {exc}") from exc
    except RecursionError as exc:
        raise DecodeError("MessagePack data is nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 in a MessagePack str: {exc.reason}") from exc
    return Envelope(
        stanza_id=head.stanza_id,
        conversation_id=head.conversation_id or "",
        type=head.type,
        body=body,
        meta=head.meta,
    )


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
