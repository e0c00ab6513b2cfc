"""Spoken progress remarks in ``alicia_remarks``, through the real storage writer on
PostgreSQL (the session's real server) and SQLite: as spoken, sealed under zero data
retention (no plaintext at rest), once however often re-delivered, and never for a
Commentary that is not the agent's own progress remark."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.engine.sink import META_SEALED, META_SENT
from alicia.agent.storage import admin
from alicia.agent.storage.dialect import Dialect
from alicia.agent.storage.keys import KeyStore
from alicia.agent.storage.rows import build_rows
from alicia.agent.storage.spill import Item, SpillDir
from alicia.agent.storage.writer import StorageWriter, WriterOptions
from alicia.protocol import Commentary, Envelope, ReasoningStep, UserMessage, envelope
from tests.support.db import execute, fetch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CID = "conv_remarks_test_000001"
SPOKEN = "Let me think about the egg timing for a second."
AT_MS = 1_767_225_600_123
AT = dt.datetime(2026, 1, 1, 0, 0, 0, 123_000, tzinfo=dt.UTC)
MASTER = [("m1", bytes(range(32)))]
DATABASE_PREFIX = "remarks"  # migrated (tests/storage/conftest.py)


def remark(
    rid: str = "cm_1",
    content: str = SPOKEN,
    *,
    target: str | None = "msg_u1",
    role: str = "assistant",
    kind: str | None = "progress",
    timestamp: int | None = AT_MS,
) -> Commentary:
    return Commentary(
        id=rid,
        conversation_id=CID,
        target_id=target,
        author_role=role,  # type: ignore[arg-type]
        content=content,
        comment_type=kind,
        timestamp=timestamp,
    )


def server(body: Any, stanza: int, meta: dict[str, Any] | None = None) -> Envelope[Any]:
    return envelope(body, stanza_id=-stanza, conversation_id=CID, meta=meta)


def user_message(stanza: int = 1) -> Envelope[Any]:
    body = UserMessage(id="msg_u1", conversation_id=CID, content="How long for a jammy egg?")
    return envelope(body, stanza_id=stanza, conversation_id=CID)


async def write(url: str, options: WriterOptions, envs: Sequence[Envelope[Any]]) -> None:
    async with StorageWriter(url, options) as w:
        for env in envs:
            w.submit(env)
        await w.flush(timeout=30)


async def remarks(url: str) -> list[dict[str, Any]]:
    return await fetch(url, "SELECT * FROM alicia_remarks ORDER BY spoken_at, sequence_number")


async def test_a_spoken_remark_is_stored_as_spoken(url: str, options: WriterOptions) -> None:
    before = dt.datetime.now(dt.UTC)
    await write(url, options, [user_message(), server(remark(), 3)])
    [row] = await remarks(url)
    assert {k: v for k, v in row.items() if not k.endswith("_at")} == {
        "id": "cm_1",
        "conversation_id": CID,
        "target_id": "msg_u1",
        "sequence_number": 3,
        "content": SPOKEN,
        "sealed": None,
    }
    assert row["spoken_at"] == AT  # the Commentary's timestamp, to the millisecond
    assert before <= row["sent_at"] <= dt.datetime.now(dt.UTC)
    assert row["deleted_at"] is None
    [conv] = await fetch(url, "SELECT last_server_stanza_id FROM alicia_conversations")
    assert conv["last_server_stanza_id"] == -3


async def test_without_a_usable_timestamp_the_envelope_time_is_kept(
    url: str, options: WriterOptions
) -> None:
    await write(
        url,
        options,
        [
            server(remark("cm_none", "First.", target=None, timestamp=None), 1),
            server(remark("cm_junk", "Second.", timestamp=2**62), 2),
        ],
    )
    rows = {r["id"]: r for r in await remarks(url)}
    assert sorted(rows) == ["cm_junk", "cm_none"]
    for r in rows.values():
        assert r["spoken_at"] == r["sent_at"]
    assert rows["cm_none"]["target_id"] is None
    assert rows["cm_junk"]["content"] == "Second."


async def test_a_sealed_remark_keeps_no_plaintext(url: str, options: WriterOptions) -> None:
    data_key = bytes(range(100, 132))
    sealed = ReasoningSealer([(f"data:{CID}", data_key)]).seal(
        CID, SPOKEN, knd="remark", ref="cm_z"
    )
    # The zero data retention path: a store-only copy with content "" and the sealed
    # text in its storage meta. A copy that still carries the text keeps it no better.
    zdr = server(remark("cm_z", ""), 2, meta={META_SEALED: sealed})
    careless = server(remark("cm_y", SPOKEN), 3, meta={META_SEALED: sealed})
    await write(url, options, [zdr, careless])
    rows = {r["id"]: r for r in await remarks(url)}
    assert sorted(rows) == ["cm_y", "cm_z"]
    for r in rows.values():
        assert (r["content"], r["sealed"], r["target_id"]) == (None, sealed, "msg_u1")
        assert r["spoken_at"] == AT
    stored = await fetch(url, "SELECT * FROM alicia_remarks")
    assert SPOKEN not in repr(stored)
    # not a word of it outside the ciphertext (whose random base64 may hold any three
    # letters: "egg" was in it once in a full run)
    assert "egg" not in repr([{k: v for k, v in r.items() if k != "sealed"} for r in stored])
    opened = ReasoningSealer([(f"data:{CID}", data_key)]).open(
        rows["cm_z"]["sealed"], CID, knd="remark", ref="cm_z"
    )
    assert opened == SPOKEN


async def test_a_remark_never_holds_text_and_its_sealed_value(url: str) -> None:
    await execute(url, f"INSERT INTO alicia_conversations (id) VALUES ('{CID}')")
    with pytest.raises(Exception, match="ck_alicia_remarks_plaintext_or_sealed"):
        await execute(
            url,
            "INSERT INTO alicia_remarks (id, conversation_id, sequence_number, content, sealed) "
            f"VALUES ('cm_bad', '{CID}', 1, 'text', 'sealed')",
        )
    assert await remarks(url) == []


async def test_a_remark_stored_twice_is_one_row(url: str, options: WriterOptions) -> None:
    env = server(remark(), 3)
    async with StorageWriter(url, options) as w:
        w.submit(env)
        w.submit(env)  # the same batch
        await w.flush(timeout=30)
        w.submit(env)  # a later batch
        await w.flush(timeout=30)
        assert w.stats.written == 3 and w.stats.dead_lettered == 0
    first = await remarks(url)
    # A second writer replays it; the same id with other text changes nothing either.
    await write(url, options, [env, server(remark(content="Something else."), 4)])
    assert await remarks(url) == first
    assert len(first) == 1 and first[0]["content"] == SPOKEN


async def test_a_replayed_spill_segment_stores_the_remark_once(
    url: str, options: WriterOptions
) -> None:
    assert options.spill_dir is not None
    env = server(remark(), 3)
    for _ in range(2):  # the same segment left behind twice: replayed twice, one row
        spill = SpillDir(options.spill_dir)
        spill.open()
        spill.write([Item(1, 1_700_000_000.0, env)])
        spill.close()
        async with StorageWriter(url, options) as w:  # adopts and replays the segment
            await w.flush(timeout=30)
            assert (w.stats.replayed, w.stats.dead_lettered) == (1, 0)
        [row] = await remarks(url)
        assert (row["id"], row["content"], row["sequence_number"]) == ("cm_1", SPOKEN, 3)
        assert row["sent_at"] == dt.datetime.fromtimestamp(1_700_000_000.0, dt.UTC)


async def test_other_commentary_is_not_stored(url: str, options: WriterOptions) -> None:
    rating = Commentary(
        id="cm_rate",
        conversation_id=CID,
        target_id="msg_a1",
        author_role="user",
        content="Great answer",
        rating=5,
        comment_type="rating",
    )
    await write(
        url,
        options,
        [
            envelope(rating, stanza_id=1, conversation_id=CID),
            # user feedback, even typed "progress"
            envelope(remark("cm_user", role="user"), stanza_id=2, conversation_id=CID),
            # a client cannot make an agent's remark up
            envelope(remark("cm_forged"), stanza_id=3, conversation_id=CID),
            server(remark("cm_mod", role="moderator"), 1),
            server(remark("cm_note", kind=None), 2),
            server(remark("cm_other", kind="note"), 3),
        ],
    )
    assert await remarks(url) == []
    [conv] = await fetch(url, "SELECT last_client_stanza_id FROM alicia_conversations")
    assert conv["last_client_stanza_id"] == 3


async def test_a_log_only_rendition_is_not_a_remark(url: str, options: WriterOptions) -> None:
    # Failover logs every envelope as sent; one sent with ``store=False`` (the plain
    # announcement under zero data retention) goes to the sent log only.
    sent: dict[str, Any] = {"to": None, "level": None, "data": b"x", "rows": False}
    stored: dict[str, Any] = {"to": [], "level": None, "data": b"y", "rows": True}
    await write(
        url,
        options,
        [
            server(remark("cm_log"), 1, meta={META_SENT: sent}),
            server(remark("cm_row", ""), 2, meta={META_SENT: stored, META_SEALED: "jwe"}),
        ],
    )
    [row] = await remarks(url)
    assert (row["id"], row["content"], row["sealed"]) == ("cm_row", None, "jwe")
    logged = await fetch(url, "SELECT stanza FROM alicia_sent_log ORDER BY stanza")
    assert [r["stanza"] for r in logged] == [1, 2]


async def test_remarks_in_a_batch_of_steps_are_stored(url: str, options: WriterOptions) -> None:
    # On PostgreSQL a batch of steps alone takes the asyncpg fast path; a remark in it
    # must take it off that path, not be dropped.
    steps = [
        server(
            ReasoningStep(
                id=f"rs_{i}",
                conversation_id=CID,
                previous_id="msg_u1",
                content=f"step {i}",
                step_index=i,
            ),
            i,
        )
        for i in range(1, 40)
    ]
    await write(url, options, [*steps, server(remark(), 40)])
    [row] = await remarks(url)
    assert (row["content"], row["sequence_number"]) == (SPOKEN, 40)
    [n] = await fetch(url, "SELECT count(*) AS n FROM alicia_reasoning_steps")
    assert n["n"] == 39


async def test_remarks_go_with_their_conversation(url: str, options: WriterOptions) -> None:
    await write(url, options, [user_message(), server(remark(), 2)])
    assert len(await remarks(url)) == 1
    await execute(url, f"DELETE FROM alicia_conversations WHERE id = '{CID}'")
    assert await remarks(url) == []


async def test_admin_prints_remarks_and_erasure_shreds_sealed_ones(
    url: str, options: WriterOptions, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    async with KeyStore(url, ReasoningSealer(MASTER), migrate=False) as store:
        key = await store.data_key(CID)
    assert key is not None
    sealed = ReasoningSealer([(f"data:{CID}", key)]).seal(CID, SPOKEN, knd="remark", ref="cm_z")
    await write(
        url,
        options,
        [
            server(remark("cm_a", "Hmm.", timestamp=AT_MS - 1000), 1),
            server(remark("cm_z", ""), 2, meta={META_SEALED: sealed}),
        ],
    )
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("ALICIA_REASONING_KEYS", f"m1={base64.b64encode(MASTER[0][1]).decode()}")
    argv = ["remarks", "--conversation", CID]
    assert await asyncio.to_thread(admin.main, argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1:] for line in lines] == [["msg_u1", "Hmm."], ["msg_u1", SPOKEN]]
    erase = ["erase", "--conversation", CID]
    assert await asyncio.to_thread(admin.main, erase) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(admin.main, argv) == admin.EXIT_ERASED
    assert "erased" in capsys.readouterr().err
    missing = ["remarks", "--conversation", "conv_nobody"]
    assert await asyncio.to_thread(admin.main, missing) == admin.EXIT_MISSING


def test_build_rows_keeps_remarks_off_the_steps_fast_path() -> None:
    step = ReasoningStep(
        id="rs_1", conversation_id=CID, previous_id="msg_u1", content="s", step_index=1
    )
    only_steps = build_rows([Item(1, 1_700_000_000.0, server(step, 1))])
    assert not only_steps.remarks and Dialect(True, 32).only_steps(only_steps)
    items = [
        Item(1, 1_700_000_000.0, server(step, 1)),
        Item(2, 1_700_000_001.0, server(remark(), 2, meta={META_SEALED: "jwe"})),
        Item(3, 1_700_000_002.0, server(remark(content="again"), 3)),
    ]
    rows = build_rows(items)
    assert rows.remarks == {
        "cm_1": {
            "id": "cm_1",
            "conversation_id": CID,
            "target_id": "msg_u1",
            "sequence_number": 2,
            "content": None,
            "sealed": "jwe",
            "spoken_at": AT,
            "sent_at": dt.datetime.fromtimestamp(1_700_000_001.0, dt.UTC),
        }
    }
    assert not Dialect(True, 32).only_steps(rows)
