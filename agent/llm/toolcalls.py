"""Tool calls as models stream them: fragments merged into whole calls.

A streamed tool call arrives in fragments (``delta.tool_calls`` items with an
``index``): the id and name once, the JSON arguments in pieces, and provider data that
must come back with the call (Gemini's ``extra_content`` thought signature).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ToolCall", "merge_tool_call"]


@dataclass(slots=True)
class ToolCall:
    """One tool call being assembled (then whole)."""

    id: str = ""
    name: str = ""
    arguments: str = ""
    extra: dict[str, Any] | None = None
    """Provider data that must come back with the call (Gemini's thought signature)."""

    def message(self, *, extra: bool) -> dict[str, Any]:
        """The call as an assistant message's ``tool_calls`` item (``extra``: with the
        provider data the profile's pass-back rule returns)."""
        item: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if extra and self.extra is not None:
            item["extra_content"] = self.extra
        return item


def merge_tool_call(calls: dict[int, ToolCall], tc: dict[str, Any]) -> None:
    """Fold one streamed tool-call fragment (a delta's ``tool_calls`` item) into ``calls``."""
    index = tc.get("index")
    call = calls.setdefault(index if isinstance(index, int) else 0, ToolCall())
    if isinstance(tc_id := tc.get("id"), str) and tc_id:
        call.id = tc_id
    extra = tc.get("extra_content")
    if isinstance(extra, dict):
        call.extra = extra
    function = tc.get("function")
    if isinstance(function, dict):
        name = function.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments += arguments
