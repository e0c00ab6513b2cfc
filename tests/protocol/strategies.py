"""Hypothesis strategies for every protocol body and for whole envelopes.

Strategies are derived from the Struct definitions (``msgspec.inspect``), so they follow
the models: int fields draw from their declared range (edges included), Literal/enum
fields from their values, optional fields are present or absent. A field type the
deriver does not know raises ``TypeError`` at import, so a new type with such a field
fails the tests until it gets a strategy here.

Values of ``Any`` fields (parameters, result, metadata, attachments, meta …) are
MessagePack-roundtrippable: no tuples, no NaN, ints within int64/uint64, str keys.

Usage from other tests::

    from tests.protocol.strategies import BODY_STRATEGIES, bodies, envelopes, any_values

    @given(envelopes())
    def test_x(env): ...
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from hypothesis import strategies as st

from alicia.protocol import BODY_TYPES, Body, Envelope, MessageType, UnknownBody, envelope

__all__ = [
    "BODY_STRATEGIES",
    "INT32_MAX",
    "INT32_MIN",
    "Optional",
    "any_values",
    "bodies",
    "envelopes",
    "field_values",
    "texts",
    "unknown_envelopes",
]

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
UINT64_MAX: Final = 2**64 - 1

Optional = Literal["random", "all", "none"]
"""How optional fields are drawn: either way, always present, or always absent."""

# Short enough that no drawn envelope can reach the 15 KiB packet limit.
_TEXT_MAX: Final = 40


def texts(max_size: int = _TEXT_MAX) -> st.SearchStrategy[str]:
    """Unicode text (any code point but surrogates), with some hand-picked hard cases."""
    hard = st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "ünïcödé",
            "日本語のテキスト",
            "emoji 🧠💭",
            "e\u0301",
            "\u200b\ufeff",
            "a\nb\tc",
        ]
    )
    return st.one_of(hard, st.text(max_size=max_size))


def _int_range(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], edges and their neighbours drawn often."""
    edges = sorted({lo, lo + 1, hi - 1, hi} | {v for v in (-1, 0, 1) if lo <= v <= hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


def any_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """MessagePack-roundtrippable values of ``Any`` fields: nested maps and arrays."""
    leaves: st.SearchStrategy[Any] = st.one_of(
        st.none(),
        st.booleans(),
        _int_range(INT64_MIN, UINT64_MAX),
        st.floats(allow_nan=False),
        texts(),
        st.binary(max_size=_TEXT_MAX),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(texts(), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def _maps() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(texts(), any_values(), max_size=4)


def field_values(t: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    """A strategy for one (non-None) field type; ``TypeError`` for a type not handled."""
    if isinstance(t, msgspec.inspect.StrType):
        return texts()
    if isinstance(t, msgspec.inspect.BoolType):
        return st.booleans()
    if isinstance(t, msgspec.inspect.IntType):
        lo = INT64_MIN if t.ge is None else t.ge
        hi = UINT64_MAX if t.le is None else t.le
        return _int_range(lo, hi)
    if isinstance(t, msgspec.inspect.FloatType):
        lo_f = None if t.ge is None else t.ge
        hi_f = None if t.le is None else t.le
        edges = [v for v in (lo_f, hi_f) if v is not None]
        floats = st.floats(lo_f, hi_f, allow_nan=False)
        return st.one_of(st.sampled_from(edges), floats) if edges else floats
    if isinstance(t, msgspec.inspect.BytesType):
        return st.binary(max_size=_TEXT_MAX)
    if isinstance(t, msgspec.inspect.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, msgspec.inspect.EnumType):
        return st.sampled_from(list(t.cls))
    if isinstance(t, msgspec.inspect.AnyType):
        return any_values()
    if isinstance(t, msgspec.inspect.DictType) and isinstance(t.key_type, msgspec.inspect.StrType):
        return st.dictionaries(texts(), field_values(t.value_type), max_size=4)
    if isinstance(t, msgspec.inspect.ListType):
        return st.lists(field_values(t.item_type), max_size=4)
    if isinstance(t, msgspec.inspect.UnionType):
        inner = [m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)]
        drawn = st.one_of(*(field_values(m) for m in inner))
        if len(inner) < len(t.types):
            return st.one_of(st.none(), drawn)
        return drawn
    raise TypeError(f"tests/protocol/strategies.py has no strategy for field type {t!r}")


def _non_none(t: msgspec.inspect.Type) -> msgspec.inspect.Type | None:
    """The type without its ``None`` member (None if the field is only ``Any``)."""
    if isinstance(t, msgspec.inspect.UnionType):
        inner = [m for m in t.types if not isinstance(m, msgspec.inspect.NoneType)]
        return inner[0] if len(inner) == 1 else msgspec.inspect.UnionType(tuple(inner))
    return t


def bodies(cls: type[Body], optional: Optional = "random") -> st.SearchStrategy[Body]:
    """Valid instances of one body class, derived from its Struct definition."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in info.fields:
        if f.required:
            kwargs[f.name] = field_values(f.type)
            continue
        present = _non_none(f.type)
        assert present is not None
        value = field_values(present)
        if isinstance(present, msgspec.inspect.AnyType):
            value = value.filter(lambda v: v is not None)  # None would mean absent
        if optional == "all":
            kwargs[f.name] = value
        elif optional == "none":
            kwargs[f.name] = st.just(f.default)
        else:
            kwargs[f.name] = st.one_of(st.just(f.default), value)
    return st.builds(cls, **kwargs)


BODY_STRATEGIES: Final[dict[MessageType, st.SearchStrategy[Body]]] = {
    code: bodies(cls) for code, cls in BODY_TYPES.items()
}
"""Type code -> strategy of valid bodies (optional fields present or absent)."""


def envelopes(
    body: st.SearchStrategy[Body] | None = None,
) -> st.SearchStrategy[Envelope[Any]]:
    """Valid envelopes: any body type (or ``body``), int32 stanzaIds, optional meta."""
    body_st = body if body is not None else st.one_of(*BODY_STRATEGIES.values())
    return st.builds(
        lambda b, sid, conv, meta: envelope(b, stanza_id=sid, conversation_id=conv, meta=meta),
        body_st,
        _int_range(INT32_MIN, INT32_MAX),
        texts(),
        st.one_of(st.none(), _maps()),
    )


def unknown_envelopes() -> st.SearchStrategy[Envelope[Any]]:
    """Envelopes of type codes this version does not know (0, 17..65535)."""
    known = {int(c) for c in BODY_TYPES}
    codes = st.one_of(st.sampled_from([0, 17, 65535]), st.integers(0, 65535)).filter(
        lambda c: c not in known
    )
    return st.builds(
        lambda code, fields, sid, conv, meta: envelope(
            UnknownBody(code, fields), stanza_id=sid, conversation_id=conv, meta=meta
        ),
        codes,
        _maps(),
        _int_range(INT32_MIN, INT32_MAX),
        texts(),
        st.one_of(st.none(), _maps()),
    )
