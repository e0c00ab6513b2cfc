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

:func:`encode` checks what the receiver's decoder would reject and type hints cannot
express (int32/uint16/uint32 ranges, float ranges, enum and literal values, str meta
keys, packet size) and raises :class:`~alicia.protocol.errors.EncodeError` instead of sending
a packet the peer must refuse. The checks are a small per-type table derived from the
Struct definitions with ``msgspec.inspect``; each body type gets a generated encoder
that runs them as straight-line code and hands anything unusual to the careful path
that names the offending field. The encoder stays strict where the decoder is lenient
(a float in an int field is refused). Typed float fields (``confidence``) are written
as float32 (DECISIONS.md, row 27).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from typing import Any, Final, TypeAlias

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


_encoder: Final = msgspec.msgpack.Encoder()
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


# --- encode-side checks -----------------------------------------------------------------

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_UINT16_MAX: Final = 2**16 - 1
_INT64_MIN: Final = -(2**63)
_UINT64_MAX: Final = 2**64 - 1

# (attribute, wire key, required, number type, low, high, allowed values or None)
_Encode: TypeAlias = Callable[[Envelope[Any]], bytes]
_Rule: TypeAlias = tuple[
    str, str, bool, type[Any] | tuple[type[Any], ...], float, float, frozenset[Any] | None
]


def _rule_for(field: msgspec.inspect.Field) -> _Rule | None:
    """The encode check of one Struct field, or None if type hints already cover it."""
    t = field.type
    if isinstance(t, msgspec.inspect.UnionType):
        inner = [m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)]
        if len(inner) != 1:
            return None
        t = inner[0]
    head = (field.name, field.encode_name, field.required)
    if isinstance(t, msgspec.inspect.IntType):
        lo = _INT64_MIN if t.ge is None else t.ge
        hi = _UINT64_MAX if t.le is None else t.le
        return (*head, int, lo, hi, None)
    if isinstance(t, msgspec.inspect.FloatType) and (t.ge is not None or t.le is not None):
        lo_f = -math.inf if t.ge is None else t.ge
        hi_f = math.inf if t.le is None else t.le
        return (*head, (int, float), lo_f, hi_f, None)
    if isinstance(t, msgspec.inspect.LiteralType | msgspec.inspect.EnumType):
        values = (
            t.values if isinstance(t, msgspec.inspect.LiteralType) else [m.value for m in t.cls]
        )
        # The type matters too: 1.0 == Severity.WARNING, but a float is not an enum value.
        return (*head, tuple({type(v) for v in values}), 0, 0, frozenset(values))
    return None


def _rules_of(cls: type[Any]) -> tuple[_Rule, ...]:
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return tuple(r for f in info.fields if (r := _rule_for(f)) is not None)


def _float32_fields_of(cls: type[Any]) -> tuple[str, ...]:
    """Attributes of ``cls`` typed float (``confidence``): they travel as float32."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    out = []
    for f in info.fields:
        t = f.type
        members = t.types if isinstance(t, msgspec.inspect.UnionType) else (t,)
        if any(isinstance(m, msgspec.inspect.FloatType) for m in members):
            out.append(f.name)
    return tuple(out)


def _as_float32(env: Envelope[Any]) -> Envelope[Any]:
    """``env`` with its typed float fields replaced by their float32 encoding (``0xca``).

    msgspec writes every float as float64; a typed client reading ``confidence`` into a
    float32 (Go's vmihailenco/msgpack ``DecodeFloat32``) refuses ``0xcb``. The values
    were range-checked already, and the bodies hold them as float32 values.
    """
    body = env.body
    raws = {
        attr: msgspec.Raw(b"\xca" + struct.pack(">f", value))
        for attr in _FLOAT32_FIELDS[type(body)]
        if (value := getattr(body, attr)) is not None
    }
    if not raws:
        return env
    return msgspec.structs.replace(env, body=msgspec.structs.replace(body, **raws))


_FAST_ENCODER: Final = """
def encode_{name}(e):
    s = e.stanza_id
    if (e.type != {code} or type(s) is not int or not {lo32} <= s <= {hi32}
            or type(e.conversation_id) is not str):
        return careful(e)
    m = e.meta
    if m is not None:
        if type(m) is not dict:
            return careful(e)
        for k in m:
            if type(k) is not str:
                return careful(e)
    b = e.body
{checks}
{float32}
    try:
        data = raw_encode(e)
    except Exception:
        return careful(e)
    if len(data) > {max_bytes}:
        return careful(e)
    return data
"""


def _compile_fast_encoder(cls: type[Any], code: int, rules: tuple[_Rule, ...]) -> _Encode:
    """The encoder of one body type for envelopes that are plainly valid.

    Its source is generated from the rules (as dataclasses and attrs generate
    ``__init__``): straight-line tests of ``type``, ``stanzaId``, ``conversationId``,
    meta keys and each constrained field, then the msgspec encoder and the size check,
    several times cheaper than looping over the rules. Anything unusual (a failed test,
    an ``IntEnum`` in an int field, an encoder error, a packet too large) is handed to
    :func:`_encode_carefully`, which decides and raises the precise error.
    """
    ns: dict[str, Any] = {
        "careful": _encode_carefully,
        "raw_encode": _encoder.encode,
        "as_float32": _as_float32,
    }
    checks = []
    for i, (attr, _wire, required, kind, lo, hi, allowed) in enumerate(rules):
        if allowed is not None:
            ns[f"a{i}"], ns[f"k{i}"] = allowed, kind
            bad = f"type(v) is bool or not isinstance(v, k{i}) or v not in a{i}"
        else:
            ns[f"lo{i}"], ns[f"hi{i}"] = lo, hi  # inline literals are faster than names
            low = repr(lo) if math.isfinite(lo) else f"lo{i}"
            high = repr(hi) if math.isfinite(hi) else f"hi{i}"
            bad = f"type(v) is not {'int' if kind is int else 'float'} or not {low} <= v <= {high}"
        checks.append(f"    v = b.{attr}")
        if required:
            checks.append(f"    if v is None or {bad}:")
        else:
            checks.append(f"    if v is not None and ({bad}):")
        checks.append("        return careful(e)")
    float32 = ""
    if _FLOAT32_FIELDS[cls]:
        present = " or ".join(f"b.{attr} is not None" for attr in _FLOAT32_FIELDS[cls])
        float32 = f"    if {present}:\n        e = as_float32(e)"
    source = _FAST_ENCODER.format(
        name=cls.__name__,
        code=code,
        lo32=_INT32_MIN,
        hi32=_INT32_MAX,
        checks="\n".join(checks),
        float32=float32,
        max_bytes=MAX_PACKET_BYTES,
    )
    exec(source, ns)
    encode: _Encode = ns[f"encode_{cls.__name__}"]
    return encode


def _check_envelope(env: Envelope[Any], rules: tuple[_Rule, ...]) -> None:
    """Raise EncodeError naming the first value the receiver's decoder would reject."""
    sid = env.stanza_id
    if type(sid) is bool or not isinstance(sid, int) or not _INT32_MIN <= sid <= _INT32_MAX:
        raise EncodeError(f"stanzaId={sid!r} is not an int32 - at `$.stanzaId`")
    if not isinstance(env.conversation_id, str):
        raise EncodeError(f"conversationId={env.conversation_id!r} is not a str")
    if env.meta is not None:
        if not isinstance(env.meta, dict):
            raise EncodeError(f"meta is not a map: {type(env.meta).__name__} - at `$.meta`")
        for key in env.meta:
            if not isinstance(key, str):
                raise EncodeError(f"meta key {key!r} is not a str - at `$.meta`")
    body = env.body
    for attr, wire, required, kind, lo, hi, allowed in rules:
        v = getattr(body, attr)
        if v is None:
            ok = not required
        elif type(v) is bool:  # a msgpack bool is not an int on the wire
            ok = False
        elif allowed is not None:
            ok = isinstance(v, kind) and v in allowed
        else:
            ok = isinstance(v, kind) and lo <= v <= hi
        if not ok:
            want = f"one of {sorted(allowed)!r}" if allowed is not None else f"in [{lo}, {hi}]"
            raise EncodeError(
                f"{type(body).__name__}: {wire}={v!r} is not {want} - at `$.body.{wire}`"
            )


def _encode_carefully(env: Envelope[Any]) -> bytes:
    """Encode with every check spelled out; raises the precise EncodeError."""
    body = env.body
    code = _CODE_OF.get(type(body))
    if code is not None:
        if env.type != code:
            raise EncodeError(f"envelope type {env.type} does not match {type(body).__name__}")
        _check_envelope(env, _RULES[type(body)])
        obj: Any = _as_float32(env)
    elif isinstance(body, UnknownBody):
        code = body.type_code
        if env.type != code or not 0 <= code <= _UINT16_MAX or code in _body_decoders:
            raise EncodeError(f"UnknownBody needs an unknown uint16 type code, not {code}")
        _check_envelope(env, ())
        obj = _unknown_as_dict(env, body)
    else:
        raise EncodeError(f"not a protocol body: {type(body).__name__}")
    try:
        data = _encoder.encode(obj)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise EncodeError(f"cannot encode {type(body).__name__}: {exc}") from exc
    if len(data) > MAX_PACKET_BYTES:
        raise PacketTooLargeError(len(data), MAX_PACKET_BYTES)
    return data


def _unknown_as_dict(env: Envelope[Any], body: UnknownBody) -> dict[str, Any]:
    out: dict[str, Any] = {
        "stanzaId": env.stanza_id,
        "conversationId": env.conversation_id,
        "type": env.type,
        "body": body.fields,
    }
    if env.meta is not None:
        out["meta"] = env.meta
    return out


_CODE_OF: Final[dict[type[Any], int]] = {cls: int(code) for code, cls in BODY_TYPES.items()}
_RULES: Final[dict[type[Any], tuple[_Rule, ...]]] = {
    cls: _rules_of(cls) for cls in BODY_TYPES.values()
}
"""Body class -> checks of its constrained fields."""
_FLOAT32_FIELDS: Final[dict[type[Any], tuple[str, ...]]] = {
    cls: _float32_fields_of(cls) for cls in BODY_TYPES.values()
}
"""Body class -> attributes written as float32."""
_FAST_ENCODERS: Final[dict[type[Any], _Encode]] = {
    cls: _compile_fast_encoder(cls, _CODE_OF[cls], _RULES[cls]) for cls in BODY_TYPES.values()
}
"""Body class -> its generated encoder (falls back to :func:`_encode_carefully`)."""


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


def _int_range(rule: _Rule) -> _IntRange | None:
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
        for rule in _RULES[BODY_TYPES[MessageType(code)]]
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
        "stanzaId": _integral(lax.stanza_id, _INT32_MIN, _INT32_MAX),
        "type": _integral(lax.type, 0, _UINT16_MAX),
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


def encode(env: Envelope[Any]) -> bytes:
    """Encode an envelope to MessagePack bytes (primary keys only, absent fields omitted).

    Raises :class:`~alicia.protocol.errors.EncodeError` for a value the receiver would reject
    (``type`` not matching the body, ``stanzaId`` or a body field out of range, a
    literal/enum field with an unknown value, a non-str meta key, an unencodable value)
    and :class:`~alicia.protocol.errors.PacketTooLargeError` above :data:`MAX_PACKET_BYTES`.
    """
    fast = _FAST_ENCODERS.get(type(env.body))
    if fast is not None:
        return fast(env)
    return _encode_carefully(env)


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
