"""The HTTP side of an AG-UI stream: the SSE response written with a deadline (the
request body is read with a limit by :mod:`alicia.agent.bodies`).

* :class:`EventResponse` streams the events and frees the stream's
  :class:`~.limits.Slot` when the response ends, however it ends. Every write must be
  taken by the connection within ``ALICIA_AGUI_WRITE_TIMEOUT``: a caller that stops
  reading fills the server's buffers (bounded: the run's queue, the connection's write
  buffer, the kernel's unsent bytes, :data:`UNSENT_LIMIT`), then its stream is cut and
  its slot freed. Under ``python -m alicia.agent.agui`` the connection is aborted at
  once (:class:`AbortableApp`); under another server it is closed once its buffer
  drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from alicia.agent.telemetry.instruments import AGUI_REQUESTS

from .limits import Slot

__all__ = ["AbortableApp", "EventResponse", "ReaderStalled"]

logger = logging.getLogger("alicia.agui")

ABORT: Final = "alicia.abort"
"""Scope key of the connection's abort callable, when the server exposes its transport."""
UNSENT_LIMIT: Final = 128 * 1024
"""Bytes a TCP connection's kernel buffer may hold unsent (``TCP_NOTSENT_LOWAT``): past
it the connection stops taking writes, so a caller that stops reading is found stalled
once this and the server's own write buffer are full, not once Linux's send buffer has
grown to its limit (4 MiB by default: at a slow stream's pace, minutes)."""


class ReaderStalled(Exception):
    """The caller took no event within the write deadline: the stream is cut."""


class EventResponse(StreamingResponse):
    """An SSE response that holds ``slot`` while it lasts and cuts a caller that stops
    reading (see the module docstring)."""

    def __init__(
        self,
        events: AsyncIterator[str],
        *,
        slot: Slot,
        write_timeout_s: float,
        media_type: str,
        headers: Mapping[str, str],
    ) -> None:
        """``events``: the encoded events (closed when the response ends)."""
        super().__init__(events, media_type=media_type, headers=headers)
        self._events = events
        self.slot = slot
        self.write_timeout_s = write_timeout_s
        self.stalled = False

    async def stream_response(self, send: Send) -> None:
        """Send every event, each taken by the connection within the write deadline."""

        async def timed(message: Message) -> None:
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await send(message)
            except TimeoutError:
                raise ReaderStalled from None

        await super().stream_response(timed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the stream; free the slot when it ends, and cut a stalled caller."""
        try:
            await super().__call__(scope, receive, send)
        except ReaderStalled:
            self.stalled = True
            logger.warning(
                "agui stream cut: the caller stopped reading",
                extra={"caller": self.slot.identity, "kind": self.slot.kind},
            )
            abort: Callable[[], None] | None = scope.get(ABORT)
            if abort is not None:
                abort()
                await asyncio.sleep(0)  # the server sees the connection gone
        finally:
            with contextlib.suppress(Exception):
                await self._aclose_events()
            self.slot.release()

    async def _aclose_events(self) -> None:
        aclose: Callable[[], object] | None = getattr(self._events, "aclose", None)
        if aclose is not None:
            result = aclose()
            if asyncio.iscoroutine(result):
                await result


def _bound_unsent(transport: asyncio.Transport) -> None:
    """Limit the connection's unsent bytes in the kernel to :data:`UNSENT_LIMIT` (where
    the platform has ``TCP_NOTSENT_LOWAT``)."""
    sock = transport.get_extra_info("socket")
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if sock is None or option is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, option, UNSENT_LIMIT)


class AbortableApp(Starlette):
    """A Starlette app that lets :class:`EventResponse` abort a stalled connection: it
    puts the connection's ``abort`` in the scope when the server's ``send`` exposes its
    transport (uvicorn's does). Every response is counted by its status code
    (``alicia.agui.requests``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request (or the lifespan)."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        if isinstance(transport, asyncio.Transport):
            scope[ABORT] = transport.abort
            _bound_unsent(transport)

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                AGUI_REQUESTS.add(1, {"http.response.status_code": int(message["status"])})
            await send(message)

        await super().__call__(scope, receive, counted)
