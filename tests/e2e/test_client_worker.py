"""alicia-client against the real worker process (recorded LLM streams over real HTTP)."""

from __future__ import annotations

import json

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM, StreamSpec
from alicia.protocol import MessageType, new_id
from tests.e2e.worker import NO_LOAD_LIMIT, PROCESS_EXECUTOR, WorkerProcess, running_worker
from tests.support.client_cli import run_cli

pytestmark = pytest.mark.integration

# worker (tests/e2e/conftest.py): the default step delay, a process per room
WORKER_ENV = {**NO_LOAD_LIMIT, **PROCESS_EXECUTOR}

T = MessageType


async def test_cli_shows_the_workers_steps_tool_and_answer_then_hides_steps(
    livekit_server: LiveKitServer, worker: WorkerProcess, streams: dict[str, StreamSpec]
) -> None:
    call, followup = streams["calculator_tool_call"], streams["calculator_tool_followup"]
    other = streams["deepseek_reasoning_content"]
    code, out, err = await run_cli(
        "--room",
        new_id("conv"),
        "--say",
        call.user,
        "--say",
        "/r",
        "--say",
        other.user,
        "--exit-after",
        env=livekit_server.env(),
    )
    assert code == 0, f"{out}\n{err}\n{worker.log()}"
    first, second = out.split("reasoning hidden\n")
    lines = first.splitlines()
    steps = [ln.strip() for ln in lines if ln.strip().startswith("▸")]
    expected = [*call.steps, *followup.steps]
    assert steps == [f"▸ step {i}: {t}" for i, t in enumerate(expected, start=1)]
    i_tool = next(i for i, ln in enumerate(lines) if "⚙ tool calculator" in ln)
    i_result = next(i for i, ln in enumerate(lines) if "⚙ result" in ln)
    i_step3 = next(i for i, ln in enumerate(lines) if "▸ step 3:" in ln)
    assert i_tool < i_result < i_step3
    assert '"value":395' in lines[i_result]
    assert f"alicia > {followup.answer}" in first
    assert "▸" not in second
    assert f"alicia > {other.answer}" in second
    assert "reasoning steps hidden" not in second  # the worker stopped sending them


async def test_a_cli_token_granting_no_reasoning_gets_the_answer_and_no_steps(
    livekit_server: LiveKitServer, worker: WorkerProcess, streams: dict[str, StreamSpec]
) -> None:
    """The client asks for steps; the token it minted grants none; the server decides."""
    spec = streams["deepseek_reasoning_content"]
    code, out, err = await run_cli(
        "--room",
        new_id("conv"),
        "--grant-reasoning",
        "none",
        "--say",
        spec.user,
        "--exit-after",
        env=livekit_server.env(),
    )
    assert code == 0, f"{out}\n{err}\n{worker.log()}"
    assert "reasoning: not granted to this participant" in out
    assert "▸" not in out and spec.steps[0][:40] not in out
    assert f"alicia > {spec.answer}" in out


async def test_cli_json_envelopes_from_the_worker_follow_the_turn_order(
    livekit_server: LiveKitServer, worker: WorkerProcess, streams: dict[str, StreamSpec]
) -> None:
    spec = streams["deepseek_reasoning_content"]
    room = new_id("conv")
    code, out, err = await run_cli(
        "--room", room, "--json", "--say", spec.user, "--exit-after", env=livekit_server.env()
    )
    assert code == 0, f"{err}\n{worker.log()}"
    envs = [json.loads(line) for line in out.splitlines()]
    server = [e for e in envs if e["stanzaId"] < 0]
    assert [e["stanzaId"] for e in server] == list(range(-1, -len(server) - 1, -1))
    assert server[0]["type"] == T.CONFIGURATION
    assert server[0]["body"]["conversationId"] == room
    user = next(e for e in envs if e["type"] == T.USER_MESSAGE)
    steps = [e["body"] for e in server if e["type"] == T.REASONING_STEP]
    assert [s["content"] for s in steps] == list(spec.steps)
    assert [s["stepIndex"] for s in steps] == [1, 2, 3, 4]
    assert {s["previousId"] for s in steps} == {user["body"]["id"]}
    kinds = [e["type"] for e in server]
    start = kinds.index(T.START_ANSWER)
    assert max(i for i, k in enumerate(kinds) if k == T.REASONING_STEP) < start
    sentences = [e["body"] for e in server[start + 1 :] if e["type"] == T.ASSISTANT_SENTENCE]
    assert " ".join(s["text"].strip() for s in sentences) == spec.answer
    assert sentences[-1]["isFinal"] is True
    assert [s["sequence"] for s in sentences] == list(range(1, len(sentences) + 1))


async def test_under_explicit_dispatch_the_client_trusts_only_the_named_agent(
    livekit_server: LiveKitServer, llm: RecordedLLM, streams: dict[str, StreamSpec]
) -> None:
    """The worker registered as ``alicia-test`` is dispatched to a room by name; a client
    expecting that name finds it (livekit-server's ``lk.agent_name``), one expecting
    another name trusts no one and sends nothing."""
    from livekit import api

    from alicia.client import AgentMissingError, ClientSession

    room = new_id("conv")
    env = {**NO_LOAD_LIMIT, **PROCESS_EXECUTOR, "ALICIA_AGENT_NAME": "alicia-test"}
    async with running_worker(livekit_server, llm.base_url, env=env) as proc:
        http_url = "http" + livekit_server.url[2:]
        async with api.LiveKitAPI(
            http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk:
            await lk.agent_dispatch.create_dispatch(
                api.CreateAgentDispatchRequest(agent_name="alicia-test", room=room)
            )
        spec = streams["deepseek_reasoning_content"]
        async with (
            ClientSession(agent_name="alicia-test") as right,
            ClientSession(agent_name="someone-else") as wrong,
        ):
            await right.connect(livekit_server.url, livekit_server.token("right", room))
            await wrong.connect(livekit_server.url, livekit_server.token("wrong", room))
            try:
                assert (await right.wait_for_agent(30)).startswith("agent-")
            except AgentMissingError as exc:
                raise AssertionError(proc.log()) from exc
            await right.handshake()
            turn = await right.ask(spec.user)
            await right.wait_turn(turn, timeout=30)
            with pytest.raises(AgentMissingError):
                await wrong.wait_for_agent(1)
    assert turn.answer.split() == spec.answer.split()
    assert wrong.agent_identity is None and wrong.assembler.turns == []
