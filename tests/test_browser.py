"""The web debug page in Debian's chromium (playwright-core), over a real livekit-server.

``tests/browser/e2e.mjs`` drives the page: ask, see N steps then the answer, toggle
show-reasoning off, ask again, see no new steps; it saves a screenshot under
``test-artifacts/``. Here it runs against a scripted agent (the page's own contract)
and against the real worker with recorded LLM streams.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from harness import LiveKitServer
from protocol import new_id
from tests.client_helpers import Script, scripted_agent
from tests.web_helpers import serving_web

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "browser" / "e2e.mjs"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"


def node_binary() -> str:
    """``node`` from PATH, else the one scripts/setup may have put in .venv."""
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    node = shutil.which("node", path=path)
    if node is None:
        pytest.fail("node not found: run ./scripts/setup")
    return node


@pytest.fixture(scope="module", autouse=True)
def _chromium_installed() -> None:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} missing: run ./scripts/setup (apt-get install chromium)")


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


def page_url(base: str, room: str) -> str:
    return base + "?" + urlencode({"room": room, "identity": "browser", "autoconnect": "1"})


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
