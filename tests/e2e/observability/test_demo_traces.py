"""``./scripts/demo --traces`` as the README shows it: the demo's turn in Jaeger, at the
URL the demo prints.

The demo starts Jaeger v2 beside livekit-server, the worker (traces to Jaeger) and the
demo model, asks its question, prints ``Traces: <Jaeger query URL>`` and waits for
Ctrl-C. The test opens the printed URL as printed: Jaeger's JSON holds the turn's
``chat`` span, complete, with one log per reasoning step the demo showed. Then SIGINT:
the demo ends as usual.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.observability.conftest import eventually, tags
from tests.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def opened(url: str) -> Any:
    """The JSON at ``url`` (200 only)."""
    with urllib.request.urlopen(url, timeout=10) as page:
        assert page.status == 200
        return json.loads(page.read())


async def test_the_demo_with_traces_prints_where_its_turn_s_trace_is(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_BASE_URL", "DATABASE_URL")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "XDG_DATA_HOME": str(tmp_path / "xdg")})
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
        async with asyncio.timeout(240):
            while not (out and out[-1].startswith("Traces: ")):
                line = await demo.stdout.readline()
                assert line, "\n".join(out)
                out.append(line.decode().rstrip())
        url = out[-1].removeprefix("Traces: ").strip()

        def turn() -> dict[str, Any] | None:
            for trace in opened(url)["data"]:  # the URL as printed
                for span in trace["spans"]:
                    if span["operationName"].startswith("chat ") and (
                        "alicia.turn.status" in tags(span)
                    ):
                        return dict(span)
            return None

        span = await eventually("the demo's turn at the printed URL", turn)
        shown = [line for line in out if line.strip().startswith("▸ step")]
        logs = [log for log in span["logs"] if tags(log).get("event") == "alicia.reasoning.step"]
        assert shown and len(logs) == len(shown)
        assert tags(span)["alicia.turn.status"] == "complete"
    finally:
        if demo.returncode is None:
            demo.send_signal(signal.SIGINT)
    rest, _ = await asyncio.wait_for(demo.communicate(), 120)
    output = "\n".join(out) + rest.decode()
    assert demo.returncode == 0, output[-4000:]
    assert "Demo finished" in output
