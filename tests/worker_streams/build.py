"""Regenerate the worker's extra recorded streams: a calculator tool call and its follow-up.

The worker's demo tools are ``calculator`` and ``current_time`` (``agent/engine/tools.py``); the
shared recordings (``tests/streams``) call ``get_weather``. This script writes the same
vLLM wire shape (``tests.streams.build``'s generators, reused as they are) for a scenario
that calls the calculator, plus ``manifest.json`` entries in the shared format.
Run ``.venv/bin/python -m tests.worker_streams.build`` and commit the output.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.streams.build import Scenario, ToolCall, sse, vllm_tool_call, vllm_tool_followup

HERE = Path(__file__).resolve().parent

CALCULATION = Scenario(
    user="What is 17 times 23, plus 4?",
    steps=[
        "The user wants 17 times 23 plus 4. I could do this in my head, but arithmetic "
        "slips are easy, and there is a calculator tool.",
        "I'll pass the whole expression to the calculator so the order of operations is "
        "handled for me.",
    ],
    answer="",
    tool=ToolCall(
        name="calculator",
        arguments='{"expression": "(17 * 23) + 4.0"}',
        result='{"expression": "(17 * 23) + 4.0", "value": 395}',
    ),
    followup_steps=[
        "The calculator returned 395. Checking quickly: 17 times 23 is 391, and 391 plus 4 "
        "is 395, so the tool agrees.",
        "I'll state the result and show the two steps, since that is easy to follow aloud.",
    ],
    followup_answer=("17 times 23 plus 4 is 395. First, 17 times 23 is 391. Adding 4 gives 395."),
)


def main() -> None:
    """Write the two ``.sse`` files and ``manifest.json``."""
    s = CALCULATION
    assert s.tool is not None
    call_events = vllm_tool_call(s, random.Random(4242))
    follow_events = vllm_tool_followup(s, random.Random(4243))
    call_id = next(
        tc["id"]
        for e in call_events
        if isinstance(e, dict)
        for c in e["choices"]
        for tc in c["delta"].get("tool_calls") or []
        if "id" in tc
    )
    common: dict[str, Any] = {
        "provider": "vLLM --reasoning-parser qwen3 --tool-call-parser hermes",
        "model": "Qwen/Qwen3-8B",
        "open_at_start": False,
        "user": s.user,
        "tool_result": s.tool.result,
    }
    manifest = {
        "calculator_tool_call": {
            **common,
            "file": "calculator_tool_call.sse",
            "reasoning": "\n\n".join(s.steps),
            "answer": "",
            "steps": s.steps,
            "tool_calls": [{"id": call_id, "name": s.tool.name, "arguments": s.tool.arguments}],
            "finish_reason": "tool_calls",
            "followup": "calculator_tool_followup",
        },
        "calculator_tool_followup": {
            **common,
            "provider": "vLLM, after the tool result",
            "file": "calculator_tool_followup.sse",
            "reasoning": "\n\n".join(s.followup_steps),
            "answer": s.followup_answer,
            "steps": s.followup_steps,
            "tool_calls": [],
            "finish_reason": "stop",
        },
    }
    (HERE / "calculator_tool_call.sse").write_text(sse(call_events), encoding="utf-8")
    (HERE / "calculator_tool_followup.sse").write_text(sse(follow_events), encoding="utf-8")
    (HERE / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {len(manifest)} streams to {HERE}")


if __name__ == "__main__":
    main()
