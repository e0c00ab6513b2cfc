"""Server-executed tools: the calculator and the clock, and failures as outcomes."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import pytest

from alicia.agent.engine.tools import (
    Tool,
    ToolBox,
    ToolError,
    calculate,
    default_tools,
    parse_arguments,
)


@pytest.mark.parametrize(
    ("expression", "value"),
    [("17 * 23 + 4", 395), ("(1 + 2) ** 3", 27), ("7 // 2", 3), ("2^10", 1024), ("-3 % 5", 2)],
)
def test_calculator_evaluates_arithmetic(expression: str, value: float) -> None:
    assert calculate(expression) == value


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ("__import__('os').system('true')", "invalid_parameters"),
        ("open('/etc/passwd')", "invalid_parameters"),
        ("9 ** 9 ** 9", "invalid_parameters"),
        ("1 / 0", "execution_error"),
        ("10 ** 200", "execution_error"),
        ("2 +", "invalid_parameters"),
        ("x" * 300, "invalid_parameters"),
        ("'a' * 3", "invalid_parameters"),
    ],
)
def test_calculator_refuses_anything_else(expression: str, code: str) -> None:
    with pytest.raises(ToolError) as info:
        calculate(expression)
    assert info.value.code == code


async def test_toolbox_runs_tools_and_reports_failures_as_outcomes() -> None:
    box = default_tools()
    ok = await box.call("calculator", {"expression": "sqrt(16) + 1"})
    assert ok.success and ok.result == {"expression": "sqrt(16) + 1", "value": 5}
    assert json.loads(ok.for_llm()) == ok.result
    clock = await box.call("current_time", {"timezone": "Europe/Paris"})
    assert clock.success and clock.result is not None
    when = dt.datetime.fromisoformat(clock.result["iso"])
    assert abs((when - dt.datetime.now(dt.UTC)).total_seconds()) < 60
    bad_zone = await box.call("current_time", {"timezone": "Mars/Olympus"})
    assert (bad_zone.success, bad_zone.error_code) == (False, "invalid_parameters")
    missing = await box.call("weather", {})
    assert (missing.success, missing.error_code) == (False, "unknown_tool")
    assert json.loads(missing.for_llm())["error"] == "unknown_tool"
    assert {s["function"]["name"] for s in box.schemas()} == {"calculator", "current_time"}


async def test_slow_and_broken_tools_become_timeout_and_execution_errors() -> None:
    async def slow(_: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    async def broken(_: Mapping[str, Any]) -> dict[str, Any]:
        raise KeyError("oops")

    schema = {"type": "object"}
    box = ToolBox(
        [Tool("slow", "", schema, slow, timeout_ms=20), Tool("broken", "", schema, broken)]
    )
    assert (await box.call("slow", {})).error_code == "timeout"
    assert (await box.call("broken", {})).error_code == "execution_error"
    with pytest.raises(ValueError, match="duplicate"):
        ToolBox([Tool("a", "", schema, slow), Tool("a", "", schema, slow)])


def test_tool_call_arguments_must_be_a_json_object() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    for raw in ("{", "[1, 2]", "3"):
        with pytest.raises(ToolError) as info:
            parse_arguments(raw)
        assert info.value.code == "invalid_parameters"
