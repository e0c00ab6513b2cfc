"""The analytics views and ``alicia-stats`` on real PostgreSQL and SQLite, over traffic
with known timings: every figure the CLI prints is checked."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import DateTime, bindparam, text

from alicia.agent.engine.sink import META_FIRST_REASONING_MS, META_USAGE
from alicia.agent.storage.engine import create_engine
from alicia.agent.storage.stats import main
from alicia.agent.storage.writer import StorageWriter, WriterOptions, migrate
from alicia.harness import free_port
from alicia.protocol import (
    AssistantMessage,
    AssistantSentence,
    Body,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
    envelope,
)
from tests.paths import ROOT
from tests.support.db import new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CID = "conv_stats"
T0 = dt.datetime(2025, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
STEP_TEXTS = {"msg_u1": ["a" * 10, "b" * 20, "c" * 30], "msg_u2": ["d" * 40]}


def ms(n: float) -> dt.timedelta:
    return dt.timedelta(milliseconds=n)


def traffic() -> tuple[list[Envelope[Any]], dict[str, dt.datetime]]:
    """Three turns (two models) and the ``sent_at`` each record gets."""
    envs: list[Envelope[Any]] = []
    times: dict[str, dt.datetime] = {}
    n = 0

    def send(
        body: Body,
        key: str,
        at: dt.datetime,
        model: str | None = None,
        figures: dict[str, Any] | None = None,
    ) -> None:
        nonlocal n
        n += 1
        stanza = n if isinstance(body, UserMessage) else -n
        meta = {**({"model": model} if model else {}), **(figures or {})} or None
        envs.append(envelope(body, stanza_id=stanza, conversation_id=CID, meta=meta))
        times[key] = at

    # Turn 1, model-a: 3 steps (first after 100 ms), two tools (one fails), streamed answer at 1 s.
    send(UserMessage(id="msg_u1", conversation_id=CID, content="q1"), "msg_u1", T0)
    for i, content in enumerate(STEP_TEXTS["msg_u1"], 1):
        step = ReasoningStep(
            id=f"rs_1_{i}", conversation_id=CID, previous_id="msg_u1", content=content, step_index=i
        )
        send(step, f"rs_1_{i}", T0 + ms(100 * i))
    for tid, name in (("toolreq_1", "web_search"), ("toolreq_2", "calculator")):
        req = ToolUseRequest(
            id=tid, tool_name=name, parameters={}, execution="server", previous_id="msg_u1"
        )
        send(req, tid, T0 + ms(400))
    send(ToolUseResult(request_id="toolreq_1", success=True, result={}), "res_1", T0 + ms(600))
    send(
        ToolUseResult(request_id="toolreq_2", success=False, error_code="execution_error"),
        "res_2",
        T0 + ms(500),
    )
    send(
        StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID),
        "msg_a1",
        T0 + ms(1000),
        "model-a",
    )
    send(
        AssistantSentence(
            previous_id="msg_a1", conversation_id=CID, sequence=1, text="Done.", is_final=True
        ),
        "sent_1",
        T0 + ms(1500),
        figures=usage(100, 60, 40, first_reasoning_ms=80.0),  # on the streamed answer's end
    )
    # Turn 2, model-a: one step after 50 ms, whole answer after 500 ms.
    t1 = T0 + dt.timedelta(minutes=5)
    send(UserMessage(id="msg_u2", conversation_id=CID, content="q2"), "msg_u2", t1)
    step = ReasoningStep(
        id="rs_2_1",
        conversation_id=CID,
        previous_id="msg_u2",
        content=STEP_TEXTS["msg_u2"][0],
        step_index=1,
    )
    send(step, "rs_2_1", t1 + ms(50))
    send(
        AssistantMessage(id="msg_a2", conversation_id=CID, content="Fine.", previous_id="msg_u2"),
        "msg_a2",
        t1 + ms(500),
        "model-a",
        usage(50, 30, 20, first_reasoning_ms=120.5),
    )
    # Turn 3, model-b: no steps, a cancelled tool, answer after 200 ms.
    t2 = T0 + dt.timedelta(minutes=10)
    send(UserMessage(id="msg_u3", conversation_id=CID, content="q3"), "msg_u3", t2)
    req = ToolUseRequest(
        id="toolreq_3", tool_name="timer", parameters={}, execution="client", previous_id="msg_u3"
    )
    send(req, "toolreq_3", t2 + ms(10))
    send(
        ToolUseResult(request_id="toolreq_3", success=False, error_code="TOOL_CANCELLED"),
        "res_3",
        t2 + ms(110),
    )
    send(
        AssistantMessage(id="msg_a3", conversation_id=CID, content="Ok.", previous_id="msg_u3"),
        "msg_a3",
        t2 + ms(200),
        "model-b",
        usage(7, 3, 0),  # no reasoning text, so no time to it
    )
    return envs, times


def usage(
    prompt: int, completion: int, reasoning: int, *, first_reasoning_ms: float | None = None
) -> dict[str, Any]:
    """The storage-only meta the worker puts on an answer's last envelope."""
    meta: dict[str, Any] = {
        META_USAGE: {
            "promptTokens": prompt,
            "completionTokens": completion,
            "reasoningTokens": reasoning,
        }
    }
    if first_reasoning_ms is not None:
        meta[META_FIRST_REASONING_MS] = first_reasoning_ms
    return meta


async def set_times(url: str, times: dict[str, dt.datetime]) -> None:
    """Give every record its scripted time (the writer stamps wall-clock submit time)."""
    ts = DateTime(timezone=True)
    statements = [
        ("UPDATE alicia_messages SET sent_at = :t WHERE id = :k", ("msg_",)),
        ("UPDATE alicia_reasoning_steps SET sent_at = :t WHERE id = :k", ("rs_",)),
        ("UPDATE alicia_tool_uses SET sent_at = :t WHERE id = :k", ("toolreq_",)),
    ]
    engine = create_engine(url, pooled=False)
    try:
        async with engine.begin() as conn:
            for sql, prefixes in statements:
                stmt = text(sql).bindparams(bindparam("t", type_=ts))
                for key, at in times.items():
                    if key.startswith(prefixes):
                        await conn.execute(stmt, {"t": at, "k": key})
            done = text("UPDATE alicia_tool_uses SET completed_at = :t WHERE id = :k").bindparams(
                bindparam("t", type_=ts)
            )
            for n in (1, 2, 3):
                await conn.execute(done, {"t": times[f"res_{n}"], "k": f"toolreq_{n}"})
            answered = text(
                "UPDATE alicia_messages SET completed_at = :t WHERE id = :k"
            ).bindparams(bindparam("t", type_=ts))
            await conn.execute(answered, {"t": times["sent_1"], "k": "msg_a1"})
            await conn.execute(answered, {"t": times["msg_a2"], "k": "msg_a2"})
            await conn.execute(answered, {"t": times["msg_a3"], "k": "msg_a3"})
    finally:
        await engine.dispose()


# Not conftest.py's emptied ``url``: one database per backend, filled once for the module.
@pytest.fixture(scope="module", params=["postgres", "sqlite"])
async def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    tmp = tmp_path_factory.mktemp("stats")
    db = await new_database(request.param, pg, tmp, "stats")
    await migrate(db)
    envs, times = traffic()
    async with StorageWriter(db, WriterOptions(spill_dir=tmp / "spill", migrate=False)) as w:
        for env in envs:
            w.submit(env)
        await w.flush(timeout=30)
    await set_times(db, times)
    return db


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main([*args, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def approx(value: Any) -> Any:
    return pytest.approx(value, abs=0.5)


def test_daily_per_model(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    daily = run_json(capsys, "--database-url", url, "daily")["daily"]
    assert [(r["day"][:10], r["model"]) for r in daily] == [
        ("2025-03-01", "model-a"),
        ("2025-03-01", "model-b"),
    ]
    a, b = daily
    assert (a["answers"], a["steps"], a["reasoning_chars"]) == (2, 4, 100)
    assert a["avg_steps"] == 2.0 and a["avg_reasoning_chars"] == 50.0
    assert a["avg_ms_to_first_step"] == approx(75) and a["max_ms_to_first_step"] == approx(100)
    assert a["avg_ms_to_answer"] == approx(750) and a["max_ms_to_answer"] == approx(1000)
    assert (a["tool_calls"], a["tool_failures"], a["tool_failure_rate"]) == (2, 1, 0.5)
    assert (a["reasoning_tokens"], a["avg_reasoning_tokens"]) == (60, 30.0)
    assert a["avg_first_reasoning_ms"] == pytest.approx(100.25)
    assert (b["answers"], b["steps"], b["reasoning_chars"]) == (1, 0, 0)
    assert b["avg_ms_to_first_step"] is None and b["avg_ms_to_answer"] == approx(200)
    assert (b["tool_calls"], b["tool_failures"], b["tool_failure_rate"]) == (1, 1, 1.0)
    assert (b["reasoning_tokens"], b["avg_reasoning_tokens"]) == (0, 0.0)
    assert b["avg_first_reasoning_ms"] is None


def test_reasoning_tokens_and_time_to_first_reasoning_per_model(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reasoning = run_json(capsys, "--database-url", url, "reasoning")["reasoning"]
    assert reasoning == [
        {
            "model": "model-a",
            "answers": 2,
            "answers_with_usage": 2,
            "prompt_tokens": 150,
            "completion_tokens": 90,
            "reasoning_tokens": 60,
            "avg_reasoning_tokens": 30.0,
            "p50_first_reasoning_ms": 100.25,
            "avg_first_reasoning_ms": 100.25,
        },
        {
            "model": "model-b",
            "answers": 1,
            "answers_with_usage": 1,
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "reasoning_tokens": 0,
            "avg_reasoning_tokens": 0.0,
            "p50_first_reasoning_ms": None,
            "avg_first_reasoning_ms": None,
        },
    ]
    # The daily view has the same sums, per day.
    [a, _] = run_json(capsys, "--database-url", url, "daily")["daily"]
    assert (a["reasoning_tokens"], a["avg_reasoning_tokens"]) == (60, 30.0)


def test_answers_turns_and_tools(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "--database-url", url, "answers", "turns", "tools")
    answers = {r["answer_id"]: r for r in report["answers"]}
    assert [r["answer_id"] for r in report["answers"]] == ["msg_a3", "msg_a2", "msg_a1"]
    a1 = answers["msg_a1"]
    assert (a1["model"], a1["completion_status"], a1["steps"], a1["reasoning_chars"]) == (
        "model-a",
        "completed",
        3,
        60,
    )
    assert a1["answer_chars"] == len("Done.")
    assert a1["ms_to_first_step"] == approx(100) and a1["ms_to_answer"] == approx(1000)
    assert (a1["reasoning_tokens"], a1["first_reasoning_ms"]) == (40, 80.0)
    assert (answers["msg_a2"]["steps"], answers["msg_a2"]["reasoning_chars"]) == (1, 40)
    assert (answers["msg_a2"]["reasoning_tokens"], answers["msg_a2"]["first_reasoning_ms"]) == (
        20,
        120.5,
    )
    assert answers["msg_a3"]["ms_to_first_step"] is None
    assert (answers["msg_a3"]["reasoning_tokens"], answers["msg_a3"]["first_reasoning_ms"]) == (
        0,
        None,
    )

    turns = {r["user_message_id"]: r for r in report["turns"]}
    assert sorted(turns) == ["msg_u1", "msg_u3"]
    u1, u3 = turns["msg_u1"], turns["msg_u3"]
    assert (u1["tool_calls"], u1["succeeded"], u1["failed"], u1["unfinished"]) == (2, 1, 1, 0)
    assert u1["failure_rate"] == 0.5 and u3["failure_rate"] == 1.0

    tools = {r["tool_name"]: r for r in report["tools"]}
    assert {k: (v["calls"], v["failed"]) for k, v in tools.items()} == {
        "web_search": (1, 0),
        "calculator": (1, 1),
        "timer": (1, 1),
    }
    assert tools["web_search"]["avg_ms"] == approx(200)
    assert tools["timer"]["avg_ms"] == approx(100)


def test_days_filter_and_limit(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    recent = run_json(capsys, "--database-url", url, "--days", "7")
    assert recent["daily"] == [] and recent["answers"] == [] and recent["turns"] == []
    assert recent["reasoning"] == []
    assert len(recent["tools"]) == 3  # not dated
    assert len(run_json(capsys, "--database-url", url, "--limit", "1", "answers")["answers"]) == 1


def test_tables_are_printed(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", url]) == 0
    out = capsys.readouterr().out
    for title in (
        "Per model and day",
        "Reasoning tokens and time to first reasoning per model",
        "Reasoning per answer",
        "Tool calls per turn",
        "Tools",
    ):
        assert title in out
    assert "model-a" in out and "web_search" in out
    assert "p50 ms to reasoning" in out and "100.2" in out
    # A normal terminal: the default tables fit 100 columns, whatever rich detects.
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "--wide" in out


def test_the_wide_form_has_every_column(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--database-url", url, "--wide"]) == 0
    out = capsys.readouterr().out
    tops = [line for line in out.splitlines() if line.startswith("┏")]
    daily_columns = tops[0].count("┳") + 1
    assert daily_columns == 17  # every column of alicia_model_daily
    assert max(len(line) for line in out.splitlines()) > 100


def test_bad_invocations_exit_with_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main([]) == 2
    assert "DATABASE_URL" in capsys.readouterr().err
    dead = f"postgresql+asyncpg://alicia@127.0.0.1:{free_port()}/x"
    assert main(["--database-url", dead]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["--database-url", dead, "nonsense"])
    assert exc.value.code == 2


def test_module_and_console_script(url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "alicia.agent.storage.stats", "--json", "tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"DATABASE_URL": url, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert {r["tool_name"] for r in json.loads(done.stdout)["tools"]} == {
        "web_search",
        "calculator",
        "timer",
    }
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert scripts["alicia-stats"].value == "alicia.agent.storage.stats:main"


SPREAD: dict[str, list[Any]] = {
    # model -> per answer: (reasoning tokens, ms to first reasoning) or a meta to store
    "model-x": [(5, 30.0), (6, 10.0), (7, 90.0)],
    "model-y": [(1, 40), (2, 10.0), (3, 20.0), (4, 100.0), None, "junk"],
}
"""Odd and even counts of times, an int time, an answer without figures, junk figures."""


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
async def spread_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    tmp = tmp_path_factory.mktemp("spread")
    db = await new_database(request.param, pg, tmp, "spread")
    await migrate(db)
    envs: list[Envelope[Any]] = []
    for model, answers in SPREAD.items():
        for i, figures in enumerate(answers):
            uid, aid = f"msg_u_{model}_{i}", f"msg_a_{model}_{i}"
            meta: dict[str, Any] = {"model": model}
            if isinstance(figures, tuple):
                meta |= usage(100, 50 + figures[0], figures[0], first_reasoning_ms=figures[1])
            elif figures == "junk":
                meta |= {META_USAGE: {"reasoningTokens": -1}, META_FIRST_REASONING_MS: "soon"}
            n = len(envs)
            envs.append(
                envelope(
                    UserMessage(id=uid, conversation_id=CID, content="q"),
                    stanza_id=n + 1,
                    conversation_id=CID,
                )
            )
            envs.append(
                envelope(
                    AssistantMessage(id=aid, conversation_id=CID, content="a", previous_id=uid),
                    stanza_id=-(n + 2),
                    conversation_id=CID,
                    meta=meta,
                )
            )
    async with StorageWriter(db, WriterOptions(spill_dir=tmp / "spill", migrate=False)) as w:
        for env in envs:
            w.submit(env)
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0
    return db


def test_median_and_mean_time_to_first_reasoning(
    spread_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_json(capsys, "--database-url", spread_url, "--days", "1", "reasoning")
    y, x = report["reasoning"]  # most answers first
    assert y == {
        "model": "model-y",
        "answers": 6,
        "answers_with_usage": 4,
        "prompt_tokens": 400,
        "completion_tokens": 210,
        "reasoning_tokens": 10,
        "avg_reasoning_tokens": 2.5,
        "p50_first_reasoning_ms": 30.0,  # (20 + 40) / 2
        "avg_first_reasoning_ms": 42.5,
    }
    assert x == {
        "model": "model-x",
        "answers": 3,
        "answers_with_usage": 3,
        "prompt_tokens": 300,
        "completion_tokens": 168,
        "reasoning_tokens": 18,
        "avg_reasoning_tokens": 6.0,
        "p50_first_reasoning_ms": 30.0,
        "avg_first_reasoning_ms": pytest.approx(130 / 3),
    }
    limited = run_json(capsys, "--database-url", spread_url, "--limit", "1", "reasoning")
    assert [r["model"] for r in limited["reasoning"]] == ["model-y"]
    [day_x, day_y] = run_json(capsys, "--database-url", spread_url, "daily")["daily"]
    assert (day_x["model"], day_x["reasoning_tokens"], day_x["avg_reasoning_tokens"]) == (
        "model-x",
        18,
        6.0,
    )
    assert day_y["avg_first_reasoning_ms"] == 42.5
