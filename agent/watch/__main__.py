"""``python -m alicia.agent.watch``: run the failover watcher (webhooks on loopback)."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from alicia.agent.gate.http import serve_options
from alicia.agent.settings import SettingsError, WatchSettings

from .app import create_app


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted."""
    p = argparse.ArgumentParser(prog="python -m alicia.agent.watch", description=__doc__)
    p.add_argument("--host", help="listen address (default ALICIA_WATCH_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default ALICIA_WATCH_PORT or 8091)")
    args = p.parse_args(argv)
    try:
        settings = WatchSettings.load()
    except SettingsError as exc:
        print(f"alicia watch: {exc} (see agent/settings.py)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    print(f"watcher webhooks on http://{host}:{port}/webhook", flush=True)
    uvicorn.run(create_app(settings), **serve_options(host=host, port=port, log_level="warning"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
