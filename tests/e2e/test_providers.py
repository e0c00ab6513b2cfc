"""Every recorded provider shape, end to end: the real worker, livekit-server, the openai
client, and the recorded server enforcing each provider's request rules.

One worker per provider profile (``LLM_PROVIDER``, ``LLM_API``), dispatched by name.
For each shape a client granted full reasoning (the CLI's ``ClientSession``) asks the
recorded question. It must get the recorded reasoning as steps (whitespace-normalised),
an answer with no reasoning and no marker text, and for the tool-call shapes a second
turn with tool rounds that completes too, with no request refused by the provider rule.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from livekit import api

from alicia.agent.llm.reasoning import CLOSE_MARKERS, DROP_MARKERS, OPEN_MARKERS
from alicia.client import ClientSession
from alicia.client.assembly import Turn
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM, StreamSpec, load_manifest
from alicia.protocol import new_id
from tests.e2e.worker import WorkerProcess, running_worker

pytestmark = pytest.mark.integration

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only

MANIFEST = load_manifest()
MARKERS = (*OPEN_MARKERS, *CLOSE_MARKERS, *DROP_MARKERS, "<think", "</think")


@dataclass(frozen=True)
class Group:
    """One worker configuration."""

    provider: str
    api: str = "chat"
    model: str = "recorded-model"
    thinking_open: bool = False

    @property
    def agent(self) -> str:
        return f"alicia-{self.provider}-{self.api}" + ("-open" if self.thinking_open else "")


GENERIC = Group("generic")
GROUPS: dict[str, Group] = {
    # Shapes that need nothing back: any profile reads them; the generic one does.
    **{
        name: GENERIC
        for name, spec in MANIFEST.items()
        if spec.api == "chat"
        and not spec.tool_calls
        and not spec.open_at_start
        and not any(s.followup == name for s in MANIFEST.values())
    },
    "qwen3_thinking_2507_close_only": Group("vllm", thinking_open=True),
    "deepseek_r1_distill_no_open": Group("vllm", thinking_open=True),
    "deepseek_reasoning_content": Group("deepseek-reasoner", model="deepseek-reasoner"),
    "deepseek_v4_tool_call": Group("deepseek", model="deepseek-v4-flash"),
    "openrouter_claude_tool_call": Group("openrouter", model="anthropic/claude-sonnet-4.5"),
    "gemini_tool_call": Group("gemini", model="gemini-2.5-flash"),
    "vllm_tool_call": GENERIC,
    "responses_summary_tool_call": Group("openai", "responses", model="gpt-5-mini"),
    "responses_raw_reasoning": Group("vllm", "responses", model="openai/gpt-oss-120b"),
}
TWO_TURNS = {name for name in GROUPS if MANIFEST[name].tool_calls} | {"deepseek_reasoning_content"}


def test_every_recorded_first_stream_has_a_scenario() -> None:
    firsts = {n for n in MANIFEST if not any(s.followup == n for s in MANIFEST.values())}
    assert firsts == set(GROUPS)


def _env(group: Group) -> dict[str, str]:
    return {
        "ALICIA_AGENT_NAME": group.agent,
        "LLM_PROVIDER": group.provider,
        "LLM_API": group.api,
        "ALICIA_LLM_THINKING_OPEN": "true" if group.thinking_open else "false",
        "ALICIA_STEP_MAX_DELAY": "10",  # steps end at paragraphs, not by time
        "ALICIA_LOAD_THRESHOLD": "inf",
        "ALICIA_JOB_EXECUTOR": "thread",  # seven workers side by side: no process pools
    }


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def workers(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> AsyncIterator[dict[Group, WorkerProcess]]:
    """One worker per group, started (and stopped) side by side."""
    groups = sorted(set(GROUPS.values()), key=lambda g: g.agent)
    managers = [running_worker(livekit_server, llm.base_url, env=_env(g)) for g in groups]
    started = await asyncio.gather(*(m.__aenter__() for m in managers), return_exceptions=True)
    try:
        failed = [r for r in started if isinstance(r, BaseException)]
        if failed:
            raise failed[0]
        yield {g: w for g, w in zip(groups, started, strict=True) if isinstance(w, WorkerProcess)}
    finally:
        await asyncio.gather(
            *(
                m.__aexit__(None, None, None)
                for m, r in zip(managers, started, strict=True)
                if not isinstance(r, BaseException)
            ),
            return_exceptions=True,
        )


class Sessions:
    """One room (and client session) per group, dispatched to that group's worker."""

    def __init__(self, server: LiveKitServer) -> None:
        self._server = server
        self._stack = contextlib.AsyncExitStack()
        self._open: dict[Group, ClientSession] = {}

    async def get(self, group: Group) -> ClientSession:
        if group in self._open:
            return self._open[group]
        server = self._server
        room = new_id("conv")
        async with api.LiveKitAPI("http" + server.url[2:], server.api_key, server.api_secret) as lk:
            await lk.agent_dispatch.create_dispatch(
                api.CreateAgentDispatchRequest(agent_name=group.agent, room=room)
            )
        session = await self._stack.enter_async_context(ClientSession(agent_name=group.agent))
        await session.connect(server.url, server.token("alice", room))
        await session.wait_for_agent(30)
        await session.handshake()
        self._open[group] = session
        return session

    async def aclose(self) -> None:
        await self._stack.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sessions(
    livekit_server: LiveKitServer, workers: dict[Group, WorkerProcess]
) -> AsyncIterator[Sessions]:
    pool = Sessions(livekit_server)
    try:
        yield pool
    finally:
        await pool.aclose()


def normalised(text: str) -> str:
    return " ".join(text.split())


def check_turn(turn: Turn, specs: list[StreamSpec]) -> None:
    """``turn`` got the recorded reasoning of ``specs`` (a stream and its follow-up) as
    steps and the last one's answer, with no reasoning or marker in the answer."""
    assert turn.error is None, turn.error
    steps = [s.content for s in turn.steps]
    assert steps == [step for spec in specs for step in spec.steps]
    visible = " ".join(spec.reasoning or " ".join(spec.summaries) for spec in specs)
    assert normalised(" ".join(steps)) == normalised(visible)
    answer = turn.answer
    assert normalised(answer) == normalised(specs[-1].answer)
    for step in steps:
        assert step not in answer
    for marker in MARKERS:
        assert marker not in answer
    if specs[0].tool_calls:
        assert [r.tool_name for r in turn.tool_requests] == [c["name"] for c in specs[0].tool_calls]
        assert len(turn.tool_results) == len(turn.tool_requests)


def _by_worker(name: str) -> tuple[str, str]:
    return GROUPS[name].agent, name


SCENARIOS: list[str] = sorted(GROUPS, key=_by_worker)


@pytest.mark.parametrize("name", SCENARIOS)
async def test_shape_end_to_end(
    livekit_server: LiveKitServer,
    llm: RecordedLLM,
    workers: dict[Group, WorkerProcess],
    sessions: Sessions,
    name: str,
) -> None:
    group = GROUPS[name]
    worker = workers[group]
    spec = MANIFEST[name]
    specs = [spec] + ([MANIFEST[spec.followup]] if spec.followup else [])
    llm.reset()
    try:
        session = await sessions.get(group)
        for _ in range(2 if name in TWO_TURNS else 1):
            llm.script(name)
            turn = await session.wait_turn(await session.ask(spec.user), timeout=60)
            check_turn(turn, specs)
    except BaseException as exc:
        raise AssertionError(f"{exc!r}\n--- worker log ---\n{worker.log()}") from exc
    assert list(llm.rejections) == []
    # The worker logged the profile it serves with, and how it was chosen.
    log = worker.log(tail=10_000_000)
    assert f'"provider": "{group.provider}", "chosen_by": "LLM_PROVIDER"' in log
    if name in TWO_TURNS:
        # The second turn's first request holds the first turn as user + answer only.
        # The Responses API also carries the first turn's reasoning items (encrypted).
        firsts = [r for r in llm.requests if _last_is_user(r)]
        assert len(firsts) == 2
        roles = _roles(firsts[1])
        assert [r for r in roles if r != "reasoning"][-3:] == ["user", "assistant", "user"]
        assert ("reasoning" in roles) == (group.api == "responses")


def _last_is_user(body: dict[str, object]) -> bool:
    roles = _roles(body)
    return bool(roles) and roles[-1] == "user"


def _roles(body: dict[str, object]) -> list[str]:
    items = body.get("messages") or body.get("input") or []
    assert isinstance(items, list)
    return [str(i.get("role") or i.get("type")) for i in items if isinstance(i, dict)]
