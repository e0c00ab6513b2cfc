"""``alicia-export``'s failures (clear message, exit status 2, never a traceback) and the
turn grouping behind every format, on rows made by hand."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path

import pytest
from ag_ui.core import Message
from pydantic import TypeAdapter

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.export import agui, mew, openhands
from alicia.agent.export.cli import main
from alicia.agent.export.turns import (
    StoredConversation,
    StoredMessage,
    StoredStep,
    StoredToolUse,
    build_turns,
    is_sealed,
)
from alicia.agent.storage.writer import migrate
from alicia.harness import free_port

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def at(ms: int) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=ms)


def message(mid: str, role: str, ms: int, previous: str | None = None) -> StoredMessage:
    return StoredMessage(mid, role, f"text of {mid}", "completed", previous, 0, at(ms), {})


def step(sid: str, mid: str, index: int, ms: int, content: str = "") -> StoredStep:
    return StoredStep(sid, mid, index, content or f"step {sid}", at(ms), {})


def tool(tid: str, mid: str, ms: int, status: str = "running") -> StoredToolUse:
    done = at(ms + 1) if status != "running" else None
    return StoredToolUse(tid, mid, "clock", {}, None, status, None, None, 1, at(ms), done, {})


def test_turns_follow_time_and_keep_orphans_and_drop_what_has_no_message() -> None:
    turns = build_turns(
        [
            message("m_b", "user", 10),
            message("m_a", "assistant", 30, previous="m_b"),
            message("m_z", "assistant", 5, previous="m_gone"),  # its question was deleted
            message("m_c", "user", 40),
        ],
        [step("s2", "m_b", 2, 20), step("s1", "m_b", 1, 15), step("sx", "m_gone", 1, 6)],
        [tool("t1", "m_b", 20), tool("tx", "m_gone", 7)],
    )
    assert [(t.user.id if t.user else None, [a.id for a in t.answers]) for t in turns] == [
        (None, ["m_z"]),
        ("m_b", ["m_a"]),
        ("m_c", []),
    ]
    # By time; at the same instant the step before the tool call.
    assert [w.id for w in turns[1].work] == ["s1", "s2", "t1"]
    assert turns[0].work == () and turns[2].work == ()


def test_only_a_jwe_counts_as_sealed() -> None:
    sealed = ReasoningSealer([("k", bytes(32))]).seal("conv", "secret")
    assert is_sealed(sealed)
    for plain in ("eyJ.a.b.c.d", "A sentence. Another. And. More. Still.", "", "eyJhbGciOi"):
        assert not is_sealed(plain)


def test_a_turn_without_an_answer_keeps_its_reasoning_and_unanswered_call() -> None:
    sealed = ReasoningSealer([("k", bytes(32))]).seal("conv", "secret")
    turns = build_turns(
        [message("m_u", "user", 0)],
        [step("s1", "m_u", 1, 10, "thinking"), step("s2", "m_u", 2, 30, sealed)],
        [tool("t1", "m_u", 20)],  # no result stored: the turn was stopped
    )
    conv = StoredConversation("conv", {}, turns)
    events = openhands.events(conv)
    assert [e.get("action") for e in events] == ["message", "call_tool_mcp", "think"]
    assert events[-1]["args"] == {"thought": "", "reasoning_content": "thinking"}
    envs = mew.envelopes(conv)
    kinds = [e["kind"] for e in envs]
    assert kinds == [
        "chat",
        "reasoning/start",
        "reasoning/thought",
        "mcp/request",
        "reasoning/thought",
        "reasoning/conclusion",
    ]
    history = agui.wire(conv)
    TypeAdapter(list[Message]).validate_python(history)
    assert [m["role"] for m in history] == ["user", "reasoning", "assistant", "reasoning"]
    assert "toolCalls" in history[2] and history[3]["encryptedValue"] == sealed


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
async def empty_db(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    await migrate(url)
    return url


def test_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    empty_db: str,
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    cases: list[tuple[list[str], str]] = [
        ([], "no database: pass --database-url or set DATABASE_URL"),
        (["--database-url", empty_db], "no conversation 'conv_x' in the database"),
        (
            ["--database-url", f"postgresql+asyncpg://alicia@127.0.0.1:{free_port()}/x"],
            "cannot read the database",
        ),
        (["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'none.db'}"], "no SQLite database"),
        (["--database-url", "not a url"], "cannot read the database"),
    ]
    for extra, expected in cases:
        code, out, err = run(capsys, "--conversation", "conv_x", "--format", "agui", *extra)
        assert (code, out) == (2, ""), err
        assert expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "none.db").exists()  # looking did not create it
    monkeypatch.setenv("DATABASE_URL", empty_db)
    code, _, err = run(capsys, "--conversation", "conv_x", "--format", "mew", "--output", "x")
    assert code == 2 and "no conversation" in err
    assert not (tmp_path / "x").exists()


async def add_conversation(url: str, cid: str) -> None:
    from sqlalchemy import text

    from alicia.agent.storage.engine import create_engine

    engine = create_engine(url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text("INSERT INTO alicia_conversations (id) VALUES (:id)"), {"id": cid}
            )
    finally:
        await engine.dispose()


def test_an_empty_conversation_an_unwritable_output_and_a_bad_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, empty_db: str
) -> None:
    asyncio.run(add_conversation(empty_db, "conv_x"))
    args = ["--database-url", empty_db, "--conversation", "conv_x"]
    code, _, err = run(capsys, *args, "--format", "jsonl", "-o", str(tmp_path / "no" / "f"))
    assert code == 2 and "cannot write" in err
    code, out, _ = run(capsys, *args, "--format", "jsonl")
    assert code == 0 and json.loads(out)["record"] == "conversation"
    assert run(capsys, *args, "--format", "agui")[1] == "[]\n"
    assert run(capsys, *args, "--format", "mew")[1] == ""
    with pytest.raises(SystemExit) as exc:
        main([*args, "--format", "yaml"])
    assert exc.value.code == 2
