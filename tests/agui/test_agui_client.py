"""The real ``@ag-ui/client`` (npm, 1.0.x) against the endpoint: ``HttpAgent`` in Node, with
its own event verification, message assembly and history handling.

* its verification passes, and the reasoning message it assembles is the recorded
  reasoning;
* a second run, which sends the first run's messages back with their encrypted values,
  continues the conversation: under the Responses API the provider's reasoning items
  (restored from the answer's encrypted value) reach the model with the previous answer;
* a run whose history carries a tampered value ends with RUN_ERROR naming that message;
* a client that ignores reasoning events still gets the whole answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import STREAMS_DIR, RecordedLLM
from alicia.protocol import new_id
from tests.paths import ROOT
from tests.support.agui_endpoint import AguiProcess, agui_token, running_agui

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SCRIPT = ROOT / "tests" / "agui" / "agui_client.mjs"
KEYS = f"k1={base64.b64encode(bytes(range(32))).decode()}"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def chat(livekit_server: LiveKitServer, llm: RecordedLLM) -> AsyncIterator[AguiProcess]:
    """The endpoint on chat completions (the generic profile)."""
    async with running_agui(
        livekit_server, llm.base_url, env={"ALICIA_REASONING_KEYS": KEYS}
    ) as process:
        yield process


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def responses(livekit_server: LiveKitServer, llm: RecordedLLM) -> AsyncIterator[AguiProcess]:
    """The endpoint on the Responses API (``store: false``, reasoning items carried)."""
    env = {"ALICIA_REASONING_KEYS": KEYS, "LLM_API": "responses", "LLM_PROVIDER": "openai"}
    async with running_agui(livekit_server, llm.base_url, env=env) as process:
        yield process


async def http_agent(
    agui: AguiProcess, token: str, thread: str, questions: list[str], **options: Any
) -> list[dict[str, Any]]:
    """Run ``questions`` one run each through one ``HttpAgent``; the runs it reports."""
    args = {"url": agui.url, "token": token, "threadId": thread, "questions": questions, **options}
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        json.dumps(args),
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"{err.decode()}\n{agui.log()}"
    runs: list[dict[str, Any]] = json.loads(out)["runs"]
    return runs


def of_role(run: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [m for m in run["messages"] if m["role"] == role]


async def test_verification_passes_and_the_assembled_reasoning_is_the_recorded_one(
    chat: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    thread = new_id("conv")
    llm.script("deepseek_reasoning_content")
    token = agui_token(livekit_server, thread, "web-full", "full")
    (run,) = await http_agent(chat, token, thread, [spec.user])
    assert run["error"] is None, chat.log()
    kinds = [e["type"] for e in run["events"]]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    (reasoning,) = of_role(run, "reasoning")
    assert reasoning["content"] == spec.reasoning
    (answer,) = of_role(run, "assistant")
    assert answer["content"].strip() == spec.answer
    assert [m["role"] for m in run["messages"]] == ["user", "reasoning", "assistant"]


async def test_a_second_run_sends_the_values_back_and_continues_the_conversation(
    responses: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    first = llm.spec("responses_summary_tool_call")
    followup = llm.spec("responses_summary_tool_followup")
    second = llm.spec("responses_raw_reasoning")
    thread = new_id("conv")
    token = agui_token(livekit_server, thread, "web-summary", "summary")
    before = len(llm.requests)
    runs = await http_agent(responses, token, thread, [first.user, second.user])
    assert [r["error"] for r in runs] == [None, None], responses.log()
    one, two = runs
    # Run 1: the summaries as reasoning, the tool call (its reasoning sealed on it), the
    # answer carrying the provider's reasoning items, sealed.
    summaries = [m["content"] for m in of_role(one, "reasoning")]
    assert "\n\n".join(summaries) == "\n\n".join(first.summaries + followup.summaries)
    calls = [c for m in of_role(one, "assistant") for c in m.get("toolCalls", [])]
    assert [c["function"]["name"] for c in calls] == ["calculator"]
    assert calls[0]["encryptedValue"].count(".") == 4
    answer = of_role(one, "assistant")[-1]
    assert answer["content"].strip() == followup.answer and answer["encryptedValue"]
    # Run 2 went out with the history and the restored reasoning items.
    request = llm.requests[-1]
    assert len(llm.requests) - before == 3  # tool call, follow-up, the second question
    items = request["input"]
    carried = [i for i in items if i.get("type") == "reasoning"]
    recorded = set(
        re.findall(r'"encrypted_content":"([^"]+)"', (STREAMS_DIR / followup.file).read_text())
    )
    assert len(recorded) == 1  # what the provider sent with the first turn's answer
    assert [i["encrypted_content"] for i in carried] == list(recorded)
    said = [(i.get("role"), i.get("content")) for i in items if "role" in i]
    assert said == [
        ("user", first.user),
        ("assistant", followup.answer),
        ("user", second.user),
    ]
    assert of_role(two, "assistant")[-1]["content"].strip() == second.answer


async def test_a_tampered_value_in_the_history_gets_run_error(
    chat: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    thread = new_id("conv")
    token = agui_token(livekit_server, thread, "web-enc", "encrypted")
    llm.script("deepseek_reasoning_content", "deepseek_reasoning_content")
    one, two = await http_agent(chat, token, thread, [spec.user, "And why?"], tamper=True)
    assert one["error"] is None
    (reasoning,) = of_role(one, "reasoning")
    assert reasoning["content"] == "" and reasoning["encryptedValue"]
    errors = [e for e in two["events"] if e["type"] == "RUN_ERROR"]
    assert len(errors) == 1, two
    assert reasoning["id"] in errors[0]["message"] and "rejected" in errors[0]["message"]
    assert "TEXT_MESSAGE_START" not in [e["type"] for e in two["events"]]
    assert "Traceback" not in chat.log()


async def test_a_client_that_ignores_reasoning_events_still_gets_the_whole_answer(
    chat: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    thread = new_id("conv")
    llm.script("deepseek_reasoning_content")
    token = agui_token(livekit_server, thread, "web-old", "full")
    (run,) = await http_agent(chat, token, thread, [spec.user], ignoreReasoning=True)
    assert run["error"] is None
    seen = {e["type"] for e in run["events"]}
    assert not [t for t in seen if t.startswith("REASONING")]
    text = "".join(e["delta"] for e in run["events"] if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.strip() == spec.answer
