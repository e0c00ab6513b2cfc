"""Where things are: the repository root, for every test and helper."""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
"""The repository root (the folder of ``pyproject.toml``)."""

ARTIFACTS: Final = ROOT / "test-artifacts"
"""Where tests leave screenshots and reports for people to look at."""
