"""An aiohttp application served on loopback, on a port the system picks."""

from __future__ import annotations

from aiohttp import web

__all__ = ["serve_app"]


async def serve_app(app: web.Application) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on 127.0.0.1 at a free port: its runner (``cleanup()`` it) and port."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sockets = getattr(site._server, "sockets", None)  # an asyncio Server once started
    assert sockets, "the site did not bind"
    return runner, int(sockets[0].getsockname()[1])
