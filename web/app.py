"""Starlette app: ``GET /token`` mints join tokens, ``/`` serves the bundled page.

Routes:

* ``GET /token?room=&identity=`` → ``{"url", "token", "room", "identity"}``, only with
  ``ALICIA_WEB_TOKENS=dev`` (else 404 with a hint): a development issuer. Both
  parameters are optional (a new ``conv_…`` room, a ``web-…`` identity), else 1-128 of
  ``[A-Za-z0-9_.-]`` or 400. Identities reserved for agents (prefix ``agent-``) are
  refused with 403, and so is any identity already in the room (409: joining with it
  would displace that participant). Tokens carry only the configured attributes and
  never the right to change one's own. The API secret never leaves the server.
* ``GET /healthz`` → ``ok``.
* ``POST /agui`` and ``GET /agui/rooms/{room}/events``: the AG-UI endpoint
  (:mod:`alicia.agent.agui`), when the app is made with one (``python -m alicia.web`` does
  when the worker's settings are complete: ``LLM_BASE_URL``, ``LLM_MODEL``).
* ``GET /`` → ``index.html`` (503 with a hint if the bundle was not built), and the
  static files under ``web/static`` (``dist/app.js`` is the esbuild bundle).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.staticfiles import StaticFiles

from alicia.agent.gate.doors import Server
from alicia.agent.gate.http import routes
from alicia.client.tokens import mint_token, valid_name
from alicia.protocol.ids import CONVERSATION, new_id

from .settings import WebSettings

if TYPE_CHECKING:
    from alicia.agent.agui import AguiService

__all__ = ["BUNDLE", "STATIC_DIR", "Occupants", "create_app", "room_occupants"]

logger = logging.getLogger(__name__)

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
BUNDLE: Final = STATIC_DIR / "dist" / "app.js"
_NO_STORE: Final = {"Cache-Control": "no-store"}

Occupants = Callable[[str], Awaitable[set[str]]]
"""Who is in a room now (identities); raises if livekit-server cannot be asked."""


def room_occupants(settings: WebSettings) -> Occupants:
    """Ask livekit-server (``RoomService.ListParticipants``) who is in a room."""
    from livekit import api

    url = settings.api_url or settings.livekit_url
    http_url = "http" + url[2:] if url.startswith("ws") else url

    async def occupants(room: str) -> set[str]:
        async with api.LiveKitAPI(http_url, settings.api_key, settings.api_secret) as lk:
            try:
                reply = await lk.room.list_participants(api.ListParticipantsRequest(room=room))
            except api.TwirpError as exc:
                if exc.code == api.TwirpErrorCode.NOT_FOUND:
                    return set()  # no such room yet: nobody in it
                raise
        return {p.identity for p in reply.participants}

    return occupants


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=_NO_STORE)


def create_app(
    settings: WebSettings,
    *,
    occupants: Occupants | None = None,
    agui: AguiService | None = None,
) -> Starlette:
    """The web debug app for ``settings`` (``occupants``: who is in a room; tests), with
    the AG-UI endpoint's routes when ``agui`` is given."""
    in_room = occupants or room_occupants(settings)
    if settings.tokens == "dev":
        logger.warning(
            "ALICIA_WEB_TOKENS=dev: GET /token is a development token issuer; anyone who "
            "can reach this page can join any room. Never expose it: mint tokens in your "
            "app's backend instead."
        )

    async def token(request: Request) -> Response:
        if settings.tokens != "dev":
            return _error(
                404,
                "the token endpoint is off: open the page with #token=<jwt>&url=<ws url> minted "
                "by your backend, or set ALICIA_WEB_TOKENS=dev on a development machine",
            )
        room = request.query_params.get("room") or new_id(CONVERSATION)
        identity = request.query_params.get("identity") or f"web-{new_id('u')[2:12]}"
        for name, value in (("room", room), ("identity", identity)):
            if not valid_name(value):
                return _error(400, f"{name} must be 1-128 characters of [A-Za-z0-9_.-]")
        if identity.startswith(settings.reserved_prefixes):
            return _error(403, f"identity {identity!r} is reserved for agents")
        try:
            present = await in_room(room)
        except Exception:
            logger.exception("cannot list the room's participants", extra={"room": room})
            return _error(503, "cannot check who is in the room; try again")
        if identity in present:
            return _error(409, f"{identity!r} is already in room {room!r}; pick another name")
        jwt = mint_token(
            settings.api_key,
            settings.api_secret,
            room=room,
            identity=identity,
            attributes=settings.token_attributes,
        )
        return JSONResponse(
            {"url": settings.livekit_url, "token": jwt, "room": room, "identity": identity},
            headers=_NO_STORE,
        )

    async def index(request: Request) -> Response:
        if not BUNDLE.is_file():
            return PlainTextResponse(
                "The web bundle is not built: run ./scripts/setup (npm ci && npm run build).",
                status_code=503,
            )
        return FileResponse(STATIC_DIR / "index.html", headers=_NO_STORE)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    if not BUNDLE.is_file():
        logger.warning("web bundle missing; run npm run build", extra={"path": str(BUNDLE)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if agui is None:
            yield
            return
        async with agui.lifespan():
            yield

    return Starlette(
        routes=routes(
            Server.WEB,
            {
                "web page": index,
                "web token": token,
                "web health": healthz,
                "web static": StaticFiles(directory=STATIC_DIR, check_dir=False),
            },
            also=agui.routes if agui is not None else (),
        ),
        lifespan=lifespan,
    )
