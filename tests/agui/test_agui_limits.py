"""AG-UI limits per caller (issue 25, part 7), with the faults made for real: the endpoint
as users run it (``python -m alicia.agent.agui``), raw sockets that send a request and
never read, bodies larger than the limit still being sent, the recorded LLM streaming
reasoning without end.

* 64 idle connections from one token take 4 slots (``ALICIA_AGUI_MAX_PER_CALLER``), the
  rest get 429; another caller's run completes meanwhile; the idle streams are cut once
  their buffers are full (bounded: about ``UNSENT_LIMIT`` each) and the write deadline
  has passed, and their slots come back.
* Room streams count from the moment they are accepted, together with runs.
* A body over the limit gets 413 while the client is still sending it.
* A run that outlasts ``ALICIA_AGUI_RUN_TIMEOUT`` ends with ``RUN_ERROR`` (``run_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from alicia.agent.agui.sse import UNSENT_LIMIT
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import new_id
from tests.support.agui_endpoint import AguiProcess, agui_token, post_run, run_input, running_agui

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
LLM_OPTIONS = {"endless_delay": 0.001}  # endless: about 100 kB/s of events

PER_CALLER = 4
LIMITS = {"ALICIA_AGUI_MAX_PER_CALLER": str(PER_CALLER), "ALICIA_AGUI_WRITE_TIMEOUT": "2"}
STREAM = "deepseek_reasoning_content"
AGUI_ENV = LIMITS  # agui (tests/agui/conftest.py)


def user(text: str) -> dict[str, Any]:
    return {"id": new_id("msg"), "role": "user", "content": text}


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def connect(url: str) -> socket.socket:
    """A socket to the endpoint whose receive buffer is tiny: a reader that never reads."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    return sock


def request_head(url: str, method: str, path: str, token: str, extra: str = "") -> bytes:
    host = urlsplit(url).netloc
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Accept: text/event-stream\r\n{extra}\r\n"
    ).encode()


def send_request(url: str, method: str, path: str, token: str, body: Any = None) -> socket.socket:
    """Send one request on a new socket and return it, unread."""
    sock = connect(url)
    data = b"" if body is None else json.dumps(body).encode()
    extra = f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n" if data else ""
    sock.sendall(request_head(url, method, path, token, extra) + data)
    return sock


async def statuses(socks: list[socket.socket], within: float = 20.0) -> list[int]:
    """Each socket's HTTP status, peeked (nothing is consumed: the readers stay idle)."""
    found: dict[int, int] = {}
    async with asyncio.timeout(within):
        while len(found) < len(socks):
            for i, sock in enumerate(socks):
                if i in found:
                    continue
                with contextlib.suppress(BlockingIOError):
                    head = sock.recv(12, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                    if len(head) == 12:
                        found[i] = int(head[9:12])
            await asyncio.sleep(0.05)
    return [found[i] for i in range(len(socks))]


def drained(sock: socket.socket, within: float) -> int | None:
    """Read ``sock`` until the server closes it (the bytes read) or ``within`` seconds
    pass (None)."""
    deadline = time.monotonic() + within
    sock.settimeout(0.5)
    read = 0
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:  # reset: the server aborted the connection
            return read
        if not data:
            return read
        read += len(data)
    return None


@contextlib.contextmanager
def closing_all(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


async def test_64_idle_connections_of_one_token_leave_the_endpoint_to_others(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    hog_thread, thread = new_id("conv"), new_id("conv")
    hog = agui_token(livekit_server, hog_thread, "hog", "full")
    other = agui_token(livekit_server, thread, "someone-else", "full")
    spec = llm.spec(STREAM)
    socks = [
        send_request(agui.url, "POST", "/agui", hog, run_input(hog_thread, [user("endless")]))
        for _ in range(64)
    ]
    with closing_all(socks):
        await asyncio.sleep(1.0)  # the accepted ones stream into buffers nobody reads
        status, events, text = await post_run(agui.url, other, run_input(thread, [user(spec.user)]))
        assert status == 200, f"{text}\n{agui.log()}"
        assert types(events)[-1] == "RUN_FINISHED"
        assert "".join(
            e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"
        ).strip() == (spec.answer)
        codes = await statuses(socks)
        assert sorted(codes) == [200] * PER_CALLER + [429] * (64 - PER_CALLER)
        # The idle streams are cut (buffers full, then the write deadline) and their
        # slots come back: the same token runs again.
        started = time.monotonic()
        while True:
            status, events, text = await post_run(
                agui.url, hog, run_input(hog_thread, [user(spec.user)])
            )
            if status != 429 or time.monotonic() - started > 60:
                break
            await asyncio.sleep(0.5)
        assert status == 200, f"{text}\n{agui.log()}"
        assert types(events)[-1] == "RUN_FINISHED"
        idle = [sock for sock, code in zip(socks, codes, strict=True) if code == 200]
        held = await asyncio.gather(*(asyncio.to_thread(drained, s, 10) for s in idle))
        # What the server had buffered for each: about its kernel's unsent limit (the
        # socket's own send buffer grew to 2.7 MB each before it, filled at the endless
        # stream's pace: 40 s here idle, past the 60 s above on a loaded machine).
        assert all(n is not None and n < 4 * UNSENT_LIMIT for n in held), held
    assert agui.log(tail=10**8).count("the caller stopped reading") == PER_CALLER
    assert "Traceback" not in agui.log()


async def test_room_streams_count_against_the_caller_from_the_moment_they_are_accepted(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    """Six room streams at once (a room with no agent: none has joined LiveKit yet or got
    past waiting for it) and a run, all from one caller: four streams, then 429."""
    room = new_id("conv")
    token = agui_token(livekit_server, room, "dashboard", "full")
    path = f"/agui/rooms/{room}/events"
    socks = [send_request(agui.url, "GET", path, token) for _ in range(PER_CALLER + 2)]
    with closing_all(socks):
        codes = await statuses(socks)
        assert sorted(codes) == [200] * PER_CALLER + [429, 429]
        status, _, text = await post_run(agui.url, token, run_input(room, [user("hello")]))
        assert status == 429 and "ALICIA_AGUI_MAX_PER_CALLER" in text, text
    # Hung up: the slots come back.
    spec = llm.spec(STREAM)
    async with asyncio.timeout(20):
        while True:
            status, events, _ = await post_run(agui.url, token, run_input(room, [user(spec.user)]))
            if status != 429:
                break
            await asyncio.sleep(0.2)
    assert status == 200 and types(events)[-1] == "RUN_FINISHED"


def _send_until_answered(url: str, token: str, chunked: bool, total: int) -> tuple[int, bytes]:
    """Send a ``total``-byte body in 64 KiB pieces until the server answers; (bytes sent,
    the answer's first bytes)."""
    sock = connect(url)
    framing = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {total}\r\n"
    head = request_head(url, "POST", "/agui", token, f"Content-Type: application/json\r\n{framing}")
    piece = b"[" + b" " * (65536 - 1)
    sent = 0
    try:
        sock.sendall(head)
        while sent < total:
            readable, writable, _ = select.select([sock], [sock], [], 10)
            if readable:
                break
            if not writable:
                raise AssertionError(f"neither an answer nor room to send after {sent} bytes")
            data = (b"%x\r\n%s\r\n" % (len(piece), piece)) if chunked else piece
            try:
                sock.sendall(data)
            except OSError:  # the server answered and closed: read what it said
                break
            sent += len(piece)
        sock.settimeout(10)
        return sent, sock.recv(4096)
    finally:
        sock.close()


async def test_a_body_over_the_limit_gets_413_while_it_is_still_being_sent(
    agui: AguiProcess, livekit_server: LiveKitServer
) -> None:
    total = 64 * 1024 * 1024  # the limit is 4 MiB
    for chunked in (False, True):
        token = agui_token(livekit_server, new_id("conv"), f"uploader-{chunked}", "full")
        sent, answer = await asyncio.to_thread(
            _send_until_answered, agui.url, token, chunked, total
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert sent < 16 * 1024 * 1024, f"the server read {sent} bytes before answering"


async def test_a_run_past_its_deadline_ends_with_run_error(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    env = {"ALICIA_AGUI_RUN_TIMEOUT": "1.5"}
    async with running_agui(livekit_server, llm.base_url, env=env) as agui:
        thread = new_id("conv")
        token = agui_token(livekit_server, thread, "patient", "full")
        before = llm.disconnects
        started = time.monotonic()
        status, events, text = await post_run(
            agui.url, token, run_input(thread, [user("endless")]), timeout=30
        )
        took = time.monotonic() - started
        assert status == 200, text
        kinds = types(events)
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_ERROR", kinds[-5:]
        assert "RUN_FINISHED" not in kinds
        assert (
            events[-1]["code"] == "run_timeout"
            and "ALICIA_AGUI_RUN_TIMEOUT" in events[-1]["message"]
        )
        assert "REASONING_MESSAGE_CONTENT" in kinds
        assert took < 10, took
        # The model's stream was abandoned: the LLM server sees it at its next write.
        async with asyncio.timeout(5):
            while llm.disconnects <= before:
                await asyncio.sleep(0.05)
        assert "Traceback" not in agui.log()
