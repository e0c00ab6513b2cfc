"""The watcher's HTTP side: livekit-server webhooks in (signature checked), health out.

Routes: ``POST /webhook`` (livekit-server's ``webhook.urls``; the body's SHA-256 must
match the signed token in ``Authorization``, checked with ``livekit-api``'s
``WebhookReceiver``; anything else is 401 and ignored) and ``GET /healthz``. The body
is read with a limit (:data:`WEBHOOK_MAX_BYTES`) as it arrives, before the signature is
checked: a larger one is 413 and never buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from livekit import api
from livekit.protocol import models
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from alicia.agent.bodies import BodyTooLarge, read_body
from alicia.agent.gate.doors import Server, door
from alicia.agent.gate.http import routes
from alicia.agent.gate.refusals import refused
from alicia.agent.settings import WatchSettings
from alicia.agent.storage.leases import Leases

from .watcher import Watcher

__all__ = ["create_app"]

logger = logging.getLogger("alicia.watch")

WEBHOOK: Final = door("webhook")
WEBHOOK_MAX_BYTES: Final = WEBHOOK.bounds.bytes_each or 1024 * 1024
"""Largest webhook body read (livekit-server's are a few kilobytes)."""
_ROOM_EVENTS = frozenset({"room_started", "participant_joined", "participant_left"})


def _reason(number: int) -> str:
    """A disconnect reason's name; its number if this protocol version does not know it."""
    known = models.DisconnectReason.DESCRIPTOR.values_by_number.get(number)
    return known.name if known is not None else str(number)


def _address(request: Request) -> str:
    return request.client.host if request.client is not None else ""


def create_app(settings: WatchSettings) -> Starlette:
    """The watcher as a Starlette app: its loops run for the app's lifespan."""
    leases = Leases(settings.database_url)
    watcher = Watcher(settings, leases)
    receiver = api.WebhookReceiver(
        api.TokenVerifier(settings.livekit_api_key, settings.livekit_api_secret)
    )

    async def webhook(request: Request) -> Response:
        try:
            async with asyncio.timeout(WEBHOOK.bounds.deadline_s):
                raw = await read_body(request, WEBHOOK_MAX_BYTES, "the webhook body")
        except BodyTooLarge as exc:
            refused(WEBHOOK, _address(request), "too big")
            return PlainTextResponse(str(exc), status_code=413, headers={"connection": "close"})
        except TimeoutError:
            refused(WEBHOOK, _address(request), "too slow")
            message = f"the webhook body did not arrive within {WEBHOOK.bounds.deadline_s:g} s"
            return PlainTextResponse(message, status_code=408, headers={"connection": "close"})
        body = raw.decode("utf-8", "replace")
        try:
            event = receiver.receive(body, request.headers.get("authorization", ""))
        except Exception as exc:  # a bad signature, a stale token, not JSON: ignored
            refused(WEBHOOK, _address(request), f"not signed: {type(exc).__name__}")
            return PlainTextResponse("invalid signature", status_code=401)
        if event.event in _ROOM_EVENTS and event.room.name:
            who = event.participant.identity
            if event.event == "participant_left":  # why: livekit-server's own reason
                who += f" ({_reason(event.participant.disconnect_reason)})"
            logger.info(f"webhook {event.event} {event.room.name} {who}".rstrip())
            watcher.look_at([event.room.name])
        return PlainTextResponse("ok")

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await watcher.start()
        try:
            yield
        finally:
            await watcher.aclose()
            await leases.aclose()

    app = Starlette(
        routes=routes(Server.WATCHER, {"webhook": webhook, "watcher health": healthz}),
        lifespan=lifespan,
    )
    app.state.watcher = watcher
    return app
