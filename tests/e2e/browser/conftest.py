"""The browser tests fail at once, not skipped, where Debian's chromium is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.browser.helpers import CHROMIUM


@pytest.fixture(scope="module", autouse=True)
def _chromium_installed() -> None:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} missing: run ./scripts/setup (apt-get install chromium)")
