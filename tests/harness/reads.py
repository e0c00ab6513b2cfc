"""Reading the recorded-stream server with the real openai client (chat completions)."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from alicia.agent.llm.reasoning import Part, ReasoningExtractor


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]


async def read(
    client: AsyncOpenAI, messages: list[Any], *, open_at_start: bool = False
) -> tuple[list[Part], list[dict[str, str]], str | None, str]:
    """Stream one completion: (parts, tool calls, finish reason, model)."""
    parts, calls, finish, model, _ = await read_raw(client, messages, open_at_start=open_at_start)
    return parts, calls, finish, model


async def read_raw(
    client: AsyncOpenAI, messages: list[Any], *, open_at_start: bool = False
) -> tuple[list[Part], list[dict[str, str]], str | None, str, list[dict[str, Any]]]:
    """Stream one completion: (parts, tool calls, finish reason, model, raw deltas)."""
    stream = await client.chat.completions.create(
        model="any", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    extractor = ReasoningExtractor(open_at_start=open_at_start)
    parts: list[Part] = []
    deltas: list[dict[str, Any]] = []
    calls: dict[int, dict[str, str]] = {}
    finish: str | None = None
    model = ""
    async with stream:
        async for chunk in stream:
            model = chunk.model
            for choice in chunk.choices:
                delta = choice.delta.model_dump(warnings=False)
                deltas.append(delta)
                parts += extractor.feed(delta)
                for i, call in enumerate(choice.delta.tool_calls or []):
                    index = i if call.index is None else call.index  # Gemini sends no index
                    entry = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += call.id or ""
                    if call.function is not None:
                        entry["name"] += call.function.name or ""
                        entry["arguments"] += call.function.arguments or ""
                finish = choice.finish_reason or finish
    parts += extractor.flush()
    return parts, [calls[i] for i in sorted(calls)], finish, model, deltas
