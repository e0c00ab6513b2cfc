"""An answer's figures (token usage, time to first reasoning) in storage, against real
databases (PostgreSQL and SQLite): stored with the answer however it arrived, kept when
redelivered, junk ignored without losing the answer, and in the rows of a batch."""

from __future__ import annotations

import math
from typing import Any

import pytest

from alicia.agent.engine.sink import META_FIRST_REASONING_MS, META_USAGE
from alicia.agent.storage.rows import build_rows
from alicia.agent.storage.writer import StorageWriter, WriterOptions
from alicia.protocol import AssistantMessage, AssistantSentence, StartAnswer, UserMessage
from tests.storage.traffic import CID, MODEL, Conv, step, write
from tests.support.db import fetch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def figures(
    prompt: Any = 120, completion: Any = 80, reasoning: Any = 64, first_ms: Any = 812.5
) -> dict[str, Any]:
    """The storage-only meta the worker adds to an answer's last stored envelope."""
    return {
        "model": MODEL,
        META_USAGE: {
            "promptTokens": prompt,
            "completionTokens": completion,
            "reasoningTokens": reasoning,
        },
        META_FIRST_REASONING_MS: first_ms,
    }


FIGURES_SQL = (
    "SELECT id, prompt_tokens, completion_tokens, reasoning_tokens, first_reasoning_ms, "
    "contents, completion_status, placeholder FROM alicia_messages "
    "WHERE message_role = 'assistant' ORDER BY id"
)


async def test_answer_usage_and_time_to_first_reasoning_are_stored(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    async with StorageWriter(url, options) as w:
        # Streamed: StartAnswer and sentences stored first; the figures come later, on the
        # answer's AssistantMessage, when its row is no placeholder any more.
        for env in [
            c.client(UserMessage(id="msg_u1", conversation_id=CID, content="q1")),
            c.server(
                StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID),
                meta={"model": MODEL},
            ),
            c.server(
                AssistantSentence(
                    previous_id="msg_a1", conversation_id=CID, sequence=1, text="A.", is_final=True
                )
            ),
        ]:
            w.submit(env)
        await w.flush(timeout=30)
        w.submit(
            c.server(
                AssistantMessage(
                    id="msg_a1", conversation_id=CID, content="A.", previous_id="msg_u1"
                ),
                meta=figures(),
            )
        )
        # Not streamed: the AssistantMessage alone, figures in the same batch as its row;
        # then one whose figures ride on its final sentence, an int time, no StartAnswer.
        w.submit(c.client(UserMessage(id="msg_u2", conversation_id=CID, content="q2")))
        w.submit(
            c.server(
                AssistantMessage(
                    id="msg_a2", conversation_id=CID, content="B.", previous_id="msg_u2"
                ),
                meta=figures(10, 5, 0, 0),
            )
        )
        w.submit(
            c.server(
                AssistantSentence(
                    previous_id="msg_a3", conversation_id=CID, sequence=1, text="C.", is_final=True
                ),
                meta=figures(7, 6, 5, 43),
            )
        )
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0
    rows = await fetch(url, FIGURES_SQL)
    got = {
        r["id"]: (
            r["prompt_tokens"],
            r["completion_tokens"],
            r["reasoning_tokens"],
            r["first_reasoning_ms"],
        )
        for r in rows
    }
    assert got == {
        "msg_a1": (120, 80, 64, 812.5),
        "msg_a2": (10, 5, 0, 0.0),
        "msg_a3": (7, 6, 5, 43.0),
    }
    a1 = next(r for r in rows if r["id"] == "msg_a1")
    assert (a1["contents"], a1["completion_status"], a1["placeholder"]) == (
        "A.",
        "completed",
        False,
    )
    [view] = await fetch(
        url,
        "SELECT prompt_tokens, completion_tokens, reasoning_tokens, first_reasoning_ms "
        "FROM alicia_answer_reasoning WHERE answer_id = 'msg_a1'",
    )
    assert view == {
        "prompt_tokens": 120,
        "completion_tokens": 80,
        "reasoning_tokens": 64,
        "first_reasoning_ms": 812.5,
    }
    # Redelivered, or repeated without figures: the stored figures stay as they are.
    await write(
        url,
        options,
        [
            c.server(
                AssistantMessage(
                    id="msg_a1", conversation_id=CID, content="A.", previous_id="msg_u1"
                ),
                meta=figures(),
            ),
            c.server(
                AssistantMessage(
                    id="msg_a2", conversation_id=CID, content="B.", previous_id="msg_u2"
                ),
                meta={"model": MODEL},
            ),
        ],
    )
    assert await fetch(url, FIGURES_SQL) == rows


async def test_junk_figures_are_ignored_and_the_answer_kept(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    junk: dict[str, dict[str, Any]] = {
        "msg_j1": {META_USAGE: "lots", META_FIRST_REASONING_MS: "fast"},
        "msg_j2": figures(-1, 1.5, True, -3.0),
        "msg_j3": figures(2**31, "7", None, math.nan),
        "msg_j4": figures(None, None, None, math.inf),
        "msg_j5": {META_USAGE: ["promptTokens", 1], META_FIRST_REASONING_MS: 10**400},
        "msg_j6": figures(5, {"n": 1}, 2**31 - 1, False),  # partly valid
        "msg_j7": {META_USAGE: {"reasoningTokens": 3}},  # only one figure reported
    }
    envs = []
    for n, (aid, meta) in enumerate(junk.items()):
        uid = f"msg_q{n}"
        envs.append(c.client(UserMessage(id=uid, conversation_id=CID, content="q")))
        envs.append(
            c.server(
                AssistantMessage(id=aid, conversation_id=CID, content="a", previous_id=uid),
                meta=meta,
            )
        )
    w = await write(url, options, envs)
    assert w.stats.dead_lettered == 0 and w.stats.written == len(envs)
    rows = {r["id"]: r for r in await fetch(url, FIGURES_SQL)}
    assert sorted(rows) == sorted(junk)
    figures_of = {
        mid: (r["prompt_tokens"], r["completion_tokens"], r["reasoning_tokens"])
        for mid, r in rows.items()
    }
    empty = (None, None, None)
    assert figures_of == {
        "msg_j1": empty,
        "msg_j2": empty,
        "msg_j3": empty,
        "msg_j4": empty,
        "msg_j5": empty,
        "msg_j6": (5, None, 2**31 - 1),
        "msg_j7": (None, None, 3),
    }
    assert all(r["first_reasoning_ms"] is None for r in rows.values())
    assert all((r["contents"], r["completion_status"]) == ("a", "completed") for r in rows.values())


def test_build_rows_keeps_valid_figures_and_leaves_the_fast_path() -> None:
    from alicia.agent.storage.dialect import Dialect
    from alicia.agent.storage.spill import Item

    c = Conv()
    answer = AssistantMessage(id="msg_a1", conversation_id=CID, content="a", previous_id="msg_u1")
    items = [
        Item(1, 1_700_000_000.0, c.server(step("msg_u1", 1, "s"))),
        Item(2, 1_700_000_001.0, c.server(answer, meta=figures(1, 2, 3, 4.5))),
        Item(3, 1_700_000_002.0, c.server(answer, meta=figures(9, 9, 9, 9.0))),  # first wins
        Item(4, 1_700_000_003.0, c.server(answer, meta={"model": MODEL})),
    ]
    rows = build_rows(items)
    assert rows.figures == {
        "msg_a1": {
            "b_id": "msg_a1",
            "b_prompt": 1,
            "b_completion": 2,
            "b_reasoning": 3,
            "b_first_reasoning_ms": 4.5,
        }
    }
    postgres = Dialect(postgres=True, copy_min_rows=100)
    assert not postgres.only_steps(rows)
    steps_only = build_rows(items[:1])
    assert steps_only.figures == {} and postgres.only_steps(steps_only)
    assert (
        build_rows([Item(1, 1.0, c.server(answer, meta=figures("1", -2, 2.0, "x")))]).figures == {}
    )
