"""``./scripts/demo --traces`` as the README shows it: the demo's turn in Arize Phoenix's
UI, at the URL the demo prints, opened in Chromium.

The demo starts Phoenix (its own virtualenv, installed when first needed) beside
livekit-server, the worker (traces to Phoenix) and the demo model, asks its question,
prints ``Trace: <URL>`` and waits for Ctrl-C. The test opens the URL as printed
(``tests/e2e/browser/phoenix.mjs``): the turn's span is an LLM span with its reasoning
token count and one event per step the demo showed; under the default content policy no
word of the reasoning is anywhere on the page, under ``ALICIA_TRACE_CONTENT=summary`` the
steps' summaries (and only they) are its Reasoning row. No request leaves loopback. Then
SIGINT: the demo ends as usual. Screenshots: ``test-artifacts/phoenix-<policy>.png``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from alicia.agent.llm.summary import extractive_summary
from tests.e2e.browser.helpers import BROWSER, CHROMIUM, node_binary
from tests.paths import ARTIFACTS, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STEP = re.compile(r"^\s*▸ step (\d+): (.*)$")


async def open_in_chromium(url: str, screenshot: Path, info: list[str]) -> dict[str, Any]:
    """What ``phoenix.mjs`` read on the page at ``url`` (its Info tab once it shows each
    of ``info``)."""
    env = {**os.environ, "PAGE_URL": url, "SCREENSHOT": str(screenshot), "CHROMIUM": CHROMIUM}
    env["INFO_MARKS"] = ",".join(info)
    proc = await asyncio.create_subprocess_exec(
        node_binary(),
        str(BROWSER / "phoenix.mjs"),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-4000:]
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("content", ["default", "summary"])
async def test_the_demo_with_traces_prints_its_turn_s_trace_in_phoenix(
    tmp_path: Path, content: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_BASE_URL", "DATABASE_URL")}
    env.pop("ALICIA_TRACE_CONTENT", None)
    env.update({"NO_COLOR": "1", "COLUMNS": "400", "XDG_DATA_HOME": str(tmp_path / "xdg")})
    if content != "default":
        env["ALICIA_TRACE_CONTENT"] = content
    demo = await asyncio.create_subprocess_exec(
        str(ROOT / "scripts" / "demo"),
        "--traces",
        "--data-dir",
        str(tmp_path / "data"),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert demo.stdout is not None
    out: list[str] = []
    try:
        async with asyncio.timeout(480):  # Phoenix may take 300 s to start (loaded)
            while not (out and out[-1].startswith("Trace: ")):
                line = await demo.stdout.readline()
                assert line, "\n".join(out)
                out.append(line.decode().rstrip())
        url = out[-1].removeprefix("Trace: ").strip()
        marks = ["Input"] if content == "default" else ["Input", "Reasoning"]
        page = await open_in_chromium(url, ARTIFACTS / f"phoenix-{content}.png", marks)
    finally:
        if demo.returncode is None:
            demo.send_signal(signal.SIGINT)
    rest, _ = await asyncio.wait_for(demo.communicate(), 120)
    output = "\n".join(out) + rest.decode()
    assert demo.returncode == 0, output[-4000:]
    assert "Demo finished" in output

    steps = [m.group(2) for line in out if (m := STEP.match(line))]
    assert len(steps) >= 2, output[-4000:]
    trace_id = url.rsplit("/", 1)[-1]
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id), url
    assert page["url"].split("?")[0].endswith(f"/traces/{trace_id}")  # Phoenix's own page
    assert page["title"].startswith("chat ")
    assert page["eventNames"] == ["alicia.reasoning.step"] * len(steps)
    assert "llm.token_count.completion_details.reasoning" in page["attributes"]
    assert page["external"] == []
    seen = "\n".join((page["info"], page["attributes"], page["events"]))
    if content == "default":
        assert "Reasoning" not in page["info"]
        for step in steps:  # no sentence of any step, anywhere on the page
            for sentence in re.split(r"(?<=[.?!])\s+", step):
                assert sentence[:40] not in seen, sentence
    else:
        assert "Reasoning" in page["info"]
        for step in steps:
            summary = extractive_summary(step).removesuffix("…").strip()
            assert summary in page["info"]
            assert step == summary or step not in seen  # the summary, not the step
