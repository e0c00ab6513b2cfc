"""AG-UI callers that hold slots without identities or without bodies (issue 34, part 6).

The endpoint as users run it (``python -m alicia.agent.agui``), raw sockets:

* a run input that never finishes arriving gets HTTP 408 once ``ALICIA_AGUI_BODY_TIMEOUT``
  has passed, and at most ``ALICIA_AGUI_MAX_UPLOADS`` inputs are received at once (503),
  a quarter of them from one caller or one address (429);
* one client address holds at most ``ALICIA_AGUI_MAX_PER_ADDRESS`` streams whatever
  identities its tokens name (a token route that mints one per session); behind a proxy
  listed in ``ALICIA_AGUI_TRUSTED_PROXIES`` the address is the ``X-Forwarded-For`` one.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import new_id
from tests.agui.test_agui_limits import (
    STREAM,
    closing_all,
    connect,
    request_head,
    statuses,
    types,
    user,
)
from tests.support.agui_endpoint import agui_token, post_run, run_input, running_agui

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LLM_STREAMS = "shared"


def slow_upload(url: str, token: str, body: dict[str, Any], forwarded: str = "") -> Any:
    """A run whose body stops arriving halfway (the socket, unread); ``forwarded``: the
    ``X-Forwarded-For`` header's value (none if empty)."""
    data = json.dumps(body).encode()
    sock = connect(url)
    extra = f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    extra += f"X-Forwarded-For: {forwarded}\r\n" if forwarded else ""
    sock.sendall(request_head(url, "POST", "/agui", token, extra) + data[: len(data) // 2])
    return sock


def answer_text(sock: Any) -> str:
    sock.settimeout(5)
    return bytes(sock.recv(4096)).decode(errors="replace")


async def test_a_body_that_never_arrives_gets_408_and_uploads_are_bounded(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    env = {
        "ALICIA_AGUI_BODY_TIMEOUT": "1.5",
        "ALICIA_AGUI_MAX_UPLOADS": "3",
        "ALICIA_AGUI_TRUSTED_PROXIES": "127.0.0.1",  # four clients behind a proxy
    }
    async with running_agui(livekit_server, llm.base_url, env=env) as agui:
        socks = []
        for i in range(4):
            thread = new_id("conv")
            token = agui_token(livekit_server, thread, f"uploader-{i}", "full")
            body = run_input(thread, [user("hello")])
            socks.append(slow_upload(agui.url, token, body, f"198.51.100.{i + 1}"))
            await asyncio.sleep(0.2)  # in order: the fourth finds three arriving
        started = time.monotonic()
        with closing_all(socks):
            codes = await statuses(socks, within=15)
            took = time.monotonic() - started
            texts = [answer_text(s) for s in socks]
        assert codes == [408, 408, 408, 503], (codes, texts)
        assert "did not arrive within 1.5 s" in texts[0], texts[0]
        assert "too many run inputs" in texts[3], texts[3]
        assert took < 10, took
        # The slots and the upload places came back: a run goes through.
        thread = new_id("conv")
        token = agui_token(livekit_server, thread, "after", "full")
        spec = llm.spec(STREAM)
        status, events, text = await post_run(agui.url, token, run_input(thread, [user(spec.user)]))
        assert status == 200 and types(events)[-1] == "RUN_FINISHED", text


async def test_one_address_holds_a_bounded_share_whatever_identities_it_mints(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    env = {"ALICIA_AGUI_MAX_PER_ADDRESS": "3", "ALICIA_AGUI_TRUSTED_PROXIES": "127.0.0.1"}
    async with running_agui(livekit_server, llm.base_url, env=env) as agui:
        room = new_id("conv")  # no agent: each room stream holds its slot
        path = f"/agui/rooms/{room}/events"

        def stream(i: int, forwarded: str | None) -> Any:
            token = agui_token(livekit_server, room, f"session-{new_id('s')}", "full")
            extra = f"X-Forwarded-For: {forwarded}\r\n" if forwarded else ""
            sock = connect(agui.url)
            sock.sendall(request_head(agui.url, "GET", path, token, extra))
            return sock

        # Five identities from one address (the proxy itself: no X-Forwarded-For).
        socks = [stream(i, None) for i in range(5)]
        with closing_all(socks):
            codes = await statuses(socks)
            texts = [answer_text(s) for s, c in zip(socks, codes, strict=True) if c == 429]
        assert sorted(codes) == [200, 200, 200, 429, 429], codes
        assert all("ALICIA_AGUI_MAX_PER_ADDRESS" in t for t in texts), texts
        await asyncio.sleep(1.0)  # hung up: the slots come back
        # Through the proxy, five clients of five addresses: each its own share.
        socks = [stream(i, f"198.51.100.{i + 1}, 127.0.0.1") for i in range(5)]
        with closing_all(socks):
            assert await statuses(socks) == [200] * 5


async def test_one_caller_or_one_address_receives_a_bounded_share_of_the_uploads(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """With 8 upload places (the default), one caller receives at most 2 run inputs at
    once, whatever addresses it sends from, and one address at most 2, whatever identities
    its tokens name (HTTP 429 for the third); meanwhile another client's run goes through."""
    env = {"ALICIA_AGUI_BODY_TIMEOUT": "2", "ALICIA_AGUI_TRUSTED_PROXIES": "127.0.0.1"}
    async with running_agui(livekit_server, llm.base_url, env=env) as agui:
        for case in ("one caller", "one address"):
            socks = []
            for i in range(3):
                thread = new_id("conv")
                who = "uploader" if case == "one caller" else f"uploader-{i}"
                token = agui_token(livekit_server, thread, who, "full")
                address = f"198.51.100.{i + 1}" if case == "one caller" else "198.51.100.9"
                body = run_input(thread, [user("hello")])
                socks.append(slow_upload(agui.url, token, body, address))
                await asyncio.sleep(0.2)  # in order: the third finds two arriving
            with closing_all(socks):
                thread = new_id("conv")
                token = agui_token(livekit_server, thread, "someone-else", "full")
                spec = llm.spec(STREAM)
                status, events, text = await post_run(
                    agui.url, token, run_input(thread, [user(spec.user)])
                )
                codes = await statuses(socks, within=15)
                texts = [answer_text(s) for s in socks]
            assert status == 200 and types(events)[-1] == "RUN_FINISHED", text
            assert codes == [408, 408, 429], (case, codes, texts)
            assert "more than 2 run inputs of this caller or address" in texts[2], texts[2]


async def test_without_a_trusted_proxy_a_forwarded_header_names_no_address(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """With no proxy configured (the default), ``X-Forwarded-For`` is not believed, not even
    from loopback (uvicorn's own ``proxy_headers`` trusts it from 127.0.0.1, so a local
    proxy that passes the client's header on made every stream another address): five
    streams from one address, each claiming another, hold that address's three places."""
    env = {"ALICIA_AGUI_MAX_PER_ADDRESS": "3"}
    async with running_agui(livekit_server, llm.base_url, env=env) as agui:
        room = new_id("conv")
        path = f"/agui/rooms/{room}/events"
        socks = []
        for i in range(5):
            token = agui_token(livekit_server, room, f"session-{new_id('s')}", "full")
            sock = connect(agui.url)
            extra = f"X-Forwarded-For: 198.51.100.{i + 1}\r\n"
            sock.sendall(request_head(agui.url, "GET", path, token, extra))
            socks.append(sock)
        with closing_all(socks):
            codes = await statuses(socks)
        assert sorted(codes) == [200, 200, 200, 429, 429], codes
