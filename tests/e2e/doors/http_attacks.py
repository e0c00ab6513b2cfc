"""Attackers for the HTTP doors: raw requests from loopback addresses of their own.

Each request is written by hand on a socket (``asyncio.open_connection``), so a body can
be slow, cut short or larger than it says, and a client can come from ``127.0.0.N`` (any
loopback address is this machine). The status line is the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from livekit import api

from alicia.agent.engine.rights import Right
from alicia.agent.gate.doors import Door
from alicia.harness import LiveKitServer
from tests.e2e.doors.matrix import Attack

__all__ = ["HttpSide", "Reply"]

_BLOCK: contextvars.ContextVar[int] = contextvars.ContextVar("block", default=0)
"""The attack's own block of loopback addresses (``127.1.<block>.*``): the per-address
limits of one attack are not another's."""
_HELD: contextvars.ContextVar[list[Held]] = contextvars.ContextVar("held")
"""The connections one attack opened (closed after it)."""


@dataclass
class Reply:
    """A status (0: none came) and the start of the body."""

    status: int
    body: bytes = b""


@dataclass
class Held:
    """An open request whose answer is awaited (a stream, or a body not yet sent)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def status(self, within: float) -> int:
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(within):
                line = await self.reader.readline()
                return int(line.split()[1]) if line.startswith(b"HTTP/") else 0
        return 0

    async def trickle(self, data: bytes, answer: asyncio.Future[int]) -> None:
        """Send ``data`` a byte every 0.5 s until ``answer`` (being read meanwhile) came. A
        write after the server answered and closed resets the connection, and an answer
        not read by then can be lost (HTTP 0 in a loaded suite): so it is read as it
        arrives, and nothing more is written once it has."""
        with contextlib.suppress(ConnectionError):
            for byte in data:
                if answer.done() or self.reader.at_eof():
                    return
                self.writer.write(bytes([byte]))
                await self.writer.drain()
                await asyncio.wait({answer}, timeout=0.5)

    async def flood(self, size: int) -> int:
        """Send ``size`` bytes of body while reading the answer (one may come, and the
        connection close, before the body is through); its status."""
        answer = asyncio.ensure_future(self.status(15.0))

        async def send() -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(size // 65536 + 1):
                    if answer.done():
                        return
                    self.writer.write(b" " * 65536)
                    await self.writer.drain()

        await send()
        return await answer

    def close(self) -> None:
        self.writer.close()


def listening_on(port: int) -> set[str]:
    """The addresses a TCP socket listens on at ``port``, whatever process holds it."""
    import psutil

    return {
        c.laddr.ip
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


@dataclass
class HttpSide:
    """The HTTP servers under attack: base URL per server name, and who may call."""

    server: LiveKitServer
    bases: dict[str, str]
    """Server name (``Server.X.name``) -> ``http://127.0.0.1:port``."""
    by_door: dict[str, str] = field(default_factory=dict)
    """Door name -> base URL, where a door is on another port of its server."""
    room: str = "doors-http"
    counter: int = 0

    def token(self, identity: str, *, secret: str | None = None, ttl_s: int = 600) -> str:
        """A caller's token for :attr:`room` (signed with ``secret``: one's own)."""
        grants = api.VideoGrants(room_join=True, room=self.room)
        tok = (
            api.AccessToken(self.server.api_key, secret or self.server.api_secret)
            .with_identity(identity)
            .with_attributes({"alicia.reasoning": "full"})
            .with_grants(grants)
        )
        if ttl_s < 0:  # expired: issued and expired in the past
            now = int(time.time())
            jwt = tok.with_ttl(datetime.timedelta(seconds=1)).to_jwt()
            return _expired(jwt, self.server.api_secret, now)
        return tok.to_jwt()

    def name(self) -> str:
        self.counter += 1
        return f"h{self.counter}"

    def target(self, door: Door) -> tuple[str, int, str, str]:
        """(host, port, method, path) of ``door``."""
        method, _, path = door.at.partition(" ")
        path = path.replace("{room}", self.room).replace("/*", "/style.css")
        url = urlsplit(self.by_door.get(door.name) or self.bases[door.served_by.name])
        return url.hostname or "127.0.0.1", url.port or 80, method, path

    async def open(
        self,
        door: Door,
        *,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        length: int | None = None,
        source: int = 1,
    ) -> Held:
        """Send the request line, headers and ``body`` (announcing ``length`` bytes), from
        the attack's address number ``source``."""
        host, port, method, path = self.target(door)
        address = f"127.1.{_BLOCK.get()}.{source}"
        reader, writer = await asyncio.open_connection(host, port, local_addr=(address, 0))
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
        size = len(body) if length is None else length
        if method == "POST":
            lines.append(f"Content-Length: {size}")
            lines.append("Content-Type: application/json")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        held = Held(reader, writer)
        _HELD.get().append(held)
        return held

    async def ask(self, door: Door, within: float = 15.0, **how: Any) -> int:
        """One request; its status (0 if none within ``within``)."""
        held = await self.open(door, **how)
        try:
            return await held.status(within)
        finally:
            held.close()

    def bearer(self, identity: str, **how: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(identity, **how)}"}

    # -- the attacks ------------------------------------------------------------------------

    async def attack(self, door: Door, attack: Attack) -> tuple[bool, str]:
        """Make ``attack`` on ``door`` from addresses of its own; ``(held, outcome)``."""
        self.counter += 1
        _BLOCK.set(self.counter)
        held: list[Held] = []
        _HELD.set(held)
        try:
            return await self._attack(door, attack)
        finally:
            for h in held:
                h.close()

    async def _attack(self, door: Door, attack: Attack) -> tuple[bool, str]:
        right = door.right
        if right is Right.LOCAL:
            status = await self.ask(door)
            port = self.target(door)[1]
            where = sorted(listening_on(port))
            ok = status == 200 and where == ["127.0.0.1"]
            return ok, f"HTTP {status}; port {port} listens on {', '.join(where)} only"
        if right is Right.DEV_TOKENS:
            status = await self.ask(door)
            return status == 404, f"HTTP {status} (ALICIA_WEB_TOKENS off, the default)"
        if right is Right.SIGNED:
            return await self.webhook(door, attack)
        return await self.with_token(door, attack)

    async def with_token(self, door: Door, attack: Attack) -> tuple[bool, str]:
        b = door.bounds
        post = door.at.startswith("POST")
        run = json.dumps(_run_input(self.room)).encode()
        me = self.name()
        if attack is Attack.NO_GRANT:
            status = await self.ask(door, body=run)
            return status == 401, f"no token: HTTP {status}"
        if attack is Attack.SELF_GRANT:
            forged = self.bearer(me, secret="a-secret-of-my-own-0123456789abcdef")
            status = await self.ask(door, headers=forged, body=run)
            return status == 401, f"a token signed by oneself: HTTP {status}"
        if attack is Attack.AFTER_LEAVING:
            status = await self.ask(door, headers=self.bearer(me, ttl_s=-1), body=run)
            return status == 401, f"an expired token: HTTP {status}"
        if attack is Attack.MALFORMED:
            body = b'{"threadId": "doors-http", "not": "a run"'
            status = await self.ask(door, headers=self.bearer(me), body=body)
            return status == 400, f"not a RunAgentInput: HTTP {status}"
        if attack is Attack.TOO_BIG:
            size = (b.bytes_each or 0) + 1024
            held = await self.open(door, headers=self.bearer(me), body=b"{", length=size)
            status = await held.flood(size)
            return status == 413, f"{size:,} bytes: HTTP {status}"
        if attack in (Attack.TOO_SLOW, Attack.NEVER_FINISHED):
            assert b.deadline_s is not None
            held = await self.open(door, headers=self.bearer(me), body=run[:10], length=len(run))
            answer = asyncio.ensure_future(held.status(b.deadline_s + 10))
            if attack is Attack.TOO_SLOW:
                await held.trickle(run[10:], answer)
            status = await answer
            return status == 408, f"a body not whole within {b.deadline_s:g} s: HTTP {status}"
        if attack is Attack.TOO_MANY:
            if post:  # bodies being received at once, by one caller
                n = b.queued_each or 1
                held = [
                    await self.open(door, headers=self.bearer(me), body=run[:5], length=len(run))
                    for _ in range(n)
                ]
                status = await self.ask(
                    door, headers=self.bearer(me), body=run[:5], length=len(run)
                )
                return status == 429, f"{n} bodies arriving, one more: HTTP {status}"
            n = b.open_each or 1
            streams = [await self.open(door, headers=self.bearer(me)) for _ in range(n)]
            statuses = [await s.status(15.0) for s in streams]
            status = await self.ask(door, headers=self.bearer(me))
            return statuses == [200] * n and status == 429, f"{n} open, one more: HTTP {status}"
        if attack is Attack.MANY_IDENTITIES:
            # many callers from one address, each claiming another in X-Forwarded-For
            def spoof(i: int) -> dict[str, str]:
                return {**self.bearer(f"{me}-{i}"), "X-Forwarded-For": f"203.0.113.{i + 1}"}

            if post:
                n = 2  # a quarter of the uploads (8) from one address
                for i in range(n):
                    await self.open(door, headers=spoof(i), body=run[:5], length=len(run))
                status = await self.ask(door, headers=spoof(n), body=run[:5], length=len(run))
                return status == 429, f"{n} bodies from one address, one more: HTTP {status}"
            n = 16  # ALICIA_AGUI_MAX_PER_ADDRESS
            streams = [await self.open(door, headers=spoof(i)) for i in range(n)]
            statuses = [await s.status(15.0) for s in streams]
            status = await self.ask(door, headers=spoof(n))
            ok = statuses == [200] * n and status == 429
            return ok, f"{n} callers on one address (each forwarded as another), one more: {status}"
        if attack is Attack.MANY_ADDRESSES:
            n = b.open_each or 1
            if post:
                n = b.queued_each or 1
                for i in range(n):
                    await self.open(
                        door, headers=self.bearer(me), body=run[:5], length=len(run), source=i + 2
                    )
                status = await self.ask(
                    door, headers=self.bearer(me), body=run[:5], length=len(run), source=20
                )
                return status == 429, f"one caller's bodies from {n} addresses, one more: {status}"
            streams = [
                await self.open(door, headers=self.bearer(me), source=i + 2) for i in range(n)
            ]
            statuses = [await s.status(15.0) for s in streams]
            status = await self.ask(door, headers=self.bearer(me), source=20)
            ok = statuses == [200] * n and status == 429
            return ok, f"one caller on {n} addresses, one more: HTTP {status}"
        raise AssertionError(f"no attack {attack} on {door.name}")

    async def webhook(self, door: Door, attack: Attack) -> tuple[bool, str]:
        b = door.bounds
        event = json.dumps({"event": "room_started", "room": {"name": "x"}}).encode()
        if attack is Attack.NO_GRANT:
            status = await self.ask(door, body=event)
            return status == 401, f"unsigned: HTTP {status}"
        if attack is Attack.SELF_GRANT:
            signed = _signed(event, self.server.api_key, "a-secret-of-my-own-0123456789abcdef")
            status = await self.ask(door, headers={"Authorization": signed}, body=event)
            return status == 401, f"signed by oneself: HTTP {status}"
        if attack is Attack.AFTER_LEAVING:
            signed = _signed(event, self.server.api_key, self.server.api_secret, expired=True)
            status = await self.ask(door, headers={"Authorization": signed}, body=event)
            return status == 401, f"an expired signature: HTTP {status}"
        if attack is Attack.MALFORMED:
            status = await self.ask(door, body=b"\x00not json")
            return status == 401, f"garbage: HTTP {status}"
        if attack is Attack.TOO_BIG:
            size = (b.bytes_each or 0) + 1024
            held = await self.open(door, body=b"{", length=size)
            status = await held.flood(size)
            return status == 413, f"{size:,} bytes: HTTP {status}"
        if attack in (Attack.TOO_SLOW, Attack.NEVER_FINISHED):
            assert b.deadline_s is not None
            held = await self.open(door, body=event[:5], length=len(event))
            status = await held.status(b.deadline_s + 10)
            return status == 408, f"a body not whole within {b.deadline_s:g} s: HTTP {status}"
        raise AssertionError(f"no attack {attack} on {door.name}")


def _run_input(thread: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": "run-doors",
        "messages": [{"id": "m1", "role": "user", "content": "hello"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }


def _signed(body: bytes, key: str, secret: str, *, expired: bool = False) -> str:
    """A webhook ``Authorization``: a JWT with the body's sha256, as livekit-server signs."""
    import base64
    import hashlib

    import jwt

    digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
    now = int(time.time())
    claims = {"iss": key, "sha256": digest, "nbf": now - 60, "exp": now + 600}
    if expired:
        claims.update(nbf=now - 7200, exp=now - 3600)
    return jwt.encode(claims, secret, algorithm="HS256")


def _expired(_jwt: str, secret: str, now: int) -> str:
    """A caller's token (re-signed) whose validity ended an hour ago."""
    import jwt

    claims = jwt.decode(_jwt, options={"verify_signature": False})
    claims.update(nbf=now - 7200, exp=now - 3600)
    return jwt.encode(claims, secret, algorithm="HS256")
