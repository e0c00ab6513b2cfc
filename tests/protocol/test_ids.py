"""Prefixed NanoIDs: ``<prefix>_<21 URL-safe characters>``, unique."""

from __future__ import annotations

import re

import pytest

from alicia.protocol import ids, new_id

pytestmark = pytest.mark.filterwarnings("error")

NANOID = re.compile(r"[A-Za-z0-9_-]{21}")
PREFIXES = {
    "CONVERSATION": "conv",
    "MESSAGE": "msg",
    "SENTENCE": "sent",
    "REASONING_STEP": "rs",
    "TOOL_USE": "toolreq",
    "TOOL_USE_RESULT": "toolres",
    "ERROR": "err",
    "MEMORY_TRACE": "memtr",
    "MEMORY": "mem",
    "COMMENTARY": "cmt",
}


def test_prefix_constants_are_the_documented_ones() -> None:
    assert {name: getattr(ids, name) for name in PREFIXES} == PREFIXES
    assert len(set(PREFIXES.values())) == len(PREFIXES)
    assert set(ids.__all__) == {*PREFIXES, "new_id"}


@pytest.mark.parametrize("prefix", sorted(PREFIXES.values()))
def test_shape(prefix: str) -> None:
    value = new_id(prefix)
    head, sep, tail = value.partition("_")
    assert (head, sep) == (prefix, "_")
    assert NANOID.fullmatch(tail), value
    assert len(value) == len(prefix) + 1 + 21


def test_ids_are_unique_and_use_the_whole_alphabet() -> None:
    values = [new_id("rs") for _ in range(20_000)]
    assert len(set(values)) == len(values)
    alphabet = {c for v in values for c in v[3:]}
    # 64 URL-safe symbols; 420k random draws hit every one of them.
    assert alphabet == set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def test_ids_are_opaque_strings_for_any_prefix() -> None:
    assert re.fullmatch(r"ar_[A-Za-z0-9_-]{21}", new_id("ar"))
