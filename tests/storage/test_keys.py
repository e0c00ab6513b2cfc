"""Per-conversation data keys on the real Postgres: made once, wrapped by the master key,
rotation, and crypto-shredding (after ``erase`` nothing sealed with the key opens)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from alicia.agent.engine.sealing import ReasoningSealer, SealError
from alicia.agent.storage.keys import KeyStore
from alicia.harness import PostgresServer
from tests.support.db import fetch, new_database

pytestmark = pytest.mark.integration

M1, M2 = bytes(range(32)), bytes(range(32, 64))
STEP = "The user wants a jammy yolk; this is a classic trap for fridge-cold eggs."


async def test_a_conversation_gets_one_data_key_stored_only_wrapped(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "keys")
    async with KeyStore(url, ReasoningSealer([("m1", M1)])) as store:
        first = await store.data_key("conv_a")
        again, racing = await asyncio.gather(store.data_key("conv_a"), store.data_key("conv_a"))
        other = await store.data_key("conv_b")
        assert first is not None and len(first) == 32
        assert again == racing == first and other != first
        assert await store.data_key("conv_c", create=False) is None
    rows = await fetch(url, "SELECT conversation_id, kid, wrapped FROM alicia_conversation_keys")
    assert {r["conversation_id"] for r in rows} == {"conv_a", "conv_b"}
    assert all(r["kid"] == "m1" and r["wrapped"].count(".") == 4 for r in rows)
    # Rotation: a new master key first, the old one still opens the stored wrapping.
    async with KeyStore(url, ReasoningSealer([("m2", M2), ("m1", M1)])) as rotated:
        assert await rotated.data_key("conv_a") == first


async def test_erasing_a_data_key_makes_its_reasoning_unreadable(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "shred")
    async with KeyStore(url, ReasoningSealer([("m1", M1)])) as store:
        key = await store.data_key("conv_a")
        assert key is not None
        stored = ReasoningSealer([("data:conv_a", key)]).seal("conv_a", STEP)
        before = await store.data_key("conv_a", create=False)
        assert before is not None
        assert ReasoningSealer([("data:conv_a", before)]).open(stored, "conv_a") == STEP
        assert await store.erase("conv_a") is True
        assert await store.erase("conv_a") is False  # idempotent
        assert await store.data_key("conv_a") is None  # never re-made after an erasure
        assert await store.data_key("conv_b") is not None  # others untouched
    [row] = await fetch(
        url,
        "SELECT wrapped, erased_at FROM alicia_conversation_keys WHERE conversation_id='conv_a'",
    )
    assert row["wrapped"] is None and row["erased_at"] is not None
    # Nothing else opens it: not the master key, not a fresh key.
    for sealer in (ReasoningSealer([("m1", M1)]), ReasoningSealer([("data:conv_a", M2)])):
        with pytest.raises(SealError):
            sealer.open(stored, "conv_a")
