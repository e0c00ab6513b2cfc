"""Provider profiles, pass-back collection and rendering, and the sealed keeper."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from alicia.agent.engine.keeper import Keeper, Kept
from alicia.agent.engine.sealing import ReasoningSealer, SealError
from alicia.agent.engine.turn import Exchange, Turn, TurnOptions
from alicia.agent.llm.passback import (
    PASSBACK_KEY,
    PassBackCollector,
    chat_messages,
    responses_input,
    responses_tools,
)
from alicia.agent.llm.providers import PROFILES, ProviderError, detect, resolve
from alicia.agent.settings import Settings, SettingsError

BASE = {
    "LIVEKIT_URL": "ws://127.0.0.1:7880",
    "LIVEKIT_API_KEY": "k",
    "LIVEKIT_API_SECRET": "s" * 32,
    "LLM_BASE_URL": "http://127.0.0.1:1/v1",
    "LLM_MODEL": "m",
}

# -- profiles --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "model", "name"),
    [
        ("https://api.deepseek.com/v1", "deepseek-v4-flash", "deepseek"),
        ("https://api.deepseek.com", "deepseek-reasoner", "deepseek-reasoner"),
        ("https://openrouter.ai/api/v1", "anthropic/claude-sonnet-4.5", "openrouter"),
        ("https://api.openai.com/v1", "gpt-5-mini", "openai"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "gemini-2.5-flash", "gemini"),
        ("https://api.mistral.ai/v1", "magistral-medium-2509", "mistral"),
        ("http://localhost:11434/v1", "qwen3:8b", "ollama"),
    ],
)
def test_detect_from_the_base_url(url: str, model: str, name: str) -> None:
    profile = detect(url, model)
    assert profile is not None and profile.name == name
    assert resolve(None, url, model) == (profile, "detected")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1", "http://vllm.internal/v1", "https://example.com/v1"]
)
def test_ambiguous_urls_are_generic_by_default(url: str) -> None:
    assert detect(url, "Qwen/Qwen3-8B") is None
    assert resolve(None, url, "Qwen/Qwen3-8B") == (PROFILES["generic"], "default")


def test_the_setting_wins_and_an_unknown_name_is_a_clear_error() -> None:
    profile, how = resolve("DeepSeek", "http://127.0.0.1:1/v1", "x")
    assert (profile.name, how) == ("deepseek", "LLM_PROVIDER")
    with pytest.raises(ProviderError, match="not a known provider"):
        resolve("nope", "http://127.0.0.1:1/v1", "x")
    with pytest.raises(SettingsError, match="LLM_PROVIDER"):
        Settings.from_env({**BASE, "LLM_PROVIDER": "nope"})
    with pytest.raises(SettingsError, match="LLM_API"):
        Settings.from_env({**BASE, "LLM_API": "completions"})
    with pytest.raises(SettingsError, match="ALICIA_REASONING_EFFORT"):
        Settings.from_env({**BASE, "ALICIA_REASONING_EFFORT": "max"})
    s = Settings.from_env(
        {
            **BASE,
            "LLM_PROVIDER": "openrouter",
            "LLM_API": "responses",
            "ALICIA_REASONING_EFFORT": "Low",
        }
    )
    assert (s.llm_provider, s.llm_api, s.reasoning_effort) == ("openrouter", "responses", "low")


def test_only_the_rows_that_need_it_pass_reasoning_back() -> None:
    needs = {
        p.name: (p.passback, p.passback_form) for p in PROFILES.values() if p.passback != "never"
    }
    assert needs == {
        "openai": ("all_turns", "reasoning_items"),
        "deepseek": ("tool_rounds", "reasoning_content"),
        "openrouter": ("tool_rounds", "reasoning_details"),
        "gemini": ("tool_rounds", "thought_signature"),
    }
    assert PROFILES["deepseek-reasoner"].passback == "never"
    assert TurnOptions(model="m", system_prompt="").passback == ("never", "none")
    responses = TurnOptions(model="m", system_prompt="", api="responses")
    assert responses.passback == ("all_turns", "reasoning_items")


@pytest.mark.parametrize(
    ("name", "effort", "api", "expected"),
    [
        ("generic", "low", "chat", {"reasoning_effort": "low"}),
        ("generic", None, "chat", {}),
        ("openai", "high", "responses", {"reasoning": {"effort": "high", "summary": "auto"}}),
        ("openrouter", "medium", "chat", {"reasoning": {"effort": "medium"}}),
        ("openrouter", "none", "chat", {"reasoning": {"enabled": False}}),
        ("ollama", "none", "chat", {"think": False}),
        ("ollama", "high", "chat", {"think": "high"}),
        ("vllm", "none", "chat", {"chat_template_kwargs": {"enable_thinking": False}}),
        ("vllm", "low", "chat", {"chat_template_kwargs": {"enable_thinking": True}}),
        ("deepseek", "none", "chat", {"thinking": {"type": "disabled"}}),
        ("deepseek", "high", "chat", {"thinking": {"type": "enabled"}, "reasoning_effort": "high"}),
        ("mistral", "low", "chat", {}),
    ],
)
def test_effort_in_each_providers_own_form(
    name: str, effort: str | None, api: str, expected: dict[str, object]
) -> None:
    assert PROFILES[name].effort_params(effort, api) == expected  # type: ignore[arg-type]


# -- collecting and rendering ----------------------------------------------------------


def test_reasoning_content_is_collected_and_required_even_empty() -> None:
    c = PassBackCollector("reasoning_content")
    for piece in ("Let ", "me ", "think."):
        c.feed({"reasoning_content": piece, "content": None})
    c.feed({"content": "x"})
    assert c.take() == {"reasoning_content": "Let me think."}
    assert c.take() == {"reasoning_content": ""}


def test_openrouter_details_are_merged_per_item_with_their_signature() -> None:
    c = PassBackCollector("reasoning_details")
    fmt = "anthropic-claude-v1"
    for piece in ("I should ", "call the tool."):
        c.feed(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "text": piece, "format": fmt, "index": 0}
                ]
            }
        )
    c.feed(
        {
            "reasoning_details": [
                {"type": "reasoning.text", "text": "", "signature": "sig==", "index": 0}
            ]
        }
    )
    c.feed({"reasoning_details": [{"type": "reasoning.encrypted", "data": "gAAA", "index": 1}]})
    assert c.take() == {
        "reasoning_details": [
            {
                "type": "reasoning.text",
                "text": "I should call the tool.",
                "format": fmt,
                "index": 0,
                "signature": "sig==",
            },
            {"type": "reasoning.encrypted", "data": "gAAA", "index": 1},
        ]
    }
    assert c.take() is None


def test_nothing_is_collected_for_profiles_that_never_pass_back() -> None:
    c = PassBackCollector("none")
    c.feed({"reasoning_content": "secret"})
    assert not c.active and c.take() is None


def test_chat_rendering_merges_passback_and_drops_the_private_key() -> None:
    transcript: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            PASSBACK_KEY: {"reasoning_content": "R"},
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    out = chat_messages(transcript)
    assert out[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": transcript[1]["tool_calls"],
        "reasoning_content": "R",
    }
    assert all(PASSBACK_KEY not in m for m in out)


def test_responses_rendering_carries_reasoning_items_before_their_calls() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    transcript: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "answer", PASSBACK_KEY: {"reasoning_items": [item]}},
        {"role": "user", "content": "now"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            PASSBACK_KEY: {"reasoning_items": [item]},
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    instructions, items = responses_input(transcript)
    assert instructions == "Be brief."
    assert items == [
        {"role": "user", "content": "earlier"},
        item,
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "now"},
        item,
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    ]
    schema = {
        "type": "function",
        "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
    }
    assert responses_tools([schema]) == [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    ]


# -- the keeper ------------------------------------------------------------------------

KEY = ("k1", base64.b64decode(base64.b64encode(bytes(range(32)))))


def test_keeper_seals_what_it_keeps_and_opens_only_for_its_conversation() -> None:
    sealer = ReasoningSealer([KEY])
    keeper = Keeper(lambda t: sealer.seal("conv_a", t), lambda v: sealer.open(v, "conv_a"))
    kept = keeper.keep({"reasoning_content": "CANARY-PASSBACK"})
    assert kept is not None and kept.plain is None and kept.sealed is not None
    assert "CANARY" not in kept.sealed
    assert keeper.open(kept) == {"reasoning_content": "CANARY-PASSBACK"}
    other = Keeper(lambda t: sealer.seal("conv_b", t), lambda v: sealer.open(v, "conv_b"))
    with pytest.raises(SealError, match="another conversation"):
        other.open(kept)
    assert Keeper().keep(None) is None
    assert Keeper().open(Kept(plain={"a": 1})) == {"a": 1}


def test_history_never_holds_two_user_messages_in_a_row() -> None:
    history = [
        Exchange("u1", "first", "a1", "First answer."),
        Exchange("u2", "failed turn", "a2", ""),  # failed before any answer text
        Exchange("u3", "stopped turn", "a3", "<think>only reasoning</think>"),
        Exchange("u4", "fourth", "a4", "Fourth answer."),
    ]
    turn = Turn(
        user_id="u5",
        text="now",
        answer_id="a5",
        llm=None,  # type: ignore[arg-type]
        options=TurnOptions(model="m", system_prompt="S"),
        history=history,
    )
    messages = turn._context()
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in messages[1:]] == [
        "first",
        "First answer.",
        "fourth",
        "Fourth answer.",
        "now",
    ]
