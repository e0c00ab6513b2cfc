"""``python -m alicia.agent start|dev``: run the worker with the livekit-agents command line."""

from __future__ import annotations

import sys

from .settings import SettingsError, load


def main() -> None:
    """Read the settings (failing early and clearly) and hand over to ``cli.run_app``."""
    try:
        settings = load()
    except SettingsError as exc:
        print(f"alicia worker: {exc} (see agent/settings.py)", file=sys.stderr)
        raise SystemExit(2) from None
    if settings.metrics_port is not None:
        # Before prometheus_client loads: every process of the worker (its jobs too)
        # writes its numbers there, and the one /metrics merges them.
        from .wiring import metrics_folder

        metrics_folder()
    from livekit.agents import cli

    from .rooms.worker import build_server

    cli.run_app(build_server(settings))


if __name__ == "__main__":
    main()
