"""The frontends people build on LiveKit, in Debian's chromium, against the real worker and
livekit-server with recorded LLM streams (issue 27).

``frontends/`` (in this folder) holds three pages, bundled here with esbuild from node_modules
(nothing is fetched), served on loopback and driven by ``drive.mjs`` (playwright-core):

* ``react.html``: ``<LiveKitRoom>`` of ``@livekit/components-react`` (or, with
  ``wrap=session``, ``useSession()`` and ``<SessionProvider>``) around the package's
  ``<ReasoningPanel/>``, asking through ``useReasoning()`` (``@alicia/reasoning/react``);
* ``stock.html``: what agent-starter-react does, without the package: ``useVoiceAssistant()``
  (``lk.agent.state``), ``useTranscriptions()`` (``lk.transcription`` text streams) and
  ``useChat()`` (typed input on ``lk.chat``);
* ``session.html``: the same with the hooks agent-starter-react moved to: ``useSession()``
  and ``<SessionProvider>``, ``useAgent()`` and ``useSessionMessages()``.

Each records everything it receives: its room's data packets (as text and MessagePack),
the text streams of LiveKit's agent topics, every DataPacket of the SDK's engine, and
below the SDK every RTCDataChannel and WebSocket message (an init script of the driver).
Join tokens come in the page's fragment, minted here with the reasoning grant
(``alicia.reasoning``) each test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import pytest_asyncio
from aiohttp import web

from alicia.client.tokens import mint_token
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.protocol import AssistantSentence, ReasoningStep, new_id
from tests.e2e.browser.helpers import BROWSER, CHROMIUM, node_binary
from tests.e2e.worker import WorkerProcess
from tests.paths import ARTIFACTS, ROOT
from tests.support.livekit_rooms import ProtocolClient, joined

# worker (tests/e2e/conftest.py): reasoning as each token grants it (default ``none``),
# LiveKit's agent conventions on (their default), no load limit (chromium keeps it busy).
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(420),
    pytest.mark.usefixtures("fresh_script"),
]

FRONTENDS = BROWSER / "frontends"
CANARY = "classic trap"  # in the recorded reasoning of deepseek_reasoning_content, step 1
REASONING_STEP, ASSISTANT_SENTENCE = 5, 16  # Alicia message types (PROTOCOL.md)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three pages, bundled by ``build.mjs`` (esbuild, from node_modules only)."""
    out = tmp_path_factory.mktemp("frontends")
    done = subprocess.run(
        [node_binary(), str(FRONTENDS / "build.mjs"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@contextlib.asynccontextmanager
async def serving(directory: Path) -> AsyncIterator[str]:
    """``directory`` over HTTP on a free loopback port: its base URL."""
    app = web.Application()
    app.router.add_static("/", directory)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def site(pages: Path) -> AsyncIterator[str]:
    async with serving(pages) as base:
        yield base


def page_url(
    site: str, page: str, server: LiveKitServer, room: str, identity: str, level: str
) -> str:
    """``page`` joining ``room`` as ``identity``, granted reasoning ``level``."""
    token = mint_token(
        server.api_key,
        server.api_secret,
        room=room,
        identity=identity,
        attributes={"alicia.reasoning": level},
    )
    return f"{site}{page}#" + urlencode({"url": server.url, "token": token})


async def drive(
    url: str, mode: str, plan: list[dict[str, Any]], shot: Path, worker: WorkerProcess
) -> dict[str, Any]:
    """Run ``drive.mjs`` on ``url``; its JSON report (fails the test on any error)."""
    report_path = shot.with_suffix(".json")
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.unlink(missing_ok=True)
    proc = await asyncio.create_subprocess_exec(
        node_binary(),
        str(FRONTENDS / "drive.mjs"),
        cwd=ROOT,
        env={
            **os.environ,
            "PAGE_URL": url,
            "MODE": mode,
            "PLAN": json.dumps(plan),
            "SCREENSHOT": str(shot),
            "CHROMIUM": CHROMIUM,
            "TIMEOUT_MS": "90000",
            "REPORT": str(report_path),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 360)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    report: dict[str, Any] = json.loads(report_path.read_text()) if report_path.exists() else {}
    if proc.returncode != 0:
        brief = {k: v for k, v in report.items() if k not in ("html", "wire", "received")}
        raise AssertionError(
            f"drive.mjs failed: {json.dumps(brief)[-6000:]}\n{(out + err).decode()[-3000:]}\n"
            f"--- worker log ---\n{worker.log()}"
        )
    assert report["pageErrors"] == [], report["pageErrors"]
    return report


def envelopes(report: dict[str, Any], start: int = 0, end: int | None = None) -> list[Any]:
    """The Alicia envelopes (decoded MessagePack) the page's room received, in order."""
    data = report["received"]["data"][start:end]
    return [json.loads(d["msgpack"]) for d in data if d["topic"] == "alicia" and d["msgpack"]]


def everything_received(report: dict[str, Any]) -> dict[str, str]:
    """Every text the page showed or received, by where it was seen."""
    received, wire = report["received"], report["wire"]
    seen = {"dom": report["html"] or ""}
    for i, d in enumerate(received["data"]):
        seen[f"data[{i}] {d['topic']}"] = d["text"] + "\n" + d["msgpack"]
    for i, p in enumerate(received["packets"]):
        topic = json.loads(p["value"]).get("topic", "") if p["kind"] == "user" else ""
        seen[f"packet[{i}] {p['kind']} {topic}".rstrip()] = p["value"]
    for i, s in enumerate(received["streams"]):
        seen[f"stream[{i}] {s['topic']}"] = s["text"] + json.dumps([s["opened"], s.get("closed")])
    for channel in ("dc", "ws"):
        for i, m in enumerate(wire[channel]):
            seen[f"wire.{channel}[{i}] {m['label']}"] = m["text"]
    return seen


def stream_topics(report: dict[str, Any]) -> set[str]:
    """The topics of every text or byte stream the page's engine received."""
    headers = [p for p in report["received"]["packets"] if p["kind"] == "streamHeader"]
    return {json.loads(h["value"])["topic"] for h in headers}


def runs(states: list[str]) -> list[str]:
    """``states`` without repeats in a row."""
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


@pytest.mark.parametrize("wrap", ["LiveKitRoom", "session"])
async def test_a_react_page_with_livekit_components_shows_steps_answer_and_toggle(
    livekit_server: LiveKitServer, llm: RecordedLLM, worker: WorkerProcess, site: str, wrap: str
) -> None:
    """Asked with reasoning shown, the panel lists the steps in stepIndex order with the
    tool call between them, then the answer; with "show reasoning" off the package asks
    the agent for no steps (a Configuration update) and none arrive or appear for the next
    question; back on, the steps of the third question appear again. The page wraps the
    panel in ``<LiveKitRoom>``, or in today's agent-starter-react way (``useSession()`` and
    ``<SessionProvider>``)."""
    call, followup = llm.spec("calculator_tool_call"), llm.spec("calculator_tool_followup")
    hidden, again = llm.spec("deepseek_reasoning_content"), llm.spec("vllm_reasoning")
    room = new_id("conv")
    plan = [
        {"ask": call.user},
        {"reasoning": False},
        {"ask": hidden.user},
        {"reasoning": True},
        {"ask": again.user},
    ]
    url = page_url(site, "react.html", livekit_server, room, "reader", "full")
    url += "&wrap=session" if wrap == "session" else ""
    report = await drive(url, "react", plan, ARTIFACTS / f"browser-react-{wrap}.png", worker)
    first, off, second, on, third = report["turns"]
    assert report["granted"] == "full"
    assert f'data-wrap="{wrap}"' in report["html"]

    # 1: the steps of the tool call and of its follow-up, numbered 1..n, the tool between.
    expected = [*call.steps, *followup.steps]
    assert (first["state"], first["question"]) == ("done", call.user)
    assert first["steps"] == expected
    assert first["stepIndexes"] == list(range(1, len(expected) + 1))
    assert first["stepNumbers"] == [f"step {i}" for i in range(1, len(expected) + 1)]
    assert first["dataSteps"] == len(expected) and first["count"] == f"{len(expected)} steps"
    assert len(first["tools"]) == 1
    assert "calculator" in first["tools"][0] and "395" in first["tools"][0]
    assert first["items"].index("alicia-tool") == len(call.steps)
    assert first["answer"] == followup.answer
    # ... exactly the ReasoningSteps the page received, shown by stepIndex.
    steps = [e["body"] for e in envelopes(report, 0, first["received"]) if e["type"] == 5]
    assert len(steps) == len(expected)
    by_index = sorted(steps, key=lambda b: b["stepIndex"])
    assert [b["content"] for b in by_index] == first["steps"]

    # 2: show reasoning off: the agent sends no steps and the panel shows none.
    assert off["toggled"] == "off"
    assert (second["state"], second["answer"]) == ("done", hidden.answer)
    assert second["steps"] == [] and second["dataSteps"] == 0
    assert second["count"].startswith("reasoning hidden")
    late = envelopes(report, off["received"], second["received"])
    assert [e for e in late if e["type"] == REASONING_STEP] == []
    assert any(e["type"] == ASSISTANT_SENTENCE for e in late)
    assert CANARY not in json.dumps(late) and CANARY not in (report["html"] or "")

    # 3: on again: the third question's steps appear, numbered from 1.
    assert on["toggled"] == "on"
    assert (third["state"], third["answer"]) == ("done", again.answer)
    assert third["steps"] == list(again.steps)
    assert third["stepIndexes"] == list(range(1, len(again.steps) + 1))
    assert report["reasoning"] == "on"

    # The first turn keeps the steps it showed; the hidden one never got any.
    final = report["final"]
    assert [t["steps"] for t in final] == [expected, [], list(again.steps)]
    assert [t["answer"] for t in final] == [followup.answer, hidden.answer, again.answer]


@pytest.mark.parametrize("page", ["stock", "session"])
async def test_a_stock_agent_starter_page_shows_the_answer_and_thinking_state(
    livekit_server: LiveKitServer,
    llm: RecordedLLM,
    worker: WorkerProcess,
    site: str,
    pages: Path,
    page: str,
) -> None:
    """A page without the Alicia protocol types a question on ``lk.chat``, reads the answer
    from the agent's ``lk.transcription`` stream and shows the agent thinking, speaking and
    listening again. It is granted full reasoning, yet no step reaches it by a LiveKit
    convention (nor its DOM): only the protocol, which it does not speak, carries them.
    Both generations of agent-starter-react's hooks: ``stock`` (useVoiceAssistant,
    useTranscriptions, useChat) and ``session`` (useSession, useAgent, useSessionMessages,
    whose agent fails unless it reaches a listening state within 20 s)."""
    spec = llm.spec("deepseek_reasoning_content")
    assert CANARY in spec.steps[0]
    # Paced, so that thinking lasts seconds (a page renders it), as with a real model.
    llm.script(Play("deepseek_reasoning_content", chunk_delay=0.03))
    room = new_id("conv")
    url = page_url(site, f"{page}.html", livekit_server, room, "starter", "full")
    plan = [{"ask": spec.user, "expect": spec.answer}]
    report = await drive(url, "stock", plan, ARTIFACTS / f"browser-{page}-page.png", worker)
    assert b"reasoning_step_display" not in (pages / f"{page}.js").read_bytes()  # no package
    assert report["failures"] in (None, []), report["failures"]  # useAgent(): never failed

    agent = report["agent"]
    lines = report["turns"][0]["lines"]
    assert agent.startswith("agent-"), report["agent"]
    # The typed question (the page's own chat line), then the agent's answer.
    assert [(line["kind"], line["from"], line["text"]) for line in lines[:1]] == [
        ("chat", "starter", spec.user)
    ]
    answers = [line for line in lines if line["agent"]]
    assert len(answers) == 1 and answers[0]["kind"] == "transcription"
    assert answers[0]["text"].split() == spec.answer.split()
    assert answers[0]["segmentId"].startswith("msg_")  # the answer's message id
    # lk.agent.state: listening when the page came (set before or after it joined the
    # room, as the agent was dispatched to it), then thinking, speaking, listening.
    states = runs(report["received"]["agentStates"])
    assert states in (
        ["thinking", "speaking", "listening"],
        ["listening", "thinking", "speaking", "listening"],
    ), states
    shown = report["shownStates"]
    assert "thinking" in shown and "speaking" in shown and shown[-1] == "listening", shown
    assert shown.index("thinking") < shown.index("speaking")
    # Reasoning on no LiveKit topic and nowhere in the page; its only stream is the answer.
    assert stream_topics(report) == {"lk.transcription"}
    # (The wire and the protocol's own packets are not LiveKit conventions: left out.)
    seen = everything_received(report)
    lk = {k: v for k, v in seen.items() if not k.startswith("wire.") and not k.endswith(" alicia")}
    assert any(k.startswith("packet") and "streamChunk" in k for k in lk)
    assert [k for k, v in lk.items() if CANARY in v] == []


async def test_a_participant_without_a_grant_sees_no_step_text(
    livekit_server: LiveKitServer, llm: RecordedLLM, worker: WorkerProcess, site: str
) -> None:
    """The React page of a participant granted ``none`` asks; a participant granted
    ``full`` in the same room receives the steps with the canary, the page gets the answer
    and not one byte of step text: not in its DOM, not in any packet, stream or signal
    message it received (recorded in the page and on the wire)."""
    spec = llm.spec("deepseek_reasoning_content")
    assert CANARY in spec.steps[0]
    assert CANARY not in spec.answer and CANARY not in spec.user
    room = new_id("conv")
    full = mint_token(
        livekit_server.api_key,
        livekit_server.api_secret,
        room=room,
        identity="entitled",
        attributes={"alicia.reasoning": "full"},
    )
    url = page_url(site, "react.html", livekit_server, room, "ungranted", "none")
    async with joined(livekit_server, room, "entitled", token=full) as r:
        entitled = ProtocolClient(r, room)
        try:
            await entitled.wait_for_agent()
            await entitled.handshake()
        except BaseException as exc:
            raise AssertionError(f"{exc!r}\n--- worker log ---\n{worker.log()}") from exc
        shot = ARTIFACTS / "browser-react-no-grant.png"
        report = await drive(url, "react", [{"ask": spec.user}], shot, worker)
        await entitled.wait_for(AssistantSentence, within=60, is_final=True)

    # The reasoning with the canary ran for this very question, in this room.
    assert [s.content for s in entitled.of(ReasoningStep)] == list(spec.steps)
    assert report["granted"] == "none"
    turn = report["turns"][0]
    assert (turn["state"], turn["question"]) == ("done", spec.user)
    assert turn["answer"] == spec.answer
    assert turn["steps"] == [] and turn["dataSteps"] == 0
    # Not one step reached the page; the recordings did see the answer (they work).
    got = envelopes(report)
    assert [e for e in got if e["type"] == REASONING_STEP] == []
    assert " ".join(e["body"]["text"] for e in got if e["type"] == ASSISTANT_SENTENCE).split() == (
        spec.answer.split()
    )
    seen = everything_received(report)
    sentence = spec.answer.split(". ")[1]
    assert any(k.startswith("wire.dc") and sentence in v for k, v in seen.items())
    assert any(k.startswith("wire.ws") for k in seen)
    assert [k for k, v in seen.items() if CANARY in v] == []
    # Nor any other part of the steps.
    for step in spec.steps:
        phrase = " ".join(step.split()[2:8])
        assert [k for k, v in seen.items() if phrase in v] == [], phrase
