"""Other instrumentations' conversational content, kept out of the traces by default.

Our tracer provider is shared with the host framework (livekit-agents' spans in a voice
room), whose spans may carry the user's and the assistant's text: the GenAI content
attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``, the system
instructions, tool arguments and results), attributes with a ``pii`` segment
(livekit-agents' ``lk.pii.*``) and the GenAI content events. :class:`ForeignContentFilter`
strips them from every span that is not ours before any exporter sees it; our own spans
carry content only as the content policy (``ALICIA_TRACE_CONTENT``) asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor

__all__ = ["CONTENT_ATTRIBUTES", "CONTENT_EVENTS", "ForeignContentFilter", "is_content"]

CONTENT_ATTRIBUTES: Final = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.prompt",
        "gen_ai.completion",
    }
)
"""The GenAI semantic conventions' attributes that hold conversation text."""
CONTENT_EVENTS: Final = frozenset(
    {
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.client.inference.operation.details",
    }
)
"""The GenAI content events (their body is the message)."""


def is_content(key: str) -> bool:
    """Whether the attribute ``key`` holds conversation text (see the module docstring)."""
    return key in CONTENT_ATTRIBUTES or "pii" in key.split(".") or key.startswith("gen_ai.prompt.")


def _kept(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if not is_content(k)}


class ForeignContentFilter(SpanProcessor):
    """Strips conversation text from spans of other instrumentation scopes than ``ours``.

    Registered before the exporting processor: ``on_end`` runs in registration order over
    one snapshot, so what it rebinds is what the exporter sends.
    """

    def __init__(self, ours: str) -> None:
        """``ours``: the instrumentation scope left as it is."""
        self.ours = ours

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing at start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Rebind the ended span's attributes and events without their content."""
        scope = span.instrumentation_scope
        if scope is not None and scope.name == self.ours:
            return
        attributes = span.attributes or {}
        if any(is_content(k) for k in attributes):
            span._attributes = _kept(attributes)
        events = span.events
        if any(  # an event of content, or with content
            e.name in CONTENT_EVENTS or any(map(is_content, e.attributes or {})) for e in events
        ):
            span._events = tuple(
                Event(e.name, _kept(e.attributes), e.timestamp)
                for e in events
                if e.name not in CONTENT_EVENTS
            )

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is buffered."""
        return True
