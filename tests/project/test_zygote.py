"""The suite's zygote (``tests/support/zygote.py``): a forked process runs a module as
``python -m`` would, with the environment, folder, arguments, log and process group it
was given, and its exit status, a signal's too, comes back."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from tests.paths import ROOT
from tests.support import zygote as zygote_module
from tests.support.zygote import ForkedProcess, Zygote, forkable, python_module

MODULE = "tests.project.zygote_child"


async def test_a_forked_module_runs_with_what_it_was_given(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    env = {"PYTHONPATH": str(ROOT), "ZYGOTE_PROBE": "canary"}
    os.environ["ZYGOTE_ONLY"] = "the test process's"  # not passed on: env is all it gets
    try:
        proc = await python_module(MODULE, ["3", "x"], env=env, log=log, cwd=ROOT)
    finally:
        del os.environ["ZYGOTE_ONLY"]
    assert isinstance(proc, ForkedProcess)
    assert await asyncio.wait_for(proc.wait(), 30) == 3
    seen = json.loads(log.read_text().splitlines()[0])
    assert seen == {
        "argv": ["3", "x"],
        "cwd": str(ROOT),
        "probe": "canary",
        "zygote_only": None,
        "own_group": True,
        "preloaded": True,
        "main": MODULE,
    }


async def test_a_forked_module_s_forkserver_is_forked_by_the_zygote_into_its_group(
    tmp_path: Path,
) -> None:
    """A multiprocessing forkserver started in a forked module (as livekit-agents starts
    job processes) is the zygote's child, in the module's process group (a signal to the
    worker's group reaches its job processes), with its environment; it ends with it."""
    log = tmp_path / "child.log"
    env = {"PYTHONPATH": str(ROOT), "ZYGOTE_PROBE": "canary"}
    proc = await python_module(MODULE, ["forkserver"], env=env, log=log, cwd=ROOT)
    assert await asyncio.wait_for(proc.wait(), 60) == 0, log.read_text()
    seen = json.loads(log.read_text().splitlines()[-1])
    job = seen["job"]
    assert job["server_parent"] == seen["parent"] != seen["pid"]  # the zygote forked it
    assert job["group"] == seen["pid"]  # the module's own group
    assert job["probe"] == "canary"
    for _ in range(100):  # the server ends once the module has: nothing left behind
        try:
            os.kill(job["server"], 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the forkserver outlived its module")


async def test_a_killed_child_reports_its_signal(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    env = {"PYTHONPATH": str(ROOT)}
    proc = await python_module(MODULE, ["sleep"], env=env, log=log, cwd=ROOT)
    while not log.read_text():
        await asyncio.sleep(0.05)
    assert proc.returncode is None
    os.killpg(proc.pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL


@pytest.mark.parametrize("key", ["ALICIA_METRICS_PORT", "PROMETHEUS_MULTIPROC_DIR"])
def test_an_environment_read_at_import_is_not_forked(key: str) -> None:
    assert forkable({"PYTHONPATH": str(ROOT)})
    assert not forkable({key: "9100"})


async def test_a_request_given_up_on_does_not_answer_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh zygote is still importing when asked: the caller gives up (here at once);
    the child forked late for it is killed, and the next request gets its own child."""
    own = Zygote(ROOT)
    try:
        env = {"PYTHONPATH": str(ROOT)}
        monkeypatch.setattr(zygote_module, "_ANSWER_WITHIN", 0.001)
        with pytest.raises(RuntimeError, match="did not answer"):
            await own.spawn(MODULE, ["sleep"], env=env, cwd=str(ROOT), log=tmp_path / "a.log")
        monkeypatch.undo()
        proc = await own.spawn(MODULE, ["4"], env=env, cwd=str(ROOT), log=tmp_path / "b.log")
        assert await asyncio.wait_for(proc.wait(), 30) == 4
        assert json.loads((tmp_path / "b.log").read_text())["argv"] == ["4"]
        # The abandoned child was forked after all, and killed on arrival, not left to
        # its minute of sleep: the zygote reports its end.
        for _ in range(100):
            if -signal.SIGKILL in own._early.values():
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the abandoned child did not end: {own._early}")
    finally:
        own.close()
