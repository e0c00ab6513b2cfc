"""The worker's extra recorded streams (calculator tool call), merged with the shared ones.

:func:`combined_streams` writes a manifest that lists every shared stream of
``tests/streams`` and the streams of this directory (absolute file paths), so one
:class:`alicia.harness.recorded_llm.RecordedLLM` serves them all.
"""

from __future__ import annotations

import json
from pathlib import Path

from alicia.harness.recorded_llm import STREAMS_DIR

__all__ = ["HERE", "combined_streams"]

HERE = Path(__file__).resolve().parent


def combined_streams(directory: Path) -> Path:
    """Write the merged ``manifest.json`` into ``directory`` and return ``directory``."""
    merged = {}
    for source in (STREAMS_DIR, HERE):
        entries = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
        for name, entry in entries.items():
            merged[name] = {**entry, "file": str(source / entry["file"])}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps(merged, indent=2), encoding="utf-8")
    return directory
