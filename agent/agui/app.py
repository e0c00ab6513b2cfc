"""The AG-UI endpoint: a Starlette app on the same engine as the LiveKit worker.

Routes:

* ``POST /agui``: an AG-UI ``RunAgentInput`` (JSON) in, a Server-Sent Events stream of
  AG-UI events out (``ag_ui.encoder.EventEncoder``); see :mod:`.projection` for the
  events and :mod:`.history` for continuity. The thread id is the conversation id.
* ``GET /agui/rooms/{room}/events``: a live LiveKit room's turns as AG-UI events
  (:mod:`.room`).
* ``GET /agui/healthz``: ``ok``.

Both streams need ``Authorization: Bearer <LiveKit access token>`` whose room grant is
the thread (or room) and whose ``alicia.reasoning`` attribute is the caller's level
(:mod:`.auth`); without a valid one the answer is HTTP 401 (403 for another room) and
no stream. A body that is not a ``RunAgentInput`` gets HTTP 400 with the reasons, one
over 4 MiB HTTP 413 while it is still arriving (:mod:`alicia.agent.bodies`). A caller
holds at most ``ALICIA_AGUI_MAX_PER_CALLER`` streams at once, a client address at most
``ALICIA_AGUI_MAX_PER_ADDRESS`` (HTTP 429 beyond; :mod:`.limits`). A run input must arrive
whole within ``ALICIA_AGUI_BODY_TIMEOUT`` (HTTP 408), and at most
``ALICIA_AGUI_MAX_UPLOADS`` are being received at once (HTTP 503 beyond), a quarter of
them (at least one) from one caller or one client address (HTTP 429 beyond). A run lasts at
most ``ALICIA_AGUI_RUN_TIMEOUT``, and a caller that stops reading is cut after
``ALICIA_AGUI_WRITE_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Final

from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute

from alicia.agent.bodies import BodyTooLarge, read_body
from alicia.agent.engine.tools import default_tools
from alicia.agent.gate.doors import Server
from alicia.agent.gate.http import routes
from alicia.agent.settings import Settings
from alicia.agent.wiring import open_keys, open_llm, open_sink
from alicia.client.tokens import valid_name

from .auth import AuthError, Caller, TokenCheck, require_room
from .limits import Kind, LimitError, Limits, Slot
from .room import RoomEvents
from .run import Runs, RunStream
from .sse import AbortableApp, EventResponse

__all__ = ["AguiService", "create_app"]

logger = logging.getLogger("alicia.agui")

MAX_BODY_BYTES: Final = 4 * 1024 * 1024
"""Largest RunAgentInput accepted (the whole history travels with every run)."""
_SSE_HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _error(status: int, message: str, *, close: bool = False) -> JSONResponse:
    headers = {"Cache-Control": "no-store"}
    if close:  # the rest of the request is not read: the connection cannot be reused
        headers["Connection"] = "close"
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class AguiService:
    """The endpoint's routes and the lifespan of what they share (storage, keys, LLM)."""

    def __init__(self, settings: Settings) -> None:
        """Nothing is opened until :meth:`lifespan`."""
        self.settings = settings
        self.check = TokenCheck(
            settings.livekit_api_key,
            settings.livekit_api_secret,
            default=settings.reasoning_visibility,
        )
        self._runs: Runs | None = None
        self.rooms = RoomEvents(settings)
        self.limits = Limits(
            per_caller=settings.agui_max_per_caller,
            per_kind=settings.agui_max_runs,
            per_address=settings.agui_max_per_address,
        )
        self.uploads = 0
        """Run inputs being received now (at most ``agui_max_uploads``)."""
        self._uploading: Counter[str] = Counter()
        """The same by caller identity and by client address (at most a share each)."""
        self.encoder = EventEncoder()

    @property
    def runs(self) -> Runs:
        """The runs being served (once the lifespan has started)."""
        if self._runs is None:
            raise RuntimeError("the AG-UI service has not started")
        return self._runs

    @property
    def routes(self) -> list[BaseRoute]:
        """The endpoint's routes, to serve alone or inside another Starlette app."""
        return routes(
            Server.AGUI,
            {"agui run": self.run, "agui room events": self.room, "agui health": self.healthz},
        )

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Open storage, keys and the model client; on exit stop every run and close them."""
        s = self.settings
        sink = await open_sink(
            s.database_url, close_timeout_s=s.storage_close_timeout_s, pool_size=s.db_pool_size
        )
        keys = open_keys(s)
        llm = open_llm(s)
        tools = default_tools() if s.tools_enabled else None
        self._runs = Runs(s, sink=sink, llm=llm, keys=keys, tools=tools)
        try:
            yield
        finally:
            await self._runs.aclose()
            await self.rooms.aclose()
            if keys is not None:
                await keys.aclose()
            await llm.close()
            await sink.aclose()

    async def healthz(self, request: Request) -> Response:
        """Liveness."""
        return PlainTextResponse("ok")

    def _caller(self, request: Request, room: str) -> Caller:
        caller = self.check.caller(request.headers.get("authorization"))
        require_room(caller, room)
        return caller

    def _address(self, request: Request) -> str:
        """The client's address: the connection's peer, or behind a trusted proxy the
        last ``X-Forwarded-For`` entry that is not one."""
        peer = request.client.host if request.client is not None else ""
        trusted = self.settings.agui_trusted_proxies
        if peer not in trusted:
            return peer
        hops = [h.strip() for h in request.headers.get("x-forwarded-for", "").split(",")]
        return next((h for h in reversed(hops) if h and h not in trusted), peer)

    def _slot(self, caller: Caller, kind: Kind, request: Request) -> Slot | JSONResponse:
        try:
            return self.limits.take(caller.identity, kind, self._address(request))
        except LimitError as exc:
            return _error(exc.status, str(exc))

    def _respond(self, events: AsyncIterator[str], slot: Slot) -> Response:
        return EventResponse(
            events,
            slot=slot,
            write_timeout_s=self.settings.agui_write_timeout_s,
            media_type=self.encoder.get_content_type(),
            headers=_SSE_HEADERS,
        )

    async def run(self, request: Request) -> Response:
        """``POST /agui``: one run as an SSE stream."""
        try:
            who = self.check.caller(request.headers.get("authorization"))
        except AuthError as exc:
            return _error(exc.status, str(exc))
        slot = self._slot(who, "run", request)  # before the body is read: uploads count too
        if not isinstance(slot, Slot):
            return slot
        try:
            response = await self._run(request, slot, (who.identity, self._address(request)))
        except BaseException:
            slot.release()
            raise
        if not isinstance(response, EventResponse):
            slot.release()
        return response

    async def _run(self, request: Request, slot: Slot, sender: tuple[str, str]) -> Response:
        s = self.settings
        if self.uploads >= s.agui_max_uploads:
            return _error(503, "too many run inputs arriving at once; try again", close=True)
        keys = (f"caller {sender[0]}", f"address {sender[1]}")
        share = max(1, s.agui_max_uploads // 4)
        if any(self._uploading[k] >= share for k in keys):
            message = f"more than {share} run inputs of this caller or address arriving at once"
            return _error(429, message, close=True)
        self.uploads += 1
        self._uploading.update(keys)
        try:
            async with asyncio.timeout(s.agui_body_timeout_s):
                body = await read_body(request, MAX_BODY_BYTES, "the run input")
        except BodyTooLarge as exc:
            return _error(exc.status, str(exc), close=True)
        except TimeoutError:
            message = f"the run input did not arrive within {s.agui_body_timeout_s:g} s"
            return _error(408, message, close=True)
        finally:
            self.uploads -= 1
            self._uploading.subtract(keys)
            for k in keys:
                if self._uploading[k] <= 0:
                    del self._uploading[k]
        try:
            run = RunAgentInput.model_validate_json(body)
        except ValidationError as exc:
            return _error(400, f"not an AG-UI RunAgentInput: {exc.error_count()} errors: {exc}")
        if not valid_name(run.thread_id):
            return _error(400, "threadId must be 1-128 characters of [A-Za-z0-9_.-]")
        try:
            caller = self._caller(request, run.thread_id)
        except AuthError as exc:
            return _error(exc.status, str(exc))
        refused = await self.runs.claim(caller, run)
        if refused is not None:
            return _error(403, refused)
        stream = self.runs.start(caller, run, slot)
        return self._respond(self._sse(stream), slot)

    async def _sse(self, stream: RunStream) -> AsyncIterator[str]:
        try:
            async for event in stream:
                yield self.encoder.encode(event)
        finally:
            stream.close()

    async def room(self, request: Request) -> Response:
        """``GET /agui/rooms/{room}/events``: a live room's turns as an SSE stream."""
        room = request.path_params["room"]
        try:
            caller = self._caller(request, room)
        except AuthError as exc:
            return _error(exc.status, str(exc))
        slot = self._slot(caller, "room", request)  # counted now, before LiveKit is joined
        if not isinstance(slot, Slot):
            return slot
        return self._respond(self._room_sse(caller), slot)

    async def _room_sse(self, caller: Caller) -> AsyncIterator[str]:
        async with contextlib.aclosing(self.rooms.stream(caller)) as events:
            async for event in events:
                yield self.encoder.encode(event)


def create_app(settings: Settings) -> Starlette:
    """The AG-UI endpoint alone (``python -m alicia.agent.agui``)."""
    service = AguiService(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with service.lifespan():
            yield

    return AbortableApp(routes=service.routes, lifespan=lifespan)
