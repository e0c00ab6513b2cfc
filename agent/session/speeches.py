"""Which speech of an AgentSession a livekit-agents callback runs for.

livekit-agents runs each speech's LLM rounds and tools in a task that keeps its
:class:`SpeechHandle` in a context variable. Code called from there (the LLM's stream, the
``function_tools_executed`` event) reads it with :func:`running_speech`; the session's
``current_speech`` is no substitute, as it is empty while a tool runs (the speech gave up
the floor until its tool reply is scheduled again).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from livekit.agents import AgentSession, llm
from livekit.agents.voice import SpeechHandle

__all__ = ["running_speech", "speech_failed", "spoken_text"]


def running_speech(session: AgentSession[Any]) -> SpeechHandle | None:
    """The speech whose task runs now, else the session's current one (if any)."""
    try:
        from livekit.agents.voice.agent_activity import _SpeechHandleContextVar
    except ImportError:  # pragma: no cover - a livekit-agents without it
        handle = None
    else:
        handle = _SpeechHandleContextVar.get(None)
    if handle is not None:
        return handle
    try:
        return session.current_speech
    except Exception:  # no activity (closing)
        return None


def speech_failed(handle: SpeechHandle) -> bool:
    """Whether the speech ended with an error (False while it runs)."""
    with contextlib.suppress(asyncio.InvalidStateError):
        return handle.exception() is not None
    return False


def spoken_text(handle: SpeechHandle) -> str:
    """What the speech said: its assistant messages' text, joined."""
    return " ".join(
        item.text_content or ""
        for item in handle.chat_items
        if isinstance(item, llm.ChatMessage) and item.role == "assistant"
    ).strip()
