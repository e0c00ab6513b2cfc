"""Reasoning a provider needs back, and requests in each API's shape.

:class:`PassBackCollector` keeps, from one streamed round, what the provider's
pass-back rule (:mod:`alicia.agent.llm.providers`) says must go back to it: DeepSeek V4's
``reasoning_content``, OpenRouter's ``reasoning_details`` (text with its signature,
summaries, encrypted items; streamed pieces of one item are joined), or the Responses
API's reasoning items (with ``encrypted_content``). Gemini's thought signatures travel
on the tool calls themselves (``extra_content``) and need no collector.

The turn keeps its transcript in chat-completions form; an assistant message may carry
a private ``"passback"`` key (what :meth:`PassBackCollector.take` returned).
:func:`chat_messages` and :func:`responses_input` render that transcript for each API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .providers import PassBackForm

__all__ = [
    "PASSBACK_KEY",
    "PassBackCollector",
    "chat_messages",
    "responses_input",
    "responses_tools",
]

PASSBACK_KEY: Final = "passback"
"""Private key of a transcript assistant message: its pass-back material (never sent as is)."""


class PassBackCollector:
    """What one streamed round must give back to the model, per the profile's form."""

    __slots__ = ("_details", "_form", "_items", "_text")

    def __init__(self, form: PassBackForm) -> None:
        """Collect for ``form`` (``none`` collects nothing)."""
        self._form = form
        self._text: list[str] = []
        self._details: list[dict[str, Any]] = []
        self._items: list[dict[str, Any]] = []

    @property
    def active(self) -> bool:
        """Whether this form collects anything from deltas."""
        return self._form in ("reasoning_content", "reasoning_details", "reasoning_items")

    def feed(self, delta: Mapping[str, Any]) -> None:
        """Read one delta (the same deltas the extractor reads)."""
        form = self._form
        if form == "reasoning_content":
            text = delta.get("reasoning_content")
            if text and isinstance(text, str):
                self._text.append(text)
        elif form == "reasoning_details":
            details = delta.get("reasoning_details")
            if details and isinstance(details, list):
                for detail in details:
                    if isinstance(detail, Mapping):
                        self._merge_detail(detail)
        elif form == "reasoning_items":
            item = delta.get("reasoning_item")
            if isinstance(item, Mapping):
                self._items.append(_reasoning_item(item))

    def take(self) -> dict[str, Any] | None:
        """The round's pass-back material (JSON-able), then start empty; None if none."""
        out: dict[str, Any] | None = None
        if self._form == "reasoning_content":
            out = {"reasoning_content": "".join(self._text)}  # "" too: the key is required
        elif self._form == "reasoning_details" and self._details:
            out = {"reasoning_details": self._details}
        elif self._form == "reasoning_items" and self._items:
            out = {"reasoning_items": self._items}
        self._text, self._details, self._items = [], [], []
        return out

    def _merge_detail(self, detail: Mapping[str, Any]) -> None:
        kind = detail.get("type")
        last = self._details[-1] if self._details else None
        if (
            last is not None
            and last.get("type") == kind
            and last.get("index") == detail.get("index")
            and kind in ("reasoning.text", "reasoning.summary")
        ):
            key = "text" if kind == "reasoning.text" else "summary"
            piece = detail.get(key)
            if isinstance(piece, str):
                last[key] = (last.get(key) or "") + piece
            for name, value in detail.items():
                if name not in (key, "type", "index") and value is not None:
                    last[name] = value  # signature, format, id: the latest non-null wins
            return
        self._details.append({k: v for k, v in detail.items() if v is not None})


def _reasoning_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses reasoning output item as input for the next request."""
    out: dict[str, Any] = {"type": "reasoning", "summary": item.get("summary") or []}
    for key in ("id", "encrypted_content", "content"):
        value = item.get(key)
        if value is not None:
            out[key] = value
    return out


def chat_messages(transcript: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The transcript as chat-completions messages, pass-back fields merged in."""
    out: list[dict[str, Any]] = []
    for message in transcript:
        rendered = {k: v for k, v in message.items() if k != PASSBACK_KEY}
        passback = message.get(PASSBACK_KEY) or {}
        for key in ("reasoning_content", "reasoning_details"):
            if key in passback:
                rendered[key] = passback[key]
        out.append(rendered)
    return out


def responses_input(
    transcript: Sequence[Mapping[str, Any]],
) -> tuple[str | None, list[dict[str, Any]]]:
    """The transcript as Responses API ``instructions`` and ``input`` items."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in transcript:
        role = message.get("role")
        content = message.get("content")
        if role == "system":
            instructions.append(str(content or ""))
        elif role == "user":
            items.append({"role": "user", "content": content or ""})
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id"),
                    "output": content or "",
                }
            )
        elif role == "assistant":
            passback = message.get(PASSBACK_KEY) or {}
            items.extend(passback.get("reasoning_items") or ())
            if content:
                items.append({"role": "assistant", "content": content})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments") or "",
                    }
                )
    return ("\n\n".join(instructions) or None), items


def responses_tools(schemas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions tool schemas in the Responses API's (flat) shape."""
    out: list[dict[str, Any]] = []
    for schema in schemas:
        function = schema.get("function") or {}
        tool: dict[str, Any] = {"type": "function", "name": function.get("name")}
        for key in ("description", "parameters", "strict"):
            if key in function:
                tool[key] = function[key]
        out.append(tool)
    return out
