"""Provider profiles: where each provider family puts reasoning, and what it wants back.

One row per provider family (:data:`PROFILES`). ``LLM_PROVIDER`` names a row; without it
:func:`resolve` detects one from the base URL (and, for DeepSeek, the model name) only
where that is unambiguous, else uses ``generic``. The extractor reads every known shape
whatever the row (fields, blocks and inline markers never collide), so a row decides
what a stream cannot tell by itself:

* **pass-back** — whether the model must get its own reasoning back, and in which form:
  ``never`` (the default: reasoning never goes back to the model), ``tool_rounds`` (in
  the assistant messages of the current turn's tool rounds: DeepSeek V4 answers 400
  without ``reasoning_content``; OpenRouter needs signed ``reasoning_details``; Gemini
  needs each tool call's thought signature), or ``all_turns`` (the Responses API's
  encrypted reasoning items, carried into every later request of the conversation);
* **effort** — how ``ALICIA_REASONING_EFFORT`` is sent (``reasoning_effort``,
  ``reasoning.effort``, Ollama's ``think``, Qwen3's ``enable_thinking`` …).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

__all__ = [
    "EFFORTS",
    "PROFILES",
    "Effort",
    "PassBack",
    "PassBackForm",
    "Profile",
    "ProviderError",
    "detect",
    "resolve",
]

PassBack = Literal["never", "tool_rounds", "all_turns"]
PassBackForm = Literal[
    "none", "reasoning_content", "reasoning_details", "thought_signature", "reasoning_items"
]
EffortForm = Literal[
    "reasoning_effort", "openrouter", "ollama_think", "enable_thinking", "deepseek", "unsupported"
]
Effort = Literal["none", "low", "medium", "high"]
EFFORTS: Final = ("none", "low", "medium", "high")


class ProviderError(ValueError):
    """``LLM_PROVIDER`` / ``LLM_API`` / ``ALICIA_REASONING_EFFORT`` is not usable."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One provider family: its reasoning shapes, pass-back rule and effort form."""

    name: str
    family: str
    """Who serves it, for logs and docs."""
    reasoning: str
    """Where reasoning arrives (documentation; the extractor reads every shape)."""
    passback: PassBack = "never"
    passback_form: PassBackForm = "none"
    effort_form: EffortForm = "reasoning_effort"
    apis: tuple[str, ...] = ("chat",)
    """The APIs (``chat``, ``responses``) this family serves."""
    stream_usage: bool = True
    """Chat completions stream token usage (reasoning tokens too) only when the request
    asks, ``stream_options: {"include_usage": true}`` (OpenAI, vLLM, Ollama, DeepSeek and
    most OpenAI-compatible servers): asked unless a family refuses the option. The
    Responses API reports usage anyway."""

    def effort_params(self, effort: Effort | None, api: str) -> dict[str, Any]:
        """Request parameters that ask for ``effort`` (``{}`` when unset)."""
        if effort is None or self.effort_form == "unsupported":
            return {}
        if api == "responses":
            return {"reasoning": {"effort": effort, "summary": "auto"}}
        form = self.effort_form
        if form == "openrouter":
            if effort == "none":
                return {"reasoning": {"enabled": False}}
            return {"reasoning": {"effort": effort}}
        if form == "ollama_think":
            return {"think": False if effort == "none" else effort}
        if form == "enable_thinking":
            return {"chat_template_kwargs": {"enable_thinking": effort != "none"}}
        if form == "deepseek":
            if effort == "none":
                return {"thinking": {"type": "disabled"}}
            return {"thinking": {"type": "enabled"}, "reasoning_effort": effort}
        return {"reasoning_effort": effort}

    def responses_params(self) -> dict[str, Any]:
        """What every Responses API request of this profile carries (zero data retention)."""
        return {"store": False, "include": ["reasoning.encrypted_content"]}


_P = Profile
PROFILES: Final[dict[str, Profile]] = {
    p.name: p
    for p in (
        _P(
            "generic",
            "any OpenAI-compatible server",
            "reasoning_content / reasoning / thinking fields, reasoning blocks, and inline "
            "markers: <think>, <thinking>, Kimi ◁think▷, gpt-oss harmony channels, Gemma "
            "<|channel>thought",
            apis=("chat", "responses"),
        ),
        _P(
            "openai",
            "OpenAI API",
            "none in chat completions; Responses API reasoning summaries and raw reasoning",
            passback="all_turns",
            passback_form="reasoning_items",
            apis=("chat", "responses"),
        ),
        _P(
            "deepseek",
            "DeepSeek API, V4 thinking mode (deepseek-v4-pro, deepseek-v4-flash)",
            "delta.reasoning_content",
            passback="tool_rounds",
            passback_form="reasoning_content",
            effort_form="deepseek",
        ),
        _P(
            "deepseek-reasoner",
            "DeepSeek API, deepseek-reasoner (refuses reasoning_content in input)",
            "delta.reasoning_content",
            effort_form="unsupported",
        ),
        _P(
            "vllm",
            "vLLM (--reasoning-parser), Qwen3 templates",
            "delta.reasoning (reasoning_content before 2026), <think> without a parser",
            effort_form="enable_thinking",
            apis=("chat", "responses"),
        ),
        _P(
            "llamacpp",
            "llama.cpp server",
            "delta.reasoning_content; with deepseek-legacy also <think> in content (read once)",
        ),
        _P(
            "ollama",
            "Ollama",
            "delta.reasoning (OpenAI endpoint), thinking (native API), <think> before 0.9",
            effort_form="ollama_think",
        ),
        _P(
            "openrouter",
            "OpenRouter",
            "delta.reasoning and reasoning_details (reasoning.text / .summary / .encrypted)",
            passback="tool_rounds",
            passback_form="reasoning_details",
            effort_form="openrouter",
        ),
        _P(
            "mistral",
            "Mistral API (Magistral)",
            "content blocks {type: thinking, thinking: [{type: text}]}",
            effort_form="unsupported",
        ),
        _P(
            "gemini",
            "Gemini OpenAI-compatible endpoint",
            "thought signatures on tool calls (extra_content.google.thought_signature)",
            passback="tool_rounds",
            passback_form="thought_signature",
        ),
        _P(
            "anthropic",
            "Anthropic OpenAI-compatible endpoint",
            "<thinking> in content (no extended thinking through this endpoint)",
            effort_form="unsupported",
        ),
    )
}

_HOSTS: Final = {
    "api.openai.com": "openai",
    "api.deepseek.com": "deepseek",
    "openrouter.ai": "openrouter",
    "api.mistral.ai": "mistral",
    "generativelanguage.googleapis.com": "gemini",
    "api.anthropic.com": "anthropic",
}
_DEEPSEEK_LEGACY_MODELS: Final = frozenset({"deepseek-reasoner"})


def detect(base_url: str, model: str) -> Profile | None:
    """The profile a base URL (and model) identifies unambiguously, else None."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    name = _HOSTS.get(host)
    if name is None and parts.port == 11434:
        name = "ollama"  # Ollama's own port
    if name == "deepseek" and model in _DEEPSEEK_LEGACY_MODELS:
        name = "deepseek-reasoner"
    return PROFILES[name] if name is not None else None


def resolve(name: str | None, base_url: str, model: str) -> tuple[Profile, str]:
    """The profile to use and how it was chosen (``LLM_PROVIDER``, ``detected`` or
    ``default``); :class:`ProviderError` for an unknown name."""
    if name:
        profile = PROFILES.get(name.strip().lower())
        if profile is None:
            known = ", ".join(PROFILES)
            raise ProviderError(f"LLM_PROVIDER={name!r} is not a known provider ({known})")
        return profile, "LLM_PROVIDER"
    found = detect(base_url, model)
    if found is not None:
        return found, "detected"
    return PROFILES["generic"], "default"
