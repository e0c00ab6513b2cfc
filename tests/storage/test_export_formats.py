"""``alicia-export`` on real PostgreSQL and SQLite, filled by the real StorageWriter: each
format is checked against its ecosystem's shape (AG-UI with ``ag_ui.core`` and the
TypeScript SDK's zod schemas, MEW envelopes, OpenHands events, the stored rows)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Message
from pydantic import TypeAdapter
from sqlalchemy import text

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.export.cli import main
from alicia.agent.storage.engine import create_engine
from alicia.agent.storage.writer import StorageWriter, WriterOptions, migrate
from alicia.protocol import (
    AssistantMessage,
    AssistantSentence,
    Body,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
    envelope,
)
from tests.paths import ROOT
from tests.support.db import new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CID = "conv_export"
CANARY = "CANARY-zdr-4e1f"
SEALER = ReasoningSealer([("k1", bytes(range(32)))])
SEALED = SEALER.seal(CID, f"{CANARY}: the stored step is only this JWE")
# Ids whose alphabetical order is not their time order, so order must come from sent_at.
STEP_1, STEP_ZDR, STEP_3 = "rs_z1", "rs_m2", "rs_a3"
DELETED = ("rs_gone", "msg_u3", "msg_a3", "rs_of_deleted_turn")


def traffic() -> list[Body]:
    """Three turns: steps (one only encrypted), a tool, a failing tool, a deleted turn."""
    return [
        UserMessage(id="msg_u1", conversation_id=CID, content="What is 17 times 23, plus 4?"),
        ReasoningStep(
            id=STEP_1,
            conversation_id=CID,
            previous_id="msg_u1",
            content="Erst 17 mal 23, größer.",
            step_index=1,
        ),
        ReasoningStep(
            id=STEP_ZDR,
            conversation_id=CID,
            previous_id="msg_u1",
            content="",
            encrypted_value=SEALED,
            step_index=2,
        ),
        ToolUseRequest(
            id="tu_calc",
            tool_name="calculator",
            parameters={"expression": "17*23+4"},
            execution="server",
            conversation_id=CID,
            previous_id="msg_u1",
        ),
        ToolUseResult(request_id="tu_calc", success=True, result={"value": 395}),
        ReasoningStep(
            id=STEP_3, conversation_id=CID, previous_id="msg_u1", content="So: 395.", step_index=3
        ),
        StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID),
        AssistantSentence(
            previous_id="msg_a1", conversation_id=CID, sequence=1, text="It is 395.", is_final=True
        ),
        UserMessage(
            id="msg_u2", conversation_id=CID, content="And the time?", previous_id="msg_a1"
        ),
        ReasoningStep(
            id="rs_gone", conversation_id=CID, previous_id="msg_u2", content="gone", step_index=1
        ),
        ToolUseRequest(
            id="tu_clock",
            tool_name="clock",
            parameters={},
            execution="server",
            conversation_id=CID,
            previous_id="msg_u2",
        ),
        ToolUseResult(
            request_id="tu_clock",
            success=False,
            error_code="execution_error",
            error_message="clock unavailable",
        ),
        AssistantMessage(
            id="msg_a2", conversation_id=CID, content="I cannot tell.", previous_id="msg_u2"
        ),
        UserMessage(id="msg_u3", conversation_id=CID, content="forget me", previous_id="msg_a2"),
        ReasoningStep(
            id="rs_of_deleted_turn",
            conversation_id=CID,
            previous_id="msg_u3",
            content="x",
            step_index=1,
        ),
        AssistantMessage(id="msg_a3", conversation_id=CID, content="ok", previous_id="msg_u3"),
        UserMessage(id="msg_other", conversation_id="conv_other", content="not this one"),
    ]


async def soft_delete(url: str) -> None:
    """Soft-delete a step, a whole turn's messages and a whole conversation."""
    now = dt.datetime.now(dt.UTC)
    engine = create_engine(url, pooled=False)
    try:
        async with engine.begin() as conn:
            for table, ids in (
                ("alicia_reasoning_steps", ("rs_gone",)),
                ("alicia_messages", ("msg_u3", "msg_a3")),
                ("alicia_conversations", ("conv_other",)),
            ):
                for rid in ids:
                    await conn.execute(
                        text(f"UPDATE {table} SET deleted_at = :t WHERE id = :id"),
                        {"t": now, "id": rid},
                    )
    finally:
        await engine.dispose()


# Not conftest.py's emptied ``url``: one database per backend, filled once for the module.
@pytest.fixture(scope="module", params=["postgres", "sqlite"])
async def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    tmp = tmp_path_factory.mktemp("export")
    db = await new_database(request.param, pg, tmp, "export")
    await migrate(db)
    async with StorageWriter(db, WriterOptions(spill_dir=tmp / "spill", migrate=False)) as w:
        for n, body in enumerate(traffic(), 1):
            stanza = n if isinstance(body, UserMessage) else -n
            meta = {"model": "qwen3"} if isinstance(body, StartAnswer | AssistantMessage) else None
            cid = getattr(body, "conversation_id", None) or CID
            w.submit(envelope(body, stanza_id=stanza, conversation_id=cid, meta=meta))
            await asyncio.sleep(0.003)  # distinct sent_at, as a live turn has
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0
    await soft_delete(db)
    return db


def export(url: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["--database-url", url, "--conversation", CID, "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert CANARY not in out  # never decrypted
    for gone in DELETED:
        assert gone not in out
    return out


def test_agui_is_an_ag_ui_message_history(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(export(url, "agui", capsys))
    adapter: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
    parsed = adapter.validate_python(data)
    # The wire form is exactly what the SDK writes: camelCase, absent fields left out.
    assert adapter.dump_python(parsed, by_alias=True, mode="json") == data
    assert [(m["role"], m["id"]) for m in data] == [
        ("user", "msg_u1"),
        ("reasoning", STEP_1),
        ("reasoning", STEP_ZDR),
        ("assistant", "tu_calc.call"),
        ("tool", "tu_calc.result"),
        ("reasoning", STEP_3),
        ("assistant", "msg_a1"),
        ("user", "msg_u2"),
        ("assistant", "tu_clock.call"),
        ("tool", "tu_clock.result"),
        ("assistant", "msg_a2"),
    ]
    u1, r1, zdr, call, result, r3, a1, u2, _, failed, a2 = data
    assert u1["content"] == "What is 17 times 23, plus 4?"
    assert r1 == {"id": STEP_1, "role": "reasoning", "content": "Erst 17 mal 23, größer."}
    assert zdr == {"id": STEP_ZDR, "role": "reasoning", "content": "", "encryptedValue": SEALED}
    [tool_call] = call["toolCalls"]
    assert tool_call["id"] == "tu_calc" and tool_call["type"] == "function"
    assert tool_call["function"]["name"] == "calculator"
    assert json.loads(tool_call["function"]["arguments"]) == {"expression": "17*23+4"}
    assert "content" not in call
    assert result == {
        "id": "tu_calc.result",
        "role": "tool",
        "content": '{"value": 395}',
        "toolCallId": "tu_calc",
    }
    assert r3["content"] == "So: 395."
    assert a1 == {"id": "msg_a1", "role": "assistant", "content": "It is 395."}
    assert u2["content"] == "And the time?"
    assert failed["toolCallId"] == "tu_clock" and failed["error"] == "clock unavailable"
    assert a2["content"] == "I cannot tell."


def test_agui_passes_the_typescript_sdks_schema(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """@ag-ui/core's zod MessageSchema accepts every message and changes nothing."""
    out = export(url, "agui", capsys)
    script = (
        "const {MessageSchema} = require('@ag-ui/core/schemas');"
        "const data = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(data.map((m) => MessageSchema.parse(m))));"
    )
    done = subprocess.run(
        ["node", "-e", script], input=out, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(out)


MEW_KEYS = {"protocol", "id", "ts", "from", "kind", "payload"}


def test_mew_envelopes_link_reasoning_tools_and_answers(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = export(url, "mew", capsys).splitlines()
    envs = [json.loads(line) for line in lines]
    ids = [e["id"] for e in envs]
    assert len(set(ids)) == len(ids)
    for e in envs:
        assert MEW_KEYS <= set(e) <= MEW_KEYS | {"to", "correlation_id", "context"}
        assert e["protocol"] == "mew/v0.4" and isinstance(e["payload"], dict)
        assert dt.datetime.fromisoformat(e["ts"]).tzinfo is not None
        for ref in e.get("correlation_id", []):
            assert ref in ids[: ids.index(e["id"])]  # an earlier envelope
    times = [dt.datetime.fromisoformat(e["ts"]) for e in envs]
    assert times == sorted(times)
    turn1 = envs[:9]
    assert [e["kind"] for e in turn1] == [
        "chat",
        "reasoning/start",
        "reasoning/thought",
        "reasoning/thought",
        "mcp/request",
        "mcp/response",
        "reasoning/thought",
        "reasoning/conclusion",
        "chat",
    ]
    question, start, t1, zdr, request, response, t3, conclusion, answer = turn1
    assert question["from"] == "user" and question["payload"]["text"].startswith("What is 17")
    assert "context" not in start and start["correlation_id"] == ["msg_u1"]
    for e in (t1, zdr, request, response, t3, conclusion):
        assert e["context"] == start["id"] and e["from"] == "alicia"
    assert t1["payload"] == {"message": "Erst 17 mal 23, größer."}
    assert zdr["payload"] == {"message": "", "encrypted_value": SEALED}
    assert request["id"] == "tu_calc"
    assert request["payload"] == {
        "jsonrpc": "2.0",
        "id": "tu_calc",
        "method": "tools/call",
        "params": {"name": "calculator", "arguments": {"expression": "17*23+4"}},
    }
    assert response["correlation_id"] == ["tu_calc"]
    assert response["payload"]["id"] == request["payload"]["id"]
    result = response["payload"]["result"]
    assert result["isError"] is False and result["structuredContent"] == {"value": 395}
    assert json.loads(result["content"][0]["text"]) == {"value": 395}
    assert answer["kind"] == "chat" and answer["id"] == "msg_a1" and "context" not in answer
    assert answer["correlation_id"] == ["msg_u1"] and answer["from"] == "alicia"
    assert answer["payload"] == {"text": "It is 395.", "format": "plain"}
    turn2 = envs[9:]
    assert [e["kind"] for e in turn2] == [
        "chat",
        "reasoning/start",
        "mcp/request",
        "mcp/response",
        "reasoning/conclusion",
        "chat",
    ]
    failed = turn2[3]["payload"]["result"]
    assert failed["isError"] is True and failed["content"][0]["text"] == "clock unavailable"
    assert turn2[-1]["correlation_id"] == ["msg_u2"]


def test_openhands_events_carry_thought_and_reasoning_content(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[dict[str, Any]] = json.loads(export(url, "openhands", capsys))
    assert [e["id"] for e in events] == list(range(len(events)))
    for e in events:
        assert {"id", "timestamp", "source", "message"} <= set(e)
        assert ("action" in e) != ("observation" in e)
        if "action" in e:
            assert isinstance(e["args"], dict)
        else:
            assert events[e["cause"]]["action"] == "call_tool_mcp"
            assert isinstance(e["content"], str) and isinstance(e["extras"], dict)
    kinds = [(e["source"], e.get("action") or e["observation"]) for e in events]
    assert kinds == [
        ("user", "message"),
        ("agent", "call_tool_mcp"),
        ("agent", "mcp"),
        ("agent", "message"),
        ("user", "message"),
        ("agent", "call_tool_mcp"),
        ("agent", "error"),
        ("agent", "message"),
    ]
    user, call, observation, answer, _, _, error, answer2 = events
    assert user["args"]["content"] == "What is 17 times 23, plus 4?"
    assert call["args"] == {
        "name": "calculator",
        "arguments": {"expression": "17*23+4"},
        "thought": "",
    }
    assert observation["cause"] == call["id"]
    assert json.loads(observation["content"]) == {"value": 395}
    assert observation["extras"] == {"name": "calculator", "arguments": {"expression": "17*23+4"}}
    assert answer["message"] == "It is 395." and answer["args"]["content"] == "It is 395."
    assert answer["args"]["thought"] == ""
    # The turn's plaintext steps joined with newlines; the encrypted one is not there.
    assert answer["args"]["reasoning_content"] == "Erst 17 mal 23, größer.\nSo: 395."
    assert error["content"] == "clock unavailable"
    assert error["extras"] == {"error_id": "execution_error"}
    assert "reasoning_content" not in answer2["args"]  # omitted when empty


def test_jsonl_is_the_stored_rows_in_conversation_order(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [json.loads(line) for line in export(url, "jsonl", capsys).splitlines()]
    assert [(r["record"], r["id"]) for r in rows] == [
        ("conversation", CID),
        ("message", "msg_u1"),
        ("reasoning_step", STEP_1),
        ("reasoning_step", STEP_ZDR),
        ("tool_use", "tu_calc"),
        ("reasoning_step", STEP_3),
        ("message", "msg_a1"),
        ("message", "msg_u2"),
        ("tool_use", "tu_clock"),
        ("message", "msg_a2"),
    ]
    by_id = {r["id"]: r for r in rows}
    assert by_id[STEP_ZDR]["content"] == SEALED  # as stored: the JWE
    assert by_id[STEP_3]["sequence_number"] == 3 and by_id[STEP_3]["message_id"] == "msg_u1"
    calc = by_id["tu_calc"]
    assert calc["tool_arguments"] == {"expression": "17*23+4"}
    assert calc["tool_result"] == {"value": 395} and calc["status"] == "success"
    assert by_id["tu_clock"]["status"] == "error"
    a1 = by_id["msg_a1"]
    assert a1["contents"] == "It is 395." and a1["model"] == "qwen3"
    assert a1["message_role"] == "assistant" and a1["placeholder"] is False
    assert all(r["deleted_at"] is None for r in rows)
    assert dt.datetime.fromisoformat(a1["sent_at"]) > dt.datetime.fromisoformat(
        by_id["msg_u1"]["sent_at"]
    )


def test_the_console_script_as_a_user_runs_it(url: str, tmp_path: Path) -> None:
    """``alicia-export`` and ``python -m alicia.agent.export`` in a fresh process."""
    script = Path(sys.executable).parent / "alicia-export"
    env = {"DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
    for fmt in ("agui", "mew", "openhands", "jsonl"):
        target = tmp_path / f"out.{fmt}"
        done = subprocess.run(
            [str(script), "--conversation", CID, "--format", fmt, "--output", str(target)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "" and target.read_text(encoding="utf-8")
    json.loads((tmp_path / "out.agui").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "alicia.agent.export", "--conversation", CID, "--format", "mew"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (tmp_path / "out.mew").read_text(encoding="utf-8")
    for missing in ("conv_nope", "conv_other"):  # unknown, and soft-deleted
        done = subprocess.run(
            [str(script), "--conversation", missing, "--format", "agui"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 2 and done.stdout == ""
        assert f"no conversation {missing!r}" in done.stderr
        assert "Traceback" not in done.stderr
