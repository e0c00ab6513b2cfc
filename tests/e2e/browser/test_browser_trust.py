"""The web debug page follows the agent, and only the agent, in Debian's chromium over a
real livekit-server (``takeover.mjs``, in this folder, drives the page).

The agent answers the page's first question; an ordinary participant joins under the
agent's identity (livekit-server removes the real agent) and forges envelopes and
answers; the page shows none of it, says it waits for another agent, and when a new
agent joins it resumes with it (lastSequenceSeen = the last server stanza), shows a
notice and answers the next question. Under explicit dispatch (``?agent=NAME``), agents
joining while the page's agent is there change nothing; when it leaves, the one of the
same name takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from alicia.harness import LiveKitServer
from alicia.protocol import Configuration, UserMessage, new_id
from tests.e2e.browser.helpers import BROWSER, CHROMIUM, node_binary, page_url
from tests.e2e.web_app import serving_web
from tests.paths import ARTIFACTS, ROOT
from tests.support.scripted_agent import scripted_agent
from tests.support.trust import ANSWER, FORGED, forging, from_clients, last_stanza, questions_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
SCRIPT = BROWSER / "takeover.mjs"


async def start_driver(
    url: str, screenshot: Path, *, expect_waiting: bool = True, wait_agents: int | None = None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        node_binary(),
        str(SCRIPT),
        cwd=ROOT,
        env={
            **os.environ,
            "PAGE_URL": url,
            "SCREENSHOT": str(screenshot),
            "CHROMIUM": CHROMIUM,
            "TIMEOUT_MS": "60000",
            "EXPECT_WAITING": "1" if expect_waiting else "0",
            **({"WAIT_AGENTS": str(wait_agents)} if wait_agents else {}),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def report_of(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    lines = out.decode().strip().splitlines()
    report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    assert proc.returncode == 0, f"takeover.mjs failed: {report}\n{err.decode()[-3000:]}"
    return report


async def test_the_page_shows_nothing_from_an_impostor_and_follows_the_new_agent(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    shot = ARTIFACTS / "browser-takeover.png"
    async with (
        serving_web(livekit_server) as base,
        scripted_agent(livekit_server, room, identity="agent-aaa") as a,
    ):
        driver = await start_driver(page_url(base, room), shot)
        try:
            await said(driver, "FIRST", 90)  # shown whole by the page, not only sent
            seen = last_stanza(a)
            turn_ids = [u.id for u in from_clients(a, UserMessage)]
            async with (
                scripted_agent(
                    livekit_server, room, FORGED, identity="agent-aaa", kind="standard"
                ) as mallory,
                forging(mallory, turn_ids),
            ):
                await asyncio.sleep(2.0)  # the page waits, forgeries keep coming
                async with scripted_agent(
                    livekit_server, room, identity="agent-bbb", after=seen
                ) as b:
                    report = await report_of(driver)
        finally:
            if driver.returncode is None:
                driver.kill()
                await driver.wait()
    assert report["firstAgent"] == "agent-aaa" and report["agent"] == "agent-bbb"
    assert report["first"]["answer"] == ANSWER and report["second"]["answer"] == ANSWER
    assert report["second"]["state"] == "done" and report["state"] == "ready"
    assert report["notices"] == [
        "the agent left (agent-aaa); waiting up to 30 s for another agent…",
        f"the agent was replaced (agent-bbb); resumed after server message {seen}",
    ]
    assert "waiting up to 30 s for another agent" in report["waitingStatus"]
    assert "the agent was replaced (agent-bbb)" in report["resumedStatus"]
    assert report["untrusted"] > 10
    assert "FORGED" not in json.dumps(report)
    assert from_clients(mallory) == []  # nothing went to the impostor
    resume = from_clients(b, Configuration)[0]
    assert (resume.conversation_id, resume.last_sequence_seen, resume.device) == (
        room,
        seen,
        "web",
    )
    assert [u.content for u in questions_to(b)] == ["And 7 x 6?"]
    assert shot.stat().st_size > 10_000


async def test_another_agent_that_does_not_speak_the_protocol_never_becomes_the_page_s_agent(
    livekit_server: LiveKitServer,
) -> None:
    """An avatar (kind AGENT, no ``alicia.protocol`` attribute) in the room forges
    envelopes; ours leaves: the page waits instead of adopting the avatar, then follows
    the next agent that announces the protocol (issue 34, part 7)."""
    room = new_id("conv")
    shot = ARTIFACTS / "browser-takeover-avatar.png"
    async with contextlib.AsyncExitStack() as stack:
        base = await stack.enter_async_context(serving_web(livekit_server))
        ours = contextlib.AsyncExitStack()
        a = await ours.enter_async_context(
            scripted_agent(livekit_server, room, identity="agent-aaa")
        )
        driver = await start_driver(page_url(base, room), shot)
        try:
            await said(driver, "FIRST", 90)  # shown whole by the page, not only sent
            seen = last_stanza(a)
            turn_ids = [u.id for u in from_clients(a, UserMessage)]
            avatar = await stack.enter_async_context(
                scripted_agent(
                    livekit_server, room, FORGED, identity="avatar-1", speaks_protocol=False
                )
            )
            await stack.enter_async_context(forging(avatar, turn_ids))
            await asyncio.sleep(2.0)  # forgeries while ours is here
            await ours.aclose()  # ours leaves; the avatar stays and forges on
            await asyncio.sleep(3.0)
            async with scripted_agent(livekit_server, room, identity="agent-bbb", after=seen):
                report = await report_of(driver)
        finally:
            await ours.aclose()
            if driver.returncode is None:
                driver.kill()
                await driver.wait()
    assert report["firstAgent"] == "agent-aaa" and report["agent"] == "agent-bbb"
    assert report["second"]["answer"] == ANSWER and report["second"]["state"] == "done"
    assert report["notices"] == [
        "the agent left (agent-aaa); waiting up to 30 s for another agent…",
        f"the agent was replaced (agent-bbb); resumed after server message {seen}",
    ]
    assert report["untrusted"] > 10
    assert "FORGED" not in json.dumps(report)
    assert from_clients(avatar) == []  # the page never sent the avatar anything


async def test_under_explicit_dispatch_the_page_moves_to_the_agent_of_its_name(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    shot = ARTIFACTS / "browser-takeover-named.png"
    async with contextlib.AsyncExitStack() as stack:
        base = await stack.enter_async_context(serving_web(livekit_server))
        async with scripted_agent(
            livekit_server, room, identity="agent-a", agent_name="alicia-x"
        ) as a:
            driver = await start_driver(
                page_url(base, room) + "&agent=alicia-x",
                shot,
                expect_waiting=False,
                wait_agents=2,  # A and B (not the agent of another name)
            )
            stack.push_async_callback(_reap, driver)
            await said(driver, "FIRST", 90)  # shown whole by the page, not only sent
            seen = last_stanza(a)
            other = await stack.enter_async_context(
                scripted_agent(
                    livekit_server, room, FORGED, identity="agent-other", agent_name="other"
                )
            )
            b = await stack.enter_async_context(
                scripted_agent(
                    livekit_server, room, identity="agent-b", agent_name="alicia-x", after=seen
                )
            )
            await said(driver, "SWAP", 90)  # the page sees A and B and stays with A
            await asyncio.sleep(0.5)
            assert from_clients(b) == [] and from_clients(other) == []
        report = await report_of(driver)  # A left: B takes over
    assert report["firstAgent"] == "agent-a" and report["agent"] == "agent-b"
    assert report["first"]["answer"] == ANSWER and report["second"]["answer"] == ANSWER
    assert report["notices"] == [
        f"the agent was replaced (agent-b); resumed after server message {seen}"
    ]
    assert from_clients(other) == []
    assert from_clients(b, Configuration)[0].last_sequence_seen == seen
    assert "FORGED" not in json.dumps(report)


async def said(proc: asyncio.subprocess.Process, line: str, timeout: float) -> None:
    """Read the driver's output until it prints ``line``."""
    assert proc.stdout is not None
    async with asyncio.timeout(timeout):
        while (got := await proc.stdout.readline()) and got.decode().strip() != line:
            pass
    assert got, f"the driver ended before printing {line!r}"


async def _reap(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
