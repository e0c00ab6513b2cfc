"""The providers' request rules the recorded LLM enforces, with their real errors.

A stream's manifest ``rules`` (:data:`RULES`) are checked against the request body before
anything is streamed; a request that breaks one gets the provider's own status and JSON
error body (DeepSeek, OpenRouter wrapping Anthropic, Gemini's JSON list, OpenAI
Responses), so the ``openai`` client raises the same exception with the same text as
against the real provider.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from .recorded_streams import StreamSpec

__all__ = ["RULES", "Refusal", "Rejection", "Rule", "RuleContext"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A provider's answer to a request that breaks one of its rules."""

    status: int
    body: Any
    """The JSON body exactly as the provider sends it (an object, or Gemini's list)."""
    message: str
    """The provider's error text (also inside ``body``)."""


class Rejection(NamedTuple):
    """One refused request: the stream that would have answered, the rule, the text."""

    stream: str
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule compares the request with."""

    spec: StreamSpec
    """The stream that would answer the request."""
    origin: StreamSpec
    """The tool-call stream it continues (``spec`` itself when it is not a follow-up)."""
    encrypted: frozenset[str]
    """Every ``encrypted_content`` the recorded Responses streams hand out."""


Rule = Callable[[Mapping[str, Any], RuleContext], Refusal | None]

DEEPSEEK_V4_PASSBACK: Final = (
    "The `reasoning_content` in the thinking mode must be passed back to the API."
)
ANTHROPIC_THINKING_FIRST: Final = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
GEMINI_MISSING_SIGNATURE: Final = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {index}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more "
    "details."
)
RESPONSES_ITEM_NOT_FOUND: Final = (
    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. "
    "Try again with `store` set to true, or remove this item from your input."
)
RESPONSES_MISSING_REASONING: Final = (
    "Item '{fc}' of type 'function_call' was provided without its required 'reasoning' "
    "item: '{rs}'."
)


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = body.get("messages")
    return [m for m in value if isinstance(m, Mapping)] if isinstance(value, list) else []


def _tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _deepseek_error(message: str) -> Refusal:
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }
    return Refusal(400, body, message)


def _openai_error(
    status: int, message: str, *, param: str | None = "input", code: str | None = None
) -> Refusal:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }
    return Refusal(status, body, message)


def deepseek_reasoner_no_reasoning_input(
    body: Mapping[str, Any], context: RuleContext
) -> Refusal | None:
    """deepseek-reasoner answers 400 when an input message carries ``reasoning_content``
    (DeepSeek's reasoning-model guide; the wording of the message here is ours)."""
    for index, message in enumerate(_messages(body)):
        if "reasoning_content" in message:
            return _deepseek_error(
                "The `reasoning_content` field is not supported in the input messages of "
                f"deepseek-reasoner (message index {index}). Remove it from previous "
                "assistant messages before sending them back."
            )
    return None


def deepseek_v4_passback(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """DeepSeek V4 thinking mode: an assistant message with tool calls must carry its
    ``reasoning_content`` (a string) in every later request."""
    for message in _messages(body):
        if _tool_calls(message) and not isinstance(message.get("reasoning_content"), str):
            return _deepseek_error(DEEPSEEK_V4_PASSBACK)
    return None


def _anthropic_index(messages: list[Mapping[str, Any]], target: int) -> int:
    """The index Anthropic gives ``messages[target]``: no system messages, and tool
    results merged with the user turn around them."""
    index, previous = -1, None
    for message in messages[: target + 1]:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        kind = "user" if role in ("user", "tool") else role
        if kind != previous:
            index += 1
        previous = kind
    return index


def openrouter_reasoning_details(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """OpenRouter to Anthropic with reasoning: the last assistant message with tool calls
    must start with its signed thinking block, i.e. carry ``reasoning_details`` with the
    recorded ``reasoning.text`` (joined text and signature as streamed). OpenRouter wraps
    Anthropic's error: ``Provider returned error`` with the raw body in ``metadata``. The
    missing-thinking text is Anthropic's as publicly reported; the two signature texts
    (missing, changed) follow Anthropic's validation-error form but are not confirmed."""
    messages = _messages(body)
    targets = [i for i, m in enumerate(messages) if _tool_calls(m)]
    if not targets:
        return None
    index = _anthropic_index(messages, targets[-1])
    recorded = next(
        (
            d
            for d in (context.origin.passback or {}).get("reasoning_details", ())
            if isinstance(d, Mapping) and d.get("type") == "reasoning.text"
        ),
        {},
    )
    details = messages[targets[-1]].get("reasoning_details")
    texts = [
        d
        for d in (details if isinstance(details, list) else [])
        if isinstance(d, Mapping) and d.get("type") == "reasoning.text"
    ]
    signatures = {d.get("signature") for d in texts} - {None, ""}
    joined = "".join(str(d.get("text") or "") for d in texts)
    if not texts:
        message = ANTHROPIC_THINKING_FIRST.format(index=index)
    elif not signatures:
        message = f"messages.{index}.content.0.thinking.signature: Field required"
    elif recorded.get("signature") not in signatures or joined != recorded.get("text"):
        message = f"messages.{index}.content.0: Invalid `signature` in `thinking` block"
    else:
        return None
    raw = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": "req_011CXRecordedLLM4gT7wYqN2b",
    }
    wrapped = {
        "error": {
            "message": "Provider returned error",
            "code": 400,
            "metadata": {
                "raw": json.dumps(raw, separators=(",", ":")),
                "provider_name": "Anthropic",
            },
        },
        "user_id": "user_2zRecordedLLMReplayServer",
    }
    return Refusal(400, wrapped, message)


def gemini_thought_signature(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """Gemini's OpenAI-compatible endpoint: every assistant tool call must carry the
    recorded ``extra_content.google.thought_signature``. Gemini's errors there are a JSON
    list of error objects. The missing-signature text is Gemini's as publicly reported;
    the changed-signature text ("Corrupted thought signature.") is not confirmed."""
    expected = (context.origin.passback or {}).get("thought_signature")
    for index, message in enumerate(_messages(body)):
        for call in _tool_calls(message):
            signature = _dig(call, "extra_content", "google", "thought_signature")
            if not isinstance(signature, str) or not signature:
                name = _dig(call, "function", "name")
                text = GEMINI_MISSING_SIGNATURE.format(name=name, index=index)
            elif signature != expected:
                text = "Corrupted thought signature."
            else:
                continue
            error = {"error": {"code": 400, "message": text, "status": "INVALID_ARGUMENT"}}
            return Refusal(400, [error], text)
    return None


def responses_reasoning_items(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """OpenAI Responses API for a zero-data-retention client: ``store`` must be false and
    ``previous_response_id`` unused; reasoning items come back whole (their
    ``encrypted_content``, as recorded), never by id alone; a ``function_call`` item must
    follow the reasoning item that produced it."""
    if body.get("previous_response_id"):
        return _openai_error(
            400,
            "Previous response cannot be used for this organization due to Zero Data Retention.",
            param="previous_response_id",
        )
    if body.get("store") is not False:
        # The recordings are for a zero-data-retention organization; the text is ours.
        return _openai_error(
            400,
            "Stored responses are not available for this organization (zero data "
            "retention): set `store` to false.",
            param="store",
        )
    raw = body.get("input")
    items = [i for i in raw if isinstance(i, Mapping)] if isinstance(raw, list) else []
    for item in items:
        kind, item_id = item.get("type"), item.get("id")
        encrypted = item.get("encrypted_content")
        if kind == "item_reference" or (kind == "reasoning" and not encrypted):
            return _openai_error(404, RESPONSES_ITEM_NOT_FOUND.format(id=item_id))
        if kind == "reasoning" and encrypted not in context.encrypted:
            return _openai_error(
                400,
                f"The encrypted content for item {item_id} could not be verified. "
                "Reason: Encrypted content could not be decrypted or parsed.",
                param=None,
                code="invalid_encrypted_content",
            )
    recorded = _dig(context.origin.passback, "reasoning_item", "id") or "rs_"
    item_ids = {c.get("id"): c.get("item_id") for c in context.origin.tool_calls}
    for position, item in enumerate(items):
        if item.get("type") != "function_call":
            continue
        before = position - 1
        while before >= 0 and items[before].get("type") == "function_call":
            before -= 1  # parallel calls share the reasoning item before the first one
        previous = items[before] if before >= 0 else {}
        if previous.get("type") == "reasoning" and previous.get("encrypted_content"):
            continue
        fc = item.get("id") or item_ids.get(item.get("call_id")) or "fc_"
        return _openai_error(400, RESPONSES_MISSING_REASONING.format(fc=fc, rs=recorded))
    return None


RULES: Final[Mapping[str, Rule]] = {
    "deepseek_reasoner_no_reasoning_input": deepseek_reasoner_no_reasoning_input,
    "deepseek_v4_passback": deepseek_v4_passback,
    "openrouter_reasoning_details": openrouter_reasoning_details,
    "gemini_thought_signature": gemini_thought_signature,
    "responses_reasoning_items": responses_reasoning_items,
}
"""Request rules by name (a manifest entry's ``rules``)."""
