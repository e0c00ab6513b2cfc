"""What the browser tests share: Debian's chromium, ``node``, the drivers' folder.

The drivers (``e2e.mjs``, ``takeover.mjs``, ``voice.mjs``, ``frontends/``) are in this
folder, :data:`BROWSER`; they run with ``cwd`` at the repository root, so their imports
resolve from its ``node_modules``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

import pytest

from tests.paths import ROOT

BROWSER: Final = ROOT / "tests" / "e2e" / "browser"
"""This folder: the JS drivers and the frontends' pages."""
CHROMIUM = "/usr/bin/chromium"


def node_binary() -> str:
    """``node`` from PATH, else the one scripts/setup may have put in .venv."""
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    node = shutil.which("node", path=path)
    if node is None:
        pytest.fail("node not found: run ./scripts/setup")
    return node


def page_url(base: str, room: str) -> str:
    return base + "?" + urlencode({"room": room, "identity": "browser", "autoconnect": "1"})
