"""``./scripts/test --quick`` as the README prints it: it runs, and it picks only tests that
need no server (``--collect-only`` added, so the suite does not run itself)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.paths import ROOT


@pytest.mark.integration  # runs ruff over the whole tree and collects the suite: ~20 s
def test_the_quick_tier_runs_as_printed_and_leaves_out_every_server_test() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "\n./scripts/test --quick\n" in readme
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        ["./scripts/test", "--quick", "--collect-only", "-q", "-n", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(ids) > 1000
    folders = {i.split("/")[1] for i in ids}
    assert {"protocol", "llm", "engine", "session", "clients"} <= folders
    servers = ("tests/e2e/voice/test_voice.py", "tests/storage/test_storage_writer.py")
    assert not [i for i in ids if i.startswith(servers)]  # every test there needs a server
    assert not [i for i in ids if "test_bench_load" in i or "test_bench_servers" in i]
    assert not [i for i in ids if "test_bench_soak" in i]
