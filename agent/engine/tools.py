"""Function tools the worker executes itself (ToolUseRequest ``execution: "server"``).

A :class:`Tool` is a name, a description, a JSON schema for its arguments and an async
function. :class:`ToolBox` offers the schemas to the LLM (OpenAI ``tools`` format) and
runs calls with a time budget. A failing call is an :class:`Outcome` with
``success=False`` and one of the protocol's error codes (``unknown_tool``,
``invalid_parameters``, ``execution_error``, ``timeout``), never an exception.

:func:`default_tools` has two real tools: ``calculator`` (safe arithmetic on an AST,
no ``eval``) and ``current_time`` (the clock in an IANA time zone).
"""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import json
import math
import operator
import zoneinfo
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Outcome", "Tool", "ToolBox", "ToolError", "default_tools"]

DEFAULT_TIMEOUT_MS: Final = 30_000


class ToolError(Exception):
    """A tool could not produce a result; ``code`` is the ToolUseResult ``errorCode``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Tool:
    """A function tool: ``run(arguments)`` returns a JSON-able map or raises ToolError."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
    timeout_ms: int = DEFAULT_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a call produced: ``result`` on success, else ``error_code``/``error_message``."""

    success: bool
    result: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None

    def for_llm(self) -> str:
        """The tool message content fed back to the LLM (JSON)."""
        if self.success:
            return json.dumps(self.result, ensure_ascii=False)
        return json.dumps({"error": self.error_code, "message": self.error_message})


def parse_arguments(raw: str) -> dict[str, Any]:
    """The JSON object of a tool call's ``arguments`` ("" = no arguments)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ToolError("invalid_parameters", f"arguments are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ToolError("invalid_parameters", "arguments must be a JSON object")
    return value


class ToolBox:
    """The tools offered to the LLM, by name."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        """Index ``tools`` by name (names must be unique)."""
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool {tool.name!r}")
            self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def timeout_ms(self, name: str) -> int:
        """The time budget of ``name`` (the default for unknown tools)."""
        tool = self._tools.get(name)
        return tool.timeout_ms if tool else DEFAULT_TIMEOUT_MS

    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools`` parameter of a chat-completion request."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in self._tools.values()
        ]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> Outcome:
        """Run ``name`` with ``arguments`` within its time budget; failures are Outcomes."""
        tool = self._tools.get(name)
        if tool is None:
            return Outcome(False, error_code="unknown_tool", error_message=f"no tool {name!r}")
        try:
            async with asyncio.timeout(tool.timeout_ms / 1000):
                result = await tool.run(arguments)
        except ToolError as exc:
            return Outcome(False, error_code=exc.code, error_message=str(exc))
        except TimeoutError:
            return Outcome(False, error_code="timeout", error_message=f"over {tool.timeout_ms} ms")
        except Exception as exc:  # a tool bug must not end the turn
            return Outcome(False, error_code="execution_error", error_message=str(exc))
        return Outcome(True, result=result)


# -- calculator ----------------------------------------------------------------------

_BINARY: Final[dict[type[ast.operator], Callable[[Any, Any], Any]]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: Final[dict[type[ast.unaryop], Callable[[Any], Any]]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: Final[dict[str, Callable[..., float]]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "log": math.log,
    "exp": math.exp,
}
_CONSTANTS: Final = {"pi": math.pi, "e": math.e}
_MAX_EXPRESSION: Final = 200
_MAX_MAGNITUDE: Final = 1e100


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise ToolError("invalid_parameters", f"not a number: {value!r}")
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 1000:
            raise ToolError("invalid_parameters", "exponent too large")
        result: float | int = _BINARY[type(node.op)](left, right)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        result = _UNARY[type(node.op)](_evaluate(node.operand))
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        result = _FUNCTIONS[node.func.id](*(_evaluate(a) for a in node.args))
    else:
        raise ToolError("invalid_parameters", f"unsupported syntax: {type(node).__name__}")
    if isinstance(result, complex) or abs(result) > _MAX_MAGNITUDE:
        raise ToolError("execution_error", "result out of range")
    return result


def calculate(expression: str) -> float | int:
    """Evaluate an arithmetic expression (+ - * / // % **, parentheses, a few functions)."""
    if len(expression) > _MAX_EXPRESSION:
        raise ToolError("invalid_parameters", "expression too long")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise ToolError("invalid_parameters", f"not an expression: {expression!r}") from None
    try:
        return _evaluate(tree)
    except (ZeroDivisionError, ValueError, OverflowError, TypeError) as exc:
        raise ToolError("execution_error", str(exc)) from None


async def _calculator(arguments: Mapping[str, Any]) -> dict[str, Any]:
    expression = arguments.get("expression")
    if not isinstance(expression, str):
        raise ToolError("invalid_parameters", "expression must be a string")
    value = calculate(expression)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return {"expression": expression, "value": value}


CALCULATOR: Final = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression exactly, e.g. '17 * 23 + 4' or 'sqrt(2)'.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "The expression."}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    run=_calculator,
    timeout_ms=2_000,
)


# -- clock ---------------------------------------------------------------------------


async def _current_time(arguments: Mapping[str, Any]) -> dict[str, Any]:
    name = arguments.get("timezone", "UTC")
    if not isinstance(name, str):
        raise ToolError("invalid_parameters", "timezone must be a string")
    try:
        zone = zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ToolError("invalid_parameters", f"unknown time zone {name!r}") from None
    now = dt.datetime.now(zone)
    return {
        "timezone": name,
        "iso": now.isoformat(timespec="seconds"),
        "weekday": now.strftime("%A"),
    }


CLOCK: Final = Tool(
    name="current_time",
    description="The current date and time in an IANA time zone (default UTC).",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "e.g. Europe/Paris"}},
        "additionalProperties": False,
    },
    run=_current_time,
    timeout_ms=1_000,
)


def default_tools() -> ToolBox:
    """The calculator and the clock."""
    return ToolBox([CALCULATOR, CLOCK])
