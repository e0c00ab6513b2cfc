"""``python -m alicia.agent.agui``: serve the AG-UI endpoint with uvicorn (loopback by default)."""

from __future__ import annotations

import argparse
import sys

import uvicorn

from alicia.agent.gate.http import serve_options
from alicia.agent.settings import SettingsError, load
from alicia.agent.wiring import metrics_folder


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted."""
    p = argparse.ArgumentParser(prog="python -m alicia.agent.agui", description=__doc__)
    p.add_argument("--host", help="listen address (default ALICIA_AGUI_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default ALICIA_AGUI_PORT or 8090)")
    args = p.parse_args(argv)
    try:
        settings = load()
    except SettingsError as exc:
        print(f"alicia agui: {exc} (see agent/settings.py)", file=sys.stderr)
        return 2
    host = args.host or settings.agui_host
    port = settings.agui_port if args.port is None else args.port
    if settings.metrics_port is not None:
        metrics_folder()  # before prometheus_client loads (with the app)
        from alicia.agent.telemetry import serve_metrics

        serve_metrics(settings.metrics_port)
        print(f"metrics on http://127.0.0.1:{settings.metrics_port}/metrics", flush=True)
    from .app import create_app

    print(f"AG-UI endpoint on http://{host}:{port}/agui", flush=True)
    uvicorn.run(create_app(settings), **serve_options(host=host, port=port, log_level="warning"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
