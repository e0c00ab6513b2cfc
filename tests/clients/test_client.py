"""ClientSession and the alicia-client CLI against a real livekit-server and a scripted agent."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from livekit import rtc

from alicia.client import (
    AgentMissingError,
    ClientSession,
    ConnectError,
    StepReceived,
    mint_token,
)
from alicia.harness import LiveKitServer
from alicia.harness.ports import free_port
from alicia.protocol import DATA_TOPIC, Configuration, MessageType, UserMessage, new_id
from tests.paths import ROOT
from tests.support.client_cli import run_cli
from tests.support.livekit_rooms import joined
from tests.support.scripted_agent import Script, scripted_agent

pytestmark = pytest.mark.integration


def token(server: LiveKitServer, room: str, identity: str = "alice") -> str:
    return mint_token(server.api_key, server.api_secret, room=room, identity=identity)


async def test_session_handshake_turn_and_reasoning_toggle(livekit_server: LiveKitServer) -> None:
    room = new_id("conv")
    script = Script()
    async with scripted_agent(livekit_server, room, script) as agent, ClientSession() as session:
        await session.connect(livekit_server.url, token(livekit_server, room))
        assert await session.wait_for_agent(10) == "scripted-agent"
        reply = await session.handshake()
        assert reply.features is not None and "reasoning_steps" in reply.features
        assert session.conversation_id == room
        events: list[object] = []
        session.on_event(events.append)

        turn = await session.ask("What is 6 x 7?")
        await session.wait_turn(turn, timeout=10)
        assert [s.content for s in turn.steps] == script.steps
        assert [s.step_index for s in turn.steps] == [1, 2, 3]
        assert turn.total_steps == 3
        assert turn.answer == "The answer is 42. Easy."
        assert [r.tool_name for r in turn.tool_requests] == ["calculator"]
        assert turn.tool_results[0].result == {"value": 42}
        assert session.duplicates == 1  # the replayed step 1 was dropped

        await session.set_show_reasoning(False)
        turn2 = await session.ask("And 7 x 6?")
        await session.wait_turn(turn2, timeout=10)
        assert turn2.hidden_steps == 3
        shown = [e.shown for e in events if isinstance(e, StepReceived) and e.turn is turn2]
        assert shown == [False, False, False]
        assert turn2.answer == "The answer is 42. Easy."

    first, update = agent.configurations()
    assert first.conversation_id is None and first.last_sequence_seen == 0
    assert first.features == ["streaming", "reasoning_step_display"]
    assert update == Configuration(
        conversation_id=room,
        client_version=update.client_version,
        device="cli",
        features=["streaming"],
    )
    users = [e for e in agent.received if isinstance(e.body, UserMessage)]
    assert [e.stanza_id for e in agent.received] == [1, 2, 3, 4]
    assert users[1].body.previous_id == turn.answer_id  # follows the last answer
    assert all(e.conversation_id == room for e in users)


async def test_session_trusts_only_the_agent_and_a_forger_cannot_poison_it(
    livekit_server: LiveKitServer,
) -> None:
    """Mallory (an ordinary participant) forges server envelopes before and after the
    agent joins, including stanzaId -2147483647; the session drops them all."""
    from tests.support.scripted_agent import forged_agent_packets

    room = new_id("conv")

    async def forge(mallory: rtc.Room, turn_id: str | None) -> None:
        for data in forged_agent_packets(room, turn_id or "x"):
            await mallory.local_participant.publish_data(data, reliable=True, topic=DATA_TOPIC)

    session = ClientSession()
    async with session, joined(livekit_server, room, "mallory") as mallory:
        await session.connect(livekit_server.url, token(livekit_server, room))
        await forge(mallory, None)  # before any agent is in the room
        await asyncio.sleep(0.5)
        assert session.untrusted >= 3 and session.agent_identity is None
        async with scripted_agent(livekit_server, room, Script()):
            assert await session.wait_for_agent(10) == "scripted-agent"
            reply = await session.handshake()
            assert reply.conversation_id == room  # not the forged one
            turn = await session.ask("What is 6 x 7?")
            await forge(mallory, turn.user_message_id)
            await session.wait_turn(turn, timeout=10)
    assert turn.answer == "The answer is 42. Easy."
    assert "FORGED" not in turn.answer
    assert session.untrusted >= 6
    assert all(not t.answer.startswith("FORGED") for t in session.assembler.turns)


async def test_session_reports_a_missing_agent(livekit_server: LiveKitServer) -> None:
    room = new_id("conv")
    async with ClientSession() as session:
        await session.connect(livekit_server.url, token(livekit_server, room))
        with pytest.raises(AgentMissingError, match="no agent joined"):
            await session.wait_for_agent(0.5)
        with pytest.raises(RuntimeError):
            await session.ask("too early")


async def test_session_reports_an_unreachable_server() -> None:
    session = ClientSession()
    with pytest.raises(ConnectError, match="could not join"):
        await session.connect(f"ws://127.0.0.1:{free_port()}", "x.y.z", timeout=10)
    await session.aclose()
    with pytest.raises(RuntimeError):
        await session.connect("ws://127.0.0.1:1", "x")


async def test_cli_renders_steps_tool_and_answer_then_exits(livekit_server: LiveKitServer) -> None:
    room = new_id("conv")
    async with scripted_agent(livekit_server, room):
        code, out, err = await run_cli(
            "--room", room, "--say", "What is 6 x 7?", "--exit-after", env=livekit_server.env()
        )
    assert code == 0, err
    lines = out.splitlines()
    steps = [ln for ln in lines if ln.strip().startswith("▸")]
    assert steps == [
        "  ▸ step 1 of 3: Read the question.",
        "  ▸ step 2 of 3: Recall that 6 x 7 = 42.",
        "  ▸ step 3 of 3: Answer.",
    ]
    i_tool = next(i for i, ln in enumerate(lines) if "tool calculator" in ln)
    i_answer = next(i for i, ln in enumerate(lines) if ln.startswith("alicia > "))
    assert lines.index(steps[0]) < i_tool < lines.index(steps[1]) < i_answer
    assert lines[i_answer] == "alicia > The answer is 42. Easy. "
    assert '"expression":"6*7"' in lines[i_tool]


async def test_cli_toggle_from_stdin_hides_the_next_turns_steps(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    async with scripted_agent(livekit_server, room) as agent:
        code, out, err = await run_cli(
            "--room",
            room,
            env=livekit_server.env(),
            stdin="first question\n/r\nsecond question\n",
        )
    assert code == 0, err
    first, second = out.split("reasoning hidden")
    assert first.count("▸ step") == 3
    assert second.count("▸ step") == 0
    assert "(3 reasoning steps hidden)" in second
    assert second.count("alicia > The answer is 42. Easy.") == 1
    assert [c.features for c in agent.configurations()] == [
        ["streaming", "reasoning_step_display"],
        ["streaming"],
    ]


async def test_cli_hide_reasoning_flag_then_show_again(livekit_server: LiveKitServer) -> None:
    room = new_id("conv")
    async with scripted_agent(livekit_server, room, Script(tool=False)):
        code, out, err = await run_cli(
            "--room",
            room,
            "--hide-reasoning",
            "--say",
            "one",
            "--say",
            "/reasoning on",
            "--say",
            "two",
            "--exit-after",
            env=livekit_server.env(),
        )
    assert code == 0, err
    first, second = out.split("reasoning shown\n")
    assert "▸" not in first and "(3 reasoning steps hidden)" in first
    assert second.count("▸ step") == 3


async def test_cli_json_prints_every_envelope_as_a_json_line(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    async with scripted_agent(livekit_server, room):
        code, out, err = await run_cli(
            "--room", room, "--json", "--say", "hi", "--exit-after", env=livekit_server.env()
        )
    assert code == 0, err
    envs = [json.loads(line) for line in out.splitlines()]
    types = [e["type"] for e in envs]
    assert types == [
        MessageType.CONFIGURATION,
        MessageType.CONFIGURATION,
        MessageType.USER_MESSAGE,
        MessageType.REASONING_STEP,
        MessageType.TOOL_USE_REQUEST,
        MessageType.TOOL_USE_RESULT,
        MessageType.REASONING_STEP,
        MessageType.REASONING_STEP,
        MessageType.START_ANSWER,
        MessageType.ASSISTANT_SENTENCE,
        MessageType.ASSISTANT_SENTENCE,
    ]
    assert [e["stanzaId"] for e in envs] == [1, -1, 2, *range(-2, -10, -1)]
    assert envs[2]["body"]["content"] == "hi"
    assert envs[3]["body"]["stepIndex"] == 1 and envs[3]["body"]["totalSteps"] == 3
    assert envs[-1]["body"]["isFinal"] is True
    assert "joined room" in err  # status lines go to stderr in --json mode


async def test_cli_exits_nonzero_with_a_clear_message_when_it_cannot_connect() -> None:
    code, _, err = await run_cli(
        "--url",
        f"ws://127.0.0.1:{free_port()}",
        "--api-key",
        "k",
        "--api-secret",
        "s" * 32,
        "--say",
        "hi",
        "--exit-after",
    )
    assert code == 3
    assert "could not join a room at ws://127.0.0.1:" in err


async def test_cli_never_aborts_at_exit_after_a_failed_connect() -> None:
    """A native log record in flight at interpreter exit aborted the CLI (rc 134, ~1 in 10).

    The cause is removed (records stay native), so the check is deterministic: the
    session turns capture off before connecting; and parallel runs all exit with 3.
    """
    probe = (
        "import sys\n"
        "from alicia.client.cli import main\n"
        "from alicia.agent.gate import ffi_routing\n"
        "code = main(sys.argv[1:])\n"
        "print('capture-off' if ffi_routing._logs_released else 'capture-on')\n"
        "sys.exit(code)\n"
    )
    url = f"ws://127.0.0.1:{free_port()}"
    args = ["--url", url, "--api-key", "k", "--api-secret", "s" * 32, "--say", "hi"]

    async def once() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            probe,
            *args,
            "--exit-after",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=ROOT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode()

    results = await asyncio.gather(*(once() for _ in range(4)))
    assert [code for code, _ in results] == [3, 3, 3, 3]
    assert all(out.strip().endswith("capture-off") for _, out in results)


async def test_cli_exits_nonzero_when_no_agent_comes(livekit_server: LiveKitServer) -> None:
    code, _, err = await run_cli(
        "--room",
        new_id("conv"),
        "--agent-timeout",
        "1",
        "--say",
        "hi",
        "--exit-after",
        env=livekit_server.env(),
    )
    assert code == 4
    assert "no agent joined room" in err


async def test_cli_usage_errors_without_credentials() -> None:
    env = {"LIVEKIT_API_KEY": "", "LIVEKIT_API_SECRET": ""}
    code, _, err = await run_cli("--url", "ws://127.0.0.1:1", "--say", "x", env=env)
    assert code == 2 and "no --token and no API key/secret" in err
    code, _, err = await run_cli("--say", "x", env={"LIVEKIT_URL": ""})
    assert code == 2 and "no LiveKit URL" in err
