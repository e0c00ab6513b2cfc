"""An ``llm.LLM`` for livekit-agents 1.8 that keeps the model's reasoning out of speech.

:class:`AliciaLLM` talks to any OpenAI-compatible endpoint (chat completions, or the
Responses API) through the real ``openai`` client, and reads the stream with this
project's own parts: the SSE decoder (:mod:`alicia.agent.llm.stream`), the reasoning extractor
for every provider shape (:mod:`alicia.agent.llm.reasoning`), the provider profiles
(:mod:`alicia.agent.llm.providers`) and the pass-back rules (:mod:`alicia.agent.llm.passback`).

What an AgentSession gets from each round (``chat()``):

* answer text as ``ChatChunk`` content: the only text that reaches TTS and the
  transcript;
* no reasoning at all. livekit-agents merges each chunk's ``extra`` into the assistant
  message it keeps, and its session host (``lk.agent.session``) sends every chat item,
  ``extra`` included, to every participant of the room. So reasoning goes only to the
  round's observers (:meth:`AliciaLLM.observe`), never onto a chunk or an item;
* tool calls as ``FunctionToolCall`` (so the session's own ``@function_tool``\\ s run).
  What the provider's pass-back rule needs back (DeepSeek V4's ``reasoning_content``,
  OpenRouter's ``reasoning_details``, Responses reasoning items) stays inside the LLM, in
  a bounded store (:class:`PassBackStore`) keyed by the round's first call id, sealed by
  the :class:`~alicia.agent.engine.keeper.Keeper` when it has a key. An answer whose
  reasoning goes back on later turns (the Responses API) carries only an opaque reference
  (:data:`PASSBACK_EXTRA`, a random id) on its message. Gemini's thought signature
  (opaque, signed by Google) rides on each call's ``extra["google"]`` and goes back only
  under the ``gemini`` profile;
* usage, with reasoning tokens.

Observers (:meth:`AliciaLLM.observe`) see each round as it streams: its reasoning in
order, its answer text, its tool calls, usage and error. The reasoning bridge
(:mod:`alicia.agent.session.bridge`) is one. Callbacks are plain synchronous calls made in the
round's task (so in the context of the AgentSession speech that asked for it).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final, Literal, Never, Protocol

import openai
from livekit.agents import llm
from livekit.agents._exceptions import APIConnectionError, APIStatusError, APITimeoutError
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions
from livekit.agents.types import NotGivenOr as _NotGivenOr

from alicia.agent.engine.events import Usage
from alicia.agent.engine.keeper import Keeper, Kept
from alicia.agent.llm.passback import (
    PASSBACK_KEY,
    PassBackCollector,
)
from alicia.agent.llm.providers import Effort, Profile, resolve
from alicia.agent.llm.reasoning import Answer, Reasoning, ReasoningExtractor
from alicia.agent.llm.request import stream_round
from alicia.agent.llm.toolcalls import ToolCall, merge_tool_call
from alicia.agent.settings import Settings
from alicia.protocol import new_id

__all__ = ["PASSBACK_EXTRA", "PASSBACK_KEEP", "AliciaLLM", "PassBackStore", "RoundObserver"]

logger = logging.getLogger("alicia.session.llm")

PASSBACK_EXTRA: Final = "alicia_passback"
"""``ChatMessage.extra`` key of an answer's pass-back reference: an opaque random id of
the :class:`PassBackStore` entry, never the material itself."""
PASSBACK_KEEP: Final = 256
"""Pass-back entries an :class:`AliciaLLM` keeps (tool rounds and answers); the oldest
is forgotten first (the model then goes on without that reasoning)."""
_REF_MARK: Final = "alicia_passback_ref"
"""Carries a reference through livekit's provider format (``extra["livekit"]`` is the
one message extra it keeps); taken off again before the request is sent."""


class PassBackStore:
    """Pass-back material by call id or answer reference, bounded, oldest out first."""

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int = PASSBACK_KEEP) -> None:
        """Keep at most ``limit`` entries."""
        self._entries: OrderedDict[str, Kept] = OrderedDict()
        self._limit = limit

    def put(self, key: str, kept: Kept) -> None:
        """Keep ``kept`` under ``key`` (forgetting the oldest entry past the limit)."""
        self._entries[key] = kept
        self._entries.move_to_end(key)
        while len(self._entries) > self._limit:
            self._entries.popitem(last=False)

    def get(self, key: object) -> Kept | None:
        """The entry under ``key``, if it is still kept."""
        return self._entries.get(key) if isinstance(key, str) else None

    def __len__(self) -> int:
        return len(self._entries)


class RoundObserver(Protocol):
    """Sees every LLM round of an :class:`AliciaLLM` as it streams."""

    def round_started(self, round_id: str) -> None:
        """A round (one ``chat()`` stream) starts."""
        ...

    def reasoning(self, round_id: str, text: str, *, summary: bool) -> None:
        """A piece of reasoning, in order (``summary``: the provider's own summary)."""
        ...

    def answer(self, round_id: str, text: str) -> None:
        """A piece of answer text, in order."""
        ...

    def round_ended(
        self,
        round_id: str,
        *,
        tool_calls: list[llm.FunctionToolCall],
        usage: Usage | None,
        error: BaseException | None,
    ) -> None:
        """The round is over: its tool calls, usage and error (if it failed)."""
        ...


class AliciaLLM(llm.LLM[Never]):
    """Any OpenAI-compatible model, with its reasoning kept out of speech."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str = "none",
        provider: str | None = None,
        api: Literal["chat", "responses"] = "chat",
        effort: Effort | None = None,
        thinking_open: bool = False,
        client: openai.AsyncOpenAI | None = None,
        keeper: Keeper | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        """``provider`` names a profile (None: detected from ``base_url``, else generic);
        ``keeper`` seals pass-back material (None: kept in memory)."""
        super().__init__()
        self._model = model
        self._base_url = base_url
        self._profile: Profile = resolve(provider, base_url, model)[0]
        self._api = api
        self._effort = effort
        self._thinking_open = thinking_open
        self._own_client = client is None
        self._client = client or openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout_s,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(timeout=timeout_s),
        )
        self._keeper = keeper or Keeper()
        self._passbacks = PassBackStore()
        self._observers: list[RoundObserver] = []

    @classmethod
    def from_settings(cls, settings: Settings, *, conversation_id: str = "") -> AliciaLLM:
        """The LLM a worker configured with ``settings`` uses (``LLM_*``, effort, keys)."""
        keeper = Keeper()
        if settings.reasoning_keys:
            from alicia.agent.engine.sealing import ReasoningSealer

            sealer = ReasoningSealer(settings.reasoning_keys)
            aad = conversation_id or "passback"
            keeper = Keeper(
                lambda t: sealer.seal(aad, t, knd="passback"),
                lambda v: sealer.open(v, aad, knd="passback"),
            )
        return cls(
            model=settings.llm_model,
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key,
            provider=settings.llm_provider,
            api=settings.llm_api,
            effort=settings.reasoning_effort,
            thinking_open=settings.llm_thinking_open,
            keeper=keeper,
            timeout_s=settings.llm_timeout_s,
        )

    @property
    def model(self) -> str:
        """The model name sent with each request."""
        return self._model

    @property
    def provider(self) -> str:
        """The provider profile's name."""
        return self._profile.name

    @property
    def profile(self) -> Profile:
        """The provider profile (pass-back rule and form, effort form)."""
        return self._profile

    def observe(self, observer: RoundObserver) -> Callable[[], None]:
        """Report every round to ``observer``; returns the call that stops it."""
        self._observers.append(observer)

        def unobserve() -> None:
            with contextlib.suppress(ValueError):
                self._observers.remove(observer)

        return unobserve

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: _NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: _NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: _NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> AliciaStream:
        """One streamed round for ``chat_ctx`` (see the module docstring)."""
        return AliciaStream(
            self,
            chat_ctx=chat_ctx,
            tools=tools or [],
            conn_options=conn_options,
            tool_choice=tool_choice if isinstance(tool_choice, str | dict) else None,
        )

    async def aclose(self) -> None:
        """Close the HTTP client this LLM made (not one it was given)."""
        if self._own_client:
            await self._client.close()
        await super().aclose()

    # -- used by the stream ---------------------------------------------------------

    def _request(
        self,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        tool_choice: Any,
        timeout: float,
        on_usage: Callable[[dict[str, Any]], None],
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The streamed request for ``chat_ctx`` in the configured API's shape."""
        transcript = self._transcript(chat_ctx)
        schemas = llm.ToolContext(tools).parse_function_tools("openai", strict=False)
        return stream_round(
            self._client,
            transcript,
            model=self._model,
            profile=self._profile,
            api=self._api,
            effort=self._effort,
            tools=schemas or None,
            on_usage=on_usage,
            timeout=timeout,
            **({"tool_choice": tool_choice} if tool_choice is not None else {}),
        )

    def _transcript(self, chat_ctx: llm.ChatContext) -> list[dict[str, Any]]:
        """``chat_ctx`` as chat-completions messages, pass-back material restored where
        the profile's rule needs it (and opened only now)."""
        rule, form = self._passback
        if rule == "all_turns":
            chat_ctx = _marked(chat_ctx)
        messages, _ = chat_ctx.to_provider_format(format="openai")
        out: list[dict[str, Any]] = []
        for message in messages:
            message = dict(message)
            ref = _take_mark(message)
            if message.get("role") == "assistant" and (kept := self._passbacks.get(ref)):
                message[PASSBACK_KEY] = self._keeper.open(kept)
            tool_calls = message.get("tool_calls")
            if message.get("role") == "assistant" and tool_calls:
                rendered = []
                for call in tool_calls:
                    call = dict(call)
                    if form != "thought_signature":
                        call.pop("extra_content", None)
                    rendered.append(call)
                    kept = self._passbacks.get(call.get("id"))
                    if rule != "never" and kept is not None:
                        message[PASSBACK_KEY] = self._keeper.open(kept)
                message["tool_calls"] = rendered
                message.setdefault("content", None)
            out.append(message)
        return out

    @property
    def _passback(self) -> tuple[str, str]:
        if self._api == "responses":
            return "all_turns", "reasoning_items"
        return self._profile.passback, self._profile.passback_form


class AliciaStream(llm.LLMStream):
    """One round of an :class:`AliciaLLM` as livekit-agents chat chunks."""

    def __init__(
        self,
        llm_: AliciaLLM,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        conn_options: APIConnectOptions,
        tool_choice: Any,
    ) -> None:
        """Starts streaming at once (livekit-agents' LLMStream runs ``_run``)."""
        self._alicia = llm_
        self._tool_choice = tool_choice
        super().__init__(llm_, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)

    async def _run(self) -> None:
        owner = self._alicia
        round_id = new_id("rnd")
        observers = list(owner._observers)
        for o in observers:
            o.round_started(round_id)
        usage: Usage | None = None
        calls: dict[int, ToolCall] = {}
        extractor = ReasoningExtractor(open_at_start=owner._thinking_open)
        rule, form = owner._passback
        collector = PassBackCollector(form)  # type: ignore[arg-type]
        sent = False
        error: BaseException | None = None
        out: list[llm.FunctionToolCall] = []

        def on_usage(raw: dict[str, Any]) -> None:
            nonlocal usage
            usage = (usage or Usage()) + Usage.from_provider(raw)

        def emit(parts: list[Any]) -> None:
            nonlocal sent
            for part in parts:
                sent = True
                if isinstance(part, Answer):
                    for o in observers:
                        o.answer(round_id, part.text)
                    delta = llm.ChoiceDelta(role="assistant", content=part.text)
                    self._event_ch.send_nowait(llm.ChatChunk(id=round_id, delta=delta))
                else:  # reasoning: to the observers only, never onto a chunk
                    for o in observers:
                        o.reasoning(round_id, part.text, summary=not isinstance(part, Reasoning))

        try:
            deltas = owner._request(
                self._chat_ctx, self._tools, self._tool_choice, self._conn_options.timeout, on_usage
            )
            async with contextlib.aclosing(deltas) as stream:
                async for delta in stream:
                    for tc in delta.get("tool_calls") or ():
                        if isinstance(tc, dict):
                            merge_tool_call(calls, tc)
                    if collector.active:
                        collector.feed(delta)
                    emit(extractor.feed(delta))
            emit(extractor.flush())
            material = collector.take() if rule != "never" else None
            kept = owner._keeper.keep(material)
            for i in sorted(calls):
                call = calls[i]
                out.append(
                    llm.FunctionToolCall(
                        name=call.name or "unnamed",
                        arguments=call.arguments or "{}",
                        call_id=call.id or f"call_{round_id}_{i}",
                        extra=dict(call.extra) if call.extra else None,
                    )
                )
            if kept is not None and out:  # back on this tool round: by its first call id
                owner._passbacks.put(out[0].call_id, kept)
            elif kept is not None and rule == "all_turns":
                # Back on later turns: the answer's message carries only the reference.
                owner._passbacks.put(round_id, kept)
                self._event_ch.send_nowait(
                    llm.ChatChunk(
                        id=round_id, delta=llm.ChoiceDelta(extra={PASSBACK_EXTRA: round_id})
                    )
                )
            if out:
                self._event_ch.send_nowait(
                    llm.ChatChunk(
                        id=round_id, delta=llm.ChoiceDelta(role="assistant", tool_calls=out)
                    )
                )
            if usage is not None:
                self._event_ch.send_nowait(llm.ChatChunk(id=round_id, usage=_completion(usage)))
        except openai.APITimeoutError as exc:
            error = exc
            raise APITimeoutError(retryable=not sent) from None
        except openai.APIStatusError as exc:
            error = exc
            raise APIStatusError(
                exc.message,
                status_code=exc.status_code,
                request_id=exc.request_id,
                body=exc.body,
                retryable=not sent,
            ) from None
        except openai.APIError as exc:
            error = exc
            raise APIConnectionError(str(exc), retryable=not sent) from exc
        finally:
            for o in observers:
                o.round_ended(round_id, tool_calls=out, usage=usage, error=error)


def _completion(usage: Usage) -> llm.CompletionUsage:
    return llm.CompletionUsage(
        completion_tokens=usage.completion_tokens,
        prompt_tokens=usage.prompt_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
    )


def _marked(chat_ctx: llm.ChatContext) -> llm.ChatContext:
    """A copy of ``chat_ctx`` whose answers carry their pass-back reference where livekit's
    provider format keeps it (taken off again by :func:`_take_mark`)."""
    items: list[llm.ChatItem] = []
    for item in chat_ctx.items:
        if isinstance(item, llm.ChatMessage) and isinstance(
            ref := item.extra.get(PASSBACK_EXTRA), str
        ):
            livekit = item.extra.get("livekit")
            extra = {**item.extra, "livekit": {**(livekit or {}), _REF_MARK: ref}}
            item = item.model_copy(update={"extra": extra})
        items.append(item)
    return llm.ChatContext(items)


def _take_mark(message: dict[str, Any]) -> str | None:
    """Take the pass-back reference :func:`_marked` put on ``message`` (None: none)."""
    carried = message.get("extra_content")
    if not isinstance(carried, dict) or not isinstance(carried.get("livekit"), dict):
        return None
    livekit = dict(carried["livekit"])
    ref = livekit.pop(_REF_MARK, None)
    carried = {k: v for k, v in carried.items() if k != "livekit"}
    if livekit:
        carried["livekit"] = livekit
    if carried:
        message["extra_content"] = carried
    else:
        message.pop("extra_content", None)
    return ref if isinstance(ref, str) else None
