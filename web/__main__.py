"""``python -m alicia.web``: serve the debug page with uvicorn (loopback by default)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

import uvicorn

from alicia.agent.gate.http import serve_options

from .app import create_app

if TYPE_CHECKING:
    from alicia.agent.agui import AguiService
from .settings import WebSettings, WebSettingsError


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted."""
    p = argparse.ArgumentParser(prog="python -m alicia.web", description="Alicia web debug page")
    p.add_argument("--host", help="listen address (default ALICIA_WEB_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default ALICIA_WEB_PORT or 8080)")
    args = p.parse_args(argv)
    try:
        settings = WebSettings.from_env(os.environ)
    except WebSettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    agui = _agui()
    print(f"web debug page on http://{host}:{port}/", flush=True)
    if agui is not None:
        print(f"AG-UI endpoint on http://{host}:{port}/agui", flush=True)
    uvicorn.run(
        create_app(settings, agui=agui), **serve_options(host=host, port=port, log_level="warning")
    )
    return 0


def _agui() -> AguiService | None:
    """The AG-UI endpoint on the worker's settings, or None (said why) if they are not set."""
    from alicia.agent.settings import SettingsError, load

    try:
        settings = load()
    except SettingsError as exc:
        print(f"AG-UI endpoint off: {exc}", file=sys.stderr, flush=True)
        return None
    from alicia.agent.agui import AguiService

    return AguiService(settings)


if __name__ == "__main__":
    sys.exit(main())
