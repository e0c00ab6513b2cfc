"""Run the real worker (``python -m alicia.agent start``) as a subprocess, for tests and benchmarks.

:func:`running_worker` starts it against a :class:`alicia.harness.LiveKitServer` and an LLM
base URL, waits until it has registered with the server (its log says
``registered worker``; rooms created before that get no agent), and on exit stops it
with SIGTERM (SIGKILL after a grace period). The worker's log goes to a file whose
tail is attached to failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from alicia.harness import LiveKitServer
from tests.paths import ROOT
from tests.support import process_logs
from tests.support.zygote import ModuleProcess, python_module

__all__ = ["NO_LOAD_LIMIT", "PROCESS_EXECUTOR", "WorkerProcess", "running_worker"]

# The machine is busy (chromium, other tests): a worker that reports itself full when the
# room is created is never dispatched to it.
NO_LOAD_LIMIT = {"ALICIA_LOAD_THRESHOLD": "inf"}
PROCESS_EXECUTOR = {"ALICIA_JOB_EXECUTOR": "process"}
"""A worker as ``python -m alicia.agent start`` runs by default: a process per room.
:func:`running_worker` runs text workers with the thread executor unless told (a worker
with the process executor costs about 3 s more CPU to start, a forkserver importing what
every job needs and its job processes: in a run of the suite, 103 forkservers took 197
CPU-s and their job processes 130, of about 1,970 on 2 cores); the tests of the default
path (a turn, the CLI, storage, ZDR at rest, telemetry from job processes, a stop of the
whole process group) ask for it. Forked from the suite's zygote (unless run
``as_printed``), such a worker's forkserver is forked from the zygote too. Voice workers
keep the default: on the thread executor (tried in the suite) two voice tests failed on
a loaded machine, once each in three runs, a stalled voice worker's successor got no job
in time and a voice room's answer missed a client's 30 s wait, and neither was
explained."""


@dataclass
class WorkerProcess:
    """A started worker: its process and log file."""

    proc: ModuleProcess
    log_path: Path
    kept: str | None = None
    """The whole log as it was when the worker stopped (its file is gone then)."""

    def text(self) -> str:
        """The whole log so far (or as it was when the worker stopped)."""
        if self.kept is not None:
            return self.kept
        return self.log_path.read_text(errors="replace")

    def log(self, tail: int = 6000) -> str:
        """The end of the worker's log."""
        return self.text()[-tail:]

    def notable(self, limit: int = 12000) -> str:
        """The warnings and errors of the whole log (a failure's cause may have scrolled
        out of its end), at most ``limit`` characters of them, the latest kept."""
        lines = self.text().splitlines()
        kept = [
            line
            for line in lines
            if any(f'"level": "{lv}"' in line for lv in ("WARNING", "ERROR", "CRITICAL"))
            or "Traceback" in line
        ]
        return "\n".join(kept)[-limit:]


@contextlib.asynccontextmanager
async def running_worker(
    server: LiveKitServer,
    llm_base_url: str,
    *,
    mode: str = "start",
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 180.0,
    log_level: str = "info",
    as_printed: bool = False,
) -> AsyncIterator[WorkerProcess]:
    """``python -m alicia.agent <mode>`` with the server's env and ``LLM_BASE_URL`` (a text
    worker with the thread executor unless ``env`` or the environment names one:
    :data:`PROCESS_EXECUTOR`);
    registered (within ``ready_timeout``: a start is not what is tested, and several
    workers starting at once past the realtime lanes, at ``nice`` 10, took over 60 s on a
    loaded 2-core machine), and with a voice worker (``ALICIA_VOICE``) a job runner
    warm: its VAD and recognizer loaded (the first room of a cold voice worker on a loaded machine
    heard its question seconds late; how long a cold start takes is measured, not
    tested). ``as_printed``: the command executed as a user types it, not forked from the
    suite's zygote (forked, its job processes' forkserver is forked from the zygote
    too)."""
    full_env = {
        **os.environ,
        **server.env(),
        "LLM_BASE_URL": llm_base_url,
        "LLM_MODEL": "recorded-model",
        "LLM_API_KEY": "test",
        "ALICIA_HTTP_PORT": "0",
        "PYTHONPATH": str(ROOT),
        # Load = rooms served / 50, not the machine's CPU use: livekit-server picks a
        # worker by (1 - load) and skips one at load >= 1, so on a busy test machine
        # (chromium starting, other tests) a CPU-based load drops rooms with no agent.
        "ALICIA_MAX_ROOMS": "50",
        # A job process starting at nice 10 beside the heaviest modules took over the
        # default 10 s (killed, and the next too: a room with no agent for a minute).
        "ALICIA_JOB_START_TIMEOUT": "60",
        # One warm job process (or thread), not two: a voice worker's each loads the VAD
        # and the recognizer (3 CPU-s), and the suite starts dozens of workers on 2 cores.
        "ALICIA_IDLE_PROCESSES": "1",
        **(env or {}),
    }
    voice = any(full_env.get(k) for k in ("ALICIA_VOICE", "ALICIA_STT", "ALICIA_TTS"))
    if "ALICIA_JOB_EXECUTOR" not in full_env and not voice:
        full_env["ALICIA_JOB_EXECUTOR"] = "thread"  # see PROCESS_EXECUTOR
    if env is None or "DATABASE_URL" not in env:
        full_env.pop("DATABASE_URL", None)  # persistence off unless asked for
    with tempfile.TemporaryDirectory(prefix="alicia-worker-") as tmp:
        log_path = Path(tmp) / "worker.log"
        args = [mode, "--log-level", log_level]
        args += ["--drain-timeout", "2"] if mode == "start" else []
        proc = await python_module(
            "alicia.agent", args, env=full_env, log=log_path, cwd=ROOT, fork=not as_printed
        )
        worker = WorkerProcess(proc, log_path)
        logged = process_logs.started(f"worker {proc.pid} ({mode})", worker.text)
        try:
            deadline = time.monotonic() + ready_timeout
            ready = ["registered worker"]
            if full_env.get("ALICIA_VOICE") and mode == "start":
                thread = full_env.get("ALICIA_JOB_EXECUTOR") == "thread"
                ready.append("job runner initialized" if thread else "process initialized")
            while not all(line in log_path.read_text(errors="replace") for line in ready):
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker not ready ({ready}):\n{worker.log()}")
                await asyncio.sleep(0.05)
            yield worker
        finally:
            await _stop(proc)
            worker.kept = log_path.read_text(errors="replace")
            process_logs.stopped(logged, worker.text)


async def _stop(proc: ModuleProcess, grace: float = 10.0) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
