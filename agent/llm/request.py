"""One streamed LLM round in the shape of the configured API and provider.

Both the engine's :class:`~agent.engine.turn.Turn` and the AgentSession LLM
(:mod:`agent.session.llm`) keep their transcript in chat-completions form, with pass-back
material already opened under ``PASSBACK_KEY`` (:mod:`agent.llm.passback`).
:func:`stream_round` renders it for chat completions or the Responses API, adds the
profile's effort parameters (``extra_body``) and Responses settings (``store: false``,
encrypted reasoning), and streams the round's deltas.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletionMessageParam

from .passback import chat_messages, responses_input, responses_tools
from .providers import Effort, Profile
from .stream import stream_deltas, stream_response_deltas

__all__ = ["stream_round"]


def stream_round(
    client: openai.AsyncOpenAI,
    transcript: Sequence[dict[str, Any]],
    *,
    model: str,
    profile: Profile,
    api: Literal["chat", "responses"],
    effort: Effort | None = None,
    tools: list[dict[str, Any]] | None = None,
    on_usage: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> AsyncGenerator[dict[str, Any], None]:
    """The round's chat-shaped deltas; ``params`` go to the SDK as they are (``timeout``,
    ``tool_choice``). Chat completions are asked for their usage chunk unless the profile
    says the provider refuses that (:attr:`Profile.stream_usage`)."""
    extra: dict[str, Any] = dict(params)
    effort_params = profile.effort_params(effort, api)
    if effort_params:  # provider-specific fields go in the body as they are
        extra["extra_body"] = effort_params
    if not tools:
        extra.pop("tool_choice", None)
    if api == "responses":
        instructions, items = responses_input(transcript)
        if instructions is not None:
            extra["instructions"] = instructions
        if tools:
            extra["tools"] = responses_tools(tools)
        return stream_response_deltas(
            client,
            model=model,
            input=items,
            on_usage=on_usage,
            **profile.responses_params(),
            **extra,
        )
    if tools:
        extra["tools"] = tools
    if profile.stream_usage:
        extra["stream_options"] = {"include_usage": True}
    return stream_deltas(
        client,
        model=model,
        messages=cast("list[ChatCompletionMessageParam]", chat_messages(transcript)),
        on_usage=on_usage,
        **extra,
    )
