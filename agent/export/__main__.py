"""``python -m alicia.agent.export``: the ``alicia-export`` command."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
