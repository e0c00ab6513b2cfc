"""``python -m alicia.agent start|dev``: run the worker with the livekit-agents command line."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

from .settings import SettingsError, load


def main() -> None:
    """Read the settings (failing early and clearly) and hand over to ``cli.run_app``."""
    try:
        settings = load()
    except SettingsError as exc:
        print(f"alicia worker: {exc} (see agent/settings.py)", file=sys.stderr)
        raise SystemExit(2) from None
    if settings.metrics_port is not None and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Before prometheus_client loads: every process of the worker (its jobs too)
        # writes its numbers here, and the one /metrics merges them.
        folder = tempfile.mkdtemp(prefix="alicia-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    from livekit.agents import cli

    from .rooms.worker import build_server

    cli.run_app(build_server(settings))


if __name__ == "__main__":
    main()
