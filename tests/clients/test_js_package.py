"""The npm package ``@alicia/reasoning`` (``clients/js/``): its Node unit tests pass, it
stays within its size budget, and the web debug page is built on it (no second copy of
the codec, trust rules or turn assembly in ``web/frontend/``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

SIZE_LIMIT = 15_000
"""Bytes, minified and gzipped (level 9), without livekit-client and React (issue 27)."""


def _tool(name: str) -> str:
    """``node``/``npm`` from PATH, else the one scripts/setup may have put in .venv."""
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    found = shutil.which(name, path=path)
    if found is None:
        pytest.fail(f"{name} not found: run ./scripts/setup")
    return found


def test_the_package_unit_tests_pass() -> None:
    """``npm run test:js``: codec, trust and turn assembly under ``node --test``."""
    done = subprocess.run(
        [_tool("npm"), "run", "--silent", "test:js"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-2000:])
    assert re.search(r"^# fail 0$", done.stdout, re.M), done.stdout[-2000:]


def test_the_package_is_at_most_15_kB_minified_and_gzipped() -> None:
    done = subprocess.run(
        [_tool("node"), str(ROOT / "clients" / "js" / "size.mjs")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = re.search(r"^SIZE core_gzip=(\d+) all_gzip=(\d+)", done.stdout, re.M)
    assert found, done.stdout + done.stderr
    core, everything = int(found.group(1)), int(found.group(2))
    print(f"@alicia/reasoning gzip: core {core} B, with the React layer {everything} B")
    assert core <= everything <= SIZE_LIMIT


def test_the_debug_page_is_built_on_the_package() -> None:
    frontend = ROOT / "web" / "frontend"
    assert sorted(p.name for p in frontend.glob("*.ts")) == ["main.ts"]
    main = (frontend / "main.ts").read_text()
    assert 'from "@alicia/reasoning"' in main
    assert "decodeEnvelope" not in main and "class AgentTrust" not in main


def _readme_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("## Show reasoning in your LiveKit frontend", 1)[1].split("\n## ", 1)[0]


def test_the_readme_install_line_and_example_build_in_an_app(tmp_path: Path) -> None:
    """The README's install line, run as printed from an app next to a checkout, installs
    the package; its example bundles against it (every import resolves and exists)."""
    section = _readme_section()
    install = re.search(r"```sh\n(.*?)\n```", section, re.S)
    example = re.search(r"```tsx\n(.*?)```", section, re.S)
    assert install is not None and example is not None
    assert len(example.group(1).strip().splitlines()) <= 20
    (tmp_path / "alicia-reasoning").symlink_to(ROOT)
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}')
    argv = install.group(1).split()
    assert argv[:2] == ["npm", "install"]
    # Offline: the package's own dependency is in npm's cache since scripts/setup.
    env = {**os.environ, "npm_config_offline": "true", "npm_config_audit": "false"}
    done = subprocess.run(
        [_tool("npm"), *argv[1:]],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed = app / "node_modules" / "@alicia" / "reasoning"
    assert installed.resolve() == (ROOT / "clients" / "js").resolve()
    (app / "page.tsx").write_text(example.group(1))
    # The app's own react and @livekit/components-react: this checkout's.
    bundled = subprocess.run(
        [
            str(ROOT / "node_modules" / ".bin" / "esbuild"),
            "page.tsx",
            "--bundle",
            "--format=esm",
            "--jsx=automatic",
            "--log-level=warning",
            "--outfile=out.js",
        ],
        cwd=app,
        env={**os.environ, "NODE_PATH": str(ROOT / "node_modules")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bundled.returncode == 0, bundled.stderr
    out = (app / "out.js").read_text()
    assert "alicia-" in out and "AgentPage" in out  # the panel's classes, the page
