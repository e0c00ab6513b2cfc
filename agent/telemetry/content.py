"""Other instrumentations' conversational content, kept out of the traces by default.

Our tracer provider is shared with the host framework (livekit-agents' spans in a voice
room), whose spans may carry the user's and the assistant's text: the GenAI content
attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``, the system
instructions, tool arguments and results), attributes with a ``pii`` segment
(livekit-agents' ``lk.pii.*``), the tools offered (``gen_ai.tool.definitions``), who called
an RPC (``lk.rpc.caller_identity``) and the GenAI content events. :class:`ForeignContentFilter`
strips them from every span that is not ours before any exporter sees it; our own spans
carry content only as the content policy (``ALICIA_TRACE_CONTENT``) asks.

An exception's message quotes what it failed on (a tool that fails on the user's argument,
a request the provider refused with the prompt in its error), in any span, ours too: every
``exception`` event keeps its type and the frames of its stack trace (file, line, function),
never a message, and a span's error status keeps its code, not its description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import Status

__all__ = [
    "CONTENT_ATTRIBUTES",
    "CONTENT_EVENTS",
    "ForeignContentFilter",
    "frames_only",
    "is_content",
]

CONTENT_ATTRIBUTES: Final = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.prompt",
        "gen_ai.completion",
        "gen_ai.tool.definitions",
        "lk.rpc.caller_identity",
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


_FRAME: Final = re.compile(r'^[\s|]*File "')


def frames_only(stacktrace: str) -> str:
    """A Python stack trace without its messages: the header and each frame's location."""
    return "\n".join(
        line
        for line in stacktrace.splitlines()
        if line.startswith("Traceback") or _FRAME.match(line)
    )


def _without_message(event: Event) -> Event:
    """An ``exception`` event with its type and frames only (other events as they are)."""
    if event.name != "exception":
        return event
    attributes = dict(event.attributes or {})
    attributes.pop("exception.message", None)
    trace = attributes.get("exception.stacktrace")
    if isinstance(trace, str):
        attributes["exception.stacktrace"] = frames_only(trace)
    return Event(event.name, attributes, event.timestamp)


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
        if span.status.description:
            span._status = Status(span.status.status_code)
        if any(e.name == "exception" for e in span.events):
            span._events = tuple(_without_message(e) for e in span.events)
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
