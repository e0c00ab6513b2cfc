"""The AG-UI endpoint as a web app calls it: ``python -m alicia.agent.agui`` over real HTTP,
the recorded LLM over real HTTP, tokens minted like an app backend's.

Every event validates against ``ag-ui-protocol``'s models; the order is the one the
issue names; reasoning streams token by token; each level gets exactly its rendition
(a canary phrase of the recorded reasoning reaches only ``full``); tampered values end
the run with RUN_ERROR; a request without a valid token gets 401 and no stream.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.llm.summary import extractive_summary
from alicia.harness import LiveKitServer
from alicia.harness.ports import free_port, port_open
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import new_id
from tests.paths import ROOT
from tests.support.agui_endpoint import AguiProcess, EventStream, agui_token, post_run, run_input

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KEY = bytes(range(32))
KEYS = f"k1={base64.b64encode(KEY).decode()}"
CANARY = "classic trap"  # in the recorded reasoning of deepseek_reasoning_content, step 1
EVENT = TypeAdapter(Event)
AGUI_ENV = {"ALICIA_REASONING_KEYS": KEYS}  # agui (tests/agui/conftest.py)


def user(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {"id": message_id or new_id("msg"), "role": "user", "content": text}


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def validated(events: list[dict[str, Any]]) -> None:
    """Every event is a valid ag-ui-protocol event, and none is a deprecated THINKING_*."""
    for event in events:
        EVENT.validate_python(event)
    assert not [t for t in types(events) if t.startswith("THINKING")]


async def run_level(
    agui: AguiProcess, server: LiveKitServer, llm: RecordedLLM, level: str | None
) -> list[dict[str, Any]]:
    thread = new_id("conv")
    spec = llm.spec("deepseek_reasoning_content")
    llm.script("deepseek_reasoning_content")
    token = agui_token(server, thread, f"web-{level}", level)
    status, events, text = await post_run(agui.url, token, run_input(thread, [user(spec.user)]))
    assert status == 200, f"{text}\n{agui.log()}"
    validated(events)
    return events


async def test_a_full_caller_gets_the_reasoning_streamed_then_the_answer_in_order(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    events = await run_level(agui, livekit_server, llm, "full")
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    # RUN_STARTED, REASONING_START, the reasoning message, REASONING_END, the text message.
    order = [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert [k for k in kinds if k in order] == order
    deltas = [e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT"]
    # Streamed as the tokens arrive: one event per recorded reasoning chunk, not per step.
    assert "".join(deltas) == spec.reasoning
    assert len(deltas) > 4 * len(spec.steps)
    start = next(e for e in events if e["type"] == "REASONING_MESSAGE_START")
    assert start["role"] == "reasoning"
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer.strip() == spec.answer
    assert CANARY not in answer
    assert "REASONING_ENCRYPTED_VALUE" not in kinds  # full needs none


@pytest.mark.parametrize("level", ["summary", "encrypted", "none", None])
async def test_each_level_gets_exactly_its_rendition_and_the_canary_only_full(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM, level: str | None
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    assert CANARY in spec.steps[0]
    events = await run_level(agui, livekit_server, llm, level)
    raw = str(events)
    assert CANARY not in raw
    kinds = types(events)
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer.strip() == spec.answer  # every level gets the whole answer
    contents = [e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT"]
    values = [e for e in events if e["type"] == "REASONING_ENCRYPTED_VALUE"]
    thread = events[0]["threadId"]
    sealer = ReasoningSealer([("k1", KEY)])
    if level == "summary":
        assert "".join(contents) == "\n\n".join(extractive_summary(s) for s in spec.steps)
    else:
        assert contents == []
    if level in ("summary", "encrypted"):
        assert len(values) == 1 and values[0]["subtype"] == "message"
        message = next(e for e in events if e["type"] == "REASONING_MESSAGE_START")
        assert values[0]["entityId"] == message["messageId"]
        assert sealer.open(values[0]["encryptedValue"], thread) == "\n\n".join(spec.steps)
        assert kinds.index("REASONING_ENCRYPTED_VALUE") < kinds.index("REASONING_END")
    else:  # none, and a token that grants nothing (the deployment default: none)
        assert values == []
        assert not [k for k in kinds if k.startswith("REASONING")]


async def test_without_a_valid_token_the_answer_is_401_and_no_stream(
    agui: AguiProcess, livekit_server: LiveKitServer
) -> None:
    thread = new_id("conv")
    body = run_input(thread, [user("hello")])
    forged = agui_token(livekit_server, thread, "web-x")[:-4] + "AAAA"
    for token in (None, "not-a-jwt", forged):
        status, events, text = await post_run(agui.url, token, body)
        assert (status, events) == (401, []), text
        assert "text/event-stream" not in text
    other = agui_token(livekit_server, "conv_other", "web-x")
    status, events, _ = await post_run(agui.url, other, body)
    assert (status, events) == (403, [])
    status, _, text = await post_run(agui.url, agui_token(livekit_server, thread, "w"), {"x": 1})
    assert status == 400 and "RunAgentInput" in text


async def test_a_tampered_value_ends_the_run_with_run_error_naming_the_message(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    thread = new_id("conv")
    token = agui_token(livekit_server, thread, "web-s", "summary")
    spec = llm.spec("deepseek_reasoning_content")
    llm.script("deepseek_reasoning_content")
    first_user = user(spec.user)
    status, events, _ = await post_run(agui.url, token, run_input(thread, [first_user]))
    assert status == 200
    value = next(e for e in events if e["type"] == "REASONING_ENCRYPTED_VALUE")
    answer_id = next(e for e in events if e["type"] == "TEXT_MESSAGE_START")["messageId"]
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    good = value["encryptedValue"]
    head, rest = good.split(".", 1)
    tampered = head + "." + rest[:-3] + ("A" if rest[-3] != "A" else "B") + rest[-2:]
    foreign = ReasoningSealer([("k1", KEY)]).seal("conv_someone_else", "made elsewhere")
    for bad in (tampered, foreign, "not a value"):
        history = [
            first_user,
            {"id": "r1", "role": "reasoning", "content": "", "encryptedValue": bad},
            {"id": answer_id, "role": "assistant", "content": answer},
            user("And why?"),
        ]
        before = len(llm.requests)
        status, events, _ = await post_run(agui.url, token, run_input(thread, history))
        assert status == 200
        validated(events)
        assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
        assert "'r1'" in events[-1]["message"] and "rejected" in events[-1]["message"]
        assert len(llm.requests) == before  # the model was never asked
    assert "Traceback" not in agui.log()


async def test_a_value_moved_to_another_message_or_sent_by_another_caller_is_refused(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """A value is bound to the message it was issued on and to the caller it was issued
    to: the same bytes on another reasoning message, or sent back by another caller of
    the same thread, end the run with RUN_ERROR naming the message; as issued, it opens."""
    thread = new_id("conv")
    alice = agui_token(livekit_server, thread, "web-alice", "summary")
    mallory = agui_token(livekit_server, thread, "web-mallory", "summary")
    spec = llm.spec("deepseek_reasoning_content")
    llm.script("deepseek_reasoning_content")
    first_user = user(spec.user)
    status, events, _ = await post_run(agui.url, alice, run_input(thread, [first_user]))
    assert status == 200
    value = next(e for e in events if e["type"] == "REASONING_ENCRYPTED_VALUE")
    reasoning_id = value["entityId"]
    answer_id = next(e for e in events if e["type"] == "TEXT_MESSAGE_START")["messageId"]
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")

    def history(on: str) -> list[dict[str, Any]]:
        return [
            first_user,
            {
                "id": on,
                "role": "reasoning",
                "content": "",
                "encryptedValue": value["encryptedValue"],
            },
            {"id": answer_id, "role": "assistant", "content": answer},
            user("And why?"),
        ]

    for token, on, what in ((alice, "r_other", "message"), (mallory, reasoning_id, "caller")):
        before = len(llm.requests)
        status, events, _ = await post_run(agui.url, token, run_input(thread, history(on)))
        assert status == 200
        validated(events)
        assert types(events) == ["RUN_STARTED", "RUN_ERROR"], events
        assert f"'{on}'" in events[-1]["message"] and f"this {what}" in events[-1]["message"]
        assert len(llm.requests) == before  # the model was never asked
    llm.script("deepseek_reasoning_content")
    status, events, _ = await post_run(agui.url, alice, run_input(thread, history(reasoning_id)))
    assert status == 200 and types(events)[-1] == "RUN_FINISHED", events


async def test_python_m_web_serves_the_endpoint_at_the_url_it_prints(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """``python -m alicia.web`` with the worker's settings serves the same endpoint."""
    port = free_port()
    env = {
        **os.environ,
        **livekit_server.env(),
        "LLM_BASE_URL": llm.base_url,
        "LLM_MODEL": "recorded-model",
        "ALICIA_WEB_PORT": str(port),
        "PYTHONPATH": str(ROOT),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "alicia.web", env=env, cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        printed = ""
        async with asyncio.timeout(60):
            while "AG-UI endpoint on " not in printed:
                line = await proc.stdout.readline()
                assert line, f"python -m alicia.web ended: {printed}"
                printed += line.decode()
        url = printed.split("AG-UI endpoint on ", 1)[1].split()[0]
        assert url == f"http://127.0.0.1:{port}/agui"
        spec = llm.spec("deepseek_reasoning_content")
        thread = new_id("conv")
        token = agui_token(livekit_server, thread, "web-page", "full")
        assert await port_open(port)  # uvicorn starts listening right after printing
        llm.script("deepseek_reasoning_content")
        status, events, text = await post_run(url, token, run_input(thread, [user(spec.user)]))
        assert status == 200, text
        validated(events)
        assert "".join(
            e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"
        ).strip() == (spec.answer)
    finally:
        proc.terminate()
        await proc.wait()


async def test_the_cli_mints_a_debugging_bearer_token_for_a_thread(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """``alicia-client --print-token --room THREAD --grant-reasoning summary``."""
    thread = new_id("conv")
    cli = Path(sys.executable).with_name("alicia-client")
    env = {**os.environ, **livekit_server.env()}
    proc = await asyncio.create_subprocess_exec(
        str(cli), "--print-token", "--room", thread, "--grant-reasoning", "summary",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    token = out.decode().strip()
    spec = llm.spec("deepseek_reasoning_content")
    llm.script("deepseek_reasoning_content")
    status, events, text = await post_run(agui.url, token, run_input(thread, [user(spec.user)]))
    assert status == 200, text
    summaries = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert summaries == "\n\n".join(extractive_summary(s) for s in spec.steps)


async def test_a_caller_that_hangs_up_stops_the_turn_and_nothing_hangs(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """Mid-reasoning the caller goes away: the model's stream is abandoned at once, the
    endpoint stays up and serves the next run."""
    thread = new_id("conv")
    token = agui_token(livekit_server, thread, "web-gone", "full")
    before = llm.disconnects
    async with EventStream(agui.url, token, body=run_input(thread, [user("endless")])) as stream:
        await stream.wait("REASONING_MESSAGE_CONTENT")
    async with asyncio.timeout(10):
        while llm.disconnects == before:
            await asyncio.sleep(0.05)
    spec = llm.spec("deepseek_reasoning_content")
    llm.script("deepseek_reasoning_content")
    status, events, _ = await post_run(agui.url, token, run_input(thread, [user(spec.user)]))
    assert status == 200 and types(events)[-1] == "RUN_FINISHED"
    assert "Traceback" not in agui.log()
