"""Starlette app: ``GET /token`` mints join tokens, ``/`` serves the bundled page.

Routes:

* ``GET /token?room=&identity=`` → ``{"url", "token", "room", "identity"}``; both
  parameters optional (a new ``conv_…`` room, a ``web-…`` identity), else 1-128 of
  ``[A-Za-z0-9_.-]`` or 400. The API secret never leaves the server.
* ``GET /healthz`` → ``ok``.
* ``GET /`` → ``index.html`` (503 with a hint if the bundle was not built), and the
  static files under ``web/static`` (``dist/app.js`` is the esbuild bundle).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from client.tokens import mint_token, valid_name
from protocol.ids import CONVERSATION, new_id

from .settings import WebSettings

__all__ = ["BUNDLE", "STATIC_DIR", "create_app"]

logger = logging.getLogger(__name__)

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
BUNDLE: Final = STATIC_DIR / "dist" / "app.js"
_NO_STORE: Final = {"Cache-Control": "no-store"}


def create_app(settings: WebSettings) -> Starlette:
    """The web debug app for ``settings``."""

    async def token(request: Request) -> Response:
        room = request.query_params.get("room") or new_id(CONVERSATION)
        identity = request.query_params.get("identity") or f"web-{new_id('u')[2:12]}"
        for name, value in (("room", room), ("identity", identity)):
            if not valid_name(value):
                return JSONResponse(
                    {"error": f"{name} must be 1-128 characters of [A-Za-z0-9_.-]"},
                    status_code=400,
                    headers=_NO_STORE,
                )
        jwt = mint_token(settings.api_key, settings.api_secret, room=room, identity=identity)
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
    return Starlette(
        routes=[
            Route("/", index),
            Route("/token", token),
            Route("/healthz", healthz),
            Mount("/", StaticFiles(directory=STATIC_DIR, check_dir=False)),
        ]
    )
