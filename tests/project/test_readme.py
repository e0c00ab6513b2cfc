"""The README's "use it in your own agent" example runs as written (against the recorded LLM)."""

from __future__ import annotations

import contextlib
import gc
import io
import re
import textwrap
from pathlib import Path

from alicia.harness.recorded_llm import RecordedLLM
from tests.paths import ROOT
from tests.worker_streams import combined_streams

README = ROOT / "README.md"


def example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it in your own agent", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no python example in the section"
    return match.group(1)


async def test_the_engine_example_runs_and_prints_steps_tool_answer_and_status(
    tmp_path: Path,
) -> None:
    code = example()
    assert "http://127.0.0.1:8000/v1" in code
    async with RecordedLLM(streams_dir=combined_streams(tmp_path / "s")) as llm:
        source = code.replace("http://127.0.0.1:8000/v1", llm.base_url)
        body = "async def _example() -> None:\n" + textwrap.indent(source, "    ")
        namespace: dict[str, object] = {}
        exec(compile(body, "README.md", "exec"), namespace)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            await namespace["_example"]()  # type: ignore[operator]
        spec = llm.spec("calculator_tool_followup")
    gc.collect()  # a client the example forgot to close warns here, in this test
    printed = out.getvalue()
    assert "step 1: " in printed
    assert "tool: calculator" in printed
    assert "395" in spec.answer and "answer: " in printed
    assert printed.rstrip().splitlines()[-1].startswith("complete Usage(")


def test_the_adoption_diff_is_at_most_five_lines_and_is_the_example() -> None:
    """The README's diff from a stock AgentSession app is the example app's own lines."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it in your own agent", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```diff\n(.*?)```", section, re.S)
    assert match is not None, "no diff in the section"
    changed = [line for line in match.group(1).splitlines() if line[:1] in "+-"]
    assert 0 < len(changed) <= 5
    example_app = (README.parent / "examples" / "voice_agent.py").read_text()
    for line in changed:
        if line.startswith("+"):
            assert line[1:].strip() in example_app, line
