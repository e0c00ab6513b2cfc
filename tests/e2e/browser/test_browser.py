"""The web debug page in Debian's chromium (playwright-core), over a real livekit-server.

``e2e.mjs`` (in this folder) drives the page: ask, see N steps then the answer, toggle
show-reasoning off, ask again, see no new steps; it saves a screenshot under
``test-artifacts/``. Here it runs against a scripted agent (the page's own contract)
and against the real worker with recorded LLM streams.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM, load_manifest
from alicia.protocol import new_id
from tests.e2e.browser.helpers import BROWSER, CHROMIUM, node_binary, page_url
from tests.e2e.web_app import serving_web
from tests.e2e.worker import NO_LOAD_LIMIT, running_worker
from tests.paths import ARTIFACTS, ROOT
from tests.support.scripted_agent import Script, scripted_agent

pytestmark = pytest.mark.integration
SCRIPT = BROWSER / "e2e.mjs"


async def drive(page_url: str, screenshot: Path, **questions: str) -> dict[str, Any]:
    """Run e2e.mjs against ``page_url``; its JSON report (fails the test on error)."""
    env = {
        **os.environ,
        "PAGE_URL": page_url,
        "SCREENSHOT": str(screenshot),
        "CHROMIUM": CHROMIUM,
        "TIMEOUT_MS": "60000",
        **{k.upper(): v for k, v in questions.items()},
    }
    proc = await asyncio.create_subprocess_exec(
        node_binary(),
        str(SCRIPT),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    lines = out.decode().strip().splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    assert proc.returncode == 0, f"e2e.mjs failed: {report}\n{err.decode()[-3000:]}"
    return report


async def test_page_shows_steps_then_answer_and_the_toggle_hides_new_steps(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    script = Script()
    async with (
        serving_web(livekit_server) as base,
        scripted_agent(livekit_server, room, script) as agent,
    ):
        report = await drive(
            page_url(base, room), ARTIFACTS / "browser-scripted.png", question_1="6 x 7?"
        )
    first, second = report["first"], report["second"]
    assert first["state"] == "done"
    assert first["stepNumbers"] == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]
    assert first["steps"] == script.steps
    assert len(first["tools"]) == 1 and "calculator" in first["tools"][0]
    assert '{"value":42}' in first["tools"][0]
    assert first["answer"] == "The answer is 42. Easy."
    # The scripted agent sends steps regardless; the page must not show them.
    assert second["state"] == "done" and second["steps"] == []
    assert "reasoning hidden" in second["summary"]
    assert second["answer"] == "The answer is 42. Easy."
    configs = agent.configurations()
    assert [c.features for c in configs] == [
        ["streaming", "reasoning_step_display"],
        ["streaming"],
    ]
    assert configs[0].device == "web" and configs[1].conversation_id == room
    assert (ARTIFACTS / "browser-scripted.png").stat().st_size > 10_000


async def test_the_page_ignores_a_participant_forging_agent_messages(
    livekit_server: LiveKitServer,
) -> None:
    """Mallory floods the room with forged Configuration/StartAnswer/sentences (stanzaId
    -2147483647 first) from before the page joins until it is done; the page still shows
    the agent's own answer and never the forged one."""
    from alicia.protocol import DATA_TOPIC
    from tests.support.livekit_rooms import joined
    from tests.support.scripted_agent import forged_agent_packets

    room = new_id("conv")
    forged = forged_agent_packets(room)
    stop = asyncio.Event()

    async def flood(mallory: Any) -> int:
        sent = 0
        while not stop.is_set():
            for data in forged:
                await mallory.local_participant.publish_data(data, reliable=True, topic=DATA_TOPIC)
                sent += 1
            await asyncio.sleep(0.05)
        return sent

    script = Script()
    async with (
        joined(livekit_server, room, "mallory") as mallory,
        serving_web(livekit_server) as base,
    ):
        flooding = asyncio.create_task(flood(mallory))
        await asyncio.sleep(0.3)  # forgeries are already flowing when the page joins
        async with scripted_agent(livekit_server, room, script):
            report = await drive(
                page_url(base, room), ARTIFACTS / "browser-forger.png", question_1="6 x 7?"
            )
        stop.set()
        sent = await flooding
    assert sent > 10
    assert report["first"]["answer"] == "The answer is 42. Easy."
    assert "FORGED" not in json.dumps(report)


async def test_with_the_issuer_off_the_page_joins_with_a_backend_token_in_the_fragment(
    livekit_server: LiveKitServer,
) -> None:
    """Production shape: no /token; the app's backend minted the token (fragment only)."""
    from alicia.client.tokens import mint_token

    room = new_id("conv")
    jwt = mint_token(livekit_server.api_key, livekit_server.api_secret, room=room, identity="b1")
    fragment = urlencode({"token": jwt, "url": livekit_server.url})
    async with (
        serving_web(livekit_server, tokens="off") as base,
        scripted_agent(livekit_server, room, Script()),
    ):
        report = await drive(
            page_url(base, room) + "#" + fragment,
            ARTIFACTS / "browser-backend-token.png",
            question_1="6 x 7?",
        )
    assert report["first"]["answer"] == "The answer is 42. Easy."


async def test_page_against_the_real_worker_streams_steps_tool_and_answer_then_toggles(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    streams = load_manifest(llm.streams_dir)
    call, followup = streams["calculator_tool_call"], streams["calculator_tool_followup"]
    other = streams["deepseek_reasoning_content"]
    shot = ARTIFACTS / "browser-e2e.png"
    async with (
        running_worker(livekit_server, llm.base_url, env=NO_LOAD_LIMIT) as worker,
        serving_web(livekit_server) as base,
    ):
        try:
            report = await drive(
                page_url(base, new_id("conv")),
                shot,
                question_1=call.user,
                question_2=other.user,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nworker log:\n{worker.log()}") from None
    first, second = report["first"], report["second"]
    expected = [*call.steps, *followup.steps]
    assert first["steps"] == expected
    assert first["stepNumbers"] == [f"step {i}" for i in range(1, len(expected) + 1)]
    assert len(first["tools"]) == 1
    assert "calculator" in first["tools"][0] and "395" in first["tools"][0]
    assert first["answer"] == followup.answer
    assert second["steps"] == [] and second["answer"] == other.answer
    assert "reasoning hidden" in second["summary"]
    assert "reasoning_steps" in report["status"]
    assert shot.stat().st_size > 10_000


async def test_the_page_the_demo_prints_shows_the_steps(tmp_path: Path) -> None:
    """``./scripts/demo --web`` as a newcomer runs it: open exactly the URL it prints."""
    import re
    import signal

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "LLM_BASE_URL")}
    env.update({"NO_COLOR": "1", "COLUMNS": "300", "XDG_DATA_HOME": str(tmp_path)})
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "scripts" / "demo"),
        "--web",
        "--web-port",
        "0",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        process_group=0,
    )
    assert proc.stdout is not None
    printed: list[str] = []
    try:
        async with asyncio.timeout(240):
            while True:
                line = (await proc.stdout.readline()).decode()
                assert line, "".join(printed)
                printed.append(line)
                if "Web debug page:" in line:
                    break
        match = re.search(r"(http://127\.0\.0\.1:\d+/\S+)", printed[-1])
        assert match, printed[-1]
        report = await drive(
            match.group(1), ARTIFACTS / "browser-demo.png", question_1="Is 221 a prime number?"
        )
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 60)
    first = report["first"]
    assert first["state"] == "done"
    assert len(first["steps"]) >= 2, report
    assert first["answer"]
    assert "reasoning_steps" in report["status"]


async def test_the_microphone_button_asks_by_voice_and_the_answer_audio_arrives(
    livekit_server: LiveKitServer, llm: RecordedLLM, tmp_path: Path
) -> None:
    """Chromium's fake microphone plays an espeak-ng question; the voice worker
    (``ALICIA_VOICE=offline``) hears it, the page shows the steps and the answer, and the
    agent's audio track arrives."""
    from alicia.client.tokens import mint_token
    from alicia.harness.speech import speak, write_wav

    spec = llm.spec("openrouter_gpt5_summary")
    llm.route_model("recorded-model", "openrouter_gpt5_summary")
    pcm, rate = speak(spec.user)
    silence = np.zeros(int(rate * 2), dtype=np.int16)  # a VAD hears the end of it
    wav = write_wav(tmp_path / "question.wav", np.concatenate([silence, pcm, silence]), rate)
    room = new_id("conv")
    jwt = mint_token(livekit_server.api_key, livekit_server.api_secret, room=room, identity="b1")
    fragment = urlencode({"token": jwt, "url": livekit_server.url})
    env = {**NO_LOAD_LIMIT, "ALICIA_VOICE": "offline"}
    shot = ARTIFACTS / "browser-voice.png"
    async with (
        running_worker(livekit_server, llm.base_url, env=env) as worker,
        serving_web(livekit_server, tokens="off") as base,
    ):
        proc = await asyncio.create_subprocess_exec(
            node_binary(),
            str(BROWSER / "voice.mjs"),
            cwd=ROOT,
            env={
                **os.environ,
                "PAGE_URL": page_url(base, room) + "#" + fragment,
                "WAV": str(wav),
                "SCREENSHOT": str(shot),
                "CHROMIUM": CHROMIUM,
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 240)
        log = worker.log()
    lines = out.decode().strip().splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    assert proc.returncode == 0, f"voice.mjs failed: {report}\n{err.decode()[-2000:]}\n{log}"
    assert "sleep" in report["text"].lower()  # the page shows what the agent heard
    assert report["steps"] == list(spec.steps)
    assert report["answer"].split() == spec.answer.split()
    assert report["audio"] == ["live"]
    assert "mic on" in report["mic"]
