"""Strict MessagePack encoding of envelopes: what the receiver's decoder would reject
never leaves.

:func:`encode` checks what type hints cannot express (int32/uint16/uint32 ranges, float
ranges, enum and literal values, str meta keys, packet size) and raises
:class:`~alicia.protocol.errors.EncodeError` instead of sending a packet the peer must
refuse. The checks are a small per-type table derived from the Struct definitions with
``msgspec.inspect``; each body type gets a generated encoder that runs them as
straight-line code and hands anything unusual to the careful path that names the
offending field. The encoder stays strict where the decoder (:mod:`.codec`) is lenient (a
float in an int field is refused). Typed float fields (``confidence``) are written as
float32 (DECISIONS.md, row 27).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import msgspec

from .envelope import Envelope
from .errors import EncodeError, PacketTooLargeError
from .messages import BODY_TYPES, UnknownBody

__all__ = ["INT32_MAX", "INT32_MIN", "MAX_PACKET_BYTES", "RULES", "UINT16_MAX", "Rule", "encode"]

MAX_PACKET_BYTES: Final = 15 * 1024
"""Largest encoded envelope we send: one reliable LiveKit data packet (15 KiB)."""

_encoder: Final = msgspec.msgpack.Encoder()

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
UINT16_MAX: Final = 2**16 - 1
_INT64_MIN: Final = -(2**63)
_UINT64_MAX: Final = 2**64 - 1

# (attribute, wire key, required, number type, low, high, allowed values or None)
_Encode: TypeAlias = Callable[[Envelope[Any]], bytes]
Rule: TypeAlias = tuple[
    str, str, bool, type[Any] | tuple[type[Any], ...], float, float, frozenset[Any] | None
]


def _rule_for(field: msgspec.inspect.Field) -> Rule | None:
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


def _rules_of(cls: type[Any]) -> tuple[Rule, ...]:
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


def _compile_fast_encoder(cls: type[Any], code: int, rules: tuple[Rule, ...]) -> _Encode:
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
        lo32=INT32_MIN,
        hi32=INT32_MAX,
        checks="\n".join(checks),
        float32=float32,
        max_bytes=MAX_PACKET_BYTES,
    )
    exec(source, ns)
    encode: _Encode = ns[f"encode_{cls.__name__}"]
    return encode


def _check_envelope(env: Envelope[Any], rules: tuple[Rule, ...]) -> None:
    """Raise EncodeError naming the first value the receiver's decoder would reject."""
    sid = env.stanza_id
    if type(sid) is bool or not isinstance(sid, int) or not INT32_MIN <= sid <= INT32_MAX:
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
        _check_envelope(env, RULES[type(body)])
        obj: Any = _as_float32(env)
    elif isinstance(body, UnknownBody):
        code = body.type_code
        if env.type != code or not 0 <= code <= UINT16_MAX or code in BODY_TYPES:
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
RULES: Final[dict[type[Any], tuple[Rule, ...]]] = {
    cls: _rules_of(cls) for cls in BODY_TYPES.values()
}
"""Body class -> checks of its constrained fields."""
_FLOAT32_FIELDS: Final[dict[type[Any], tuple[str, ...]]] = {
    cls: _float32_fields_of(cls) for cls in BODY_TYPES.values()
}
"""Body class -> attributes written as float32."""
_FAST_ENCODERS: Final[dict[type[Any], _Encode]] = {
    cls: _compile_fast_encoder(cls, _CODE_OF[cls], RULES[cls]) for cls in BODY_TYPES.values()
}
"""Body class -> its generated encoder (falls back to :func:`_encode_carefully`)."""


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
