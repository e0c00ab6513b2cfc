"""``python -m alicia.web``: serve the debug page with uvicorn (loopback by default)."""

from __future__ import annotations

import argparse
import os
import sys

import uvicorn

from .app import create_app
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
    print(f"web debug page on http://{host}:{port}/", flush=True)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
