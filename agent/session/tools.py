"""The engine's tools as livekit-agents function tools, for an AgentSession's Agent.

The worker's voice mode runs an AgentSession; the session runs its own tools, so the
engine's :class:`~alicia.agent.engine.tools.ToolBox` (calculator, current time) is offered to
it as raw function tools with the same schemas, time budgets and error outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from livekit.agents import llm

from alicia.agent.engine.tools import ToolBox, ToolError, parse_arguments

__all__ = ["session_tools", "tool_result"]


def session_tools(toolbox: ToolBox) -> list[llm.Tool | llm.Toolset]:
    """Every tool of ``toolbox`` as a livekit-agents raw function tool."""
    tools: list[llm.Tool | llm.Toolset] = []
    for schema in toolbox.schemas():
        function = schema["function"]
        tools.append(llm.function_tool(_caller(toolbox, function["name"]), raw_schema=function))
    return tools


def _caller(toolbox: ToolBox, name: str) -> Callable[[dict[str, object]], Coroutine[Any, Any, str]]:
    async def call(raw_arguments: dict[str, object]) -> str:
        """Run the tool; its outcome (result or error) goes back to the model as JSON, a
        failure as livekit-agents' ToolError (so the session marks the output an error)."""
        outcome = await toolbox.call(name, raw_arguments)
        if not outcome.success:
            raise llm.ToolError(outcome.for_llm())
        return outcome.for_llm()

    return call


def tool_result(output: str) -> dict[str, Any]:
    """A session tool's output as a ToolUseResult ``result`` object."""
    try:
        return parse_arguments(output)
    except ToolError:
        return {"output": output}
