"""A server process in a temporary folder, up once a URL answers: the harness's servers."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["BIND_ATTEMPTS", "ServedProcess"]

BIND_ATTEMPTS = 3
"""Starts of a server whose port was taken before it bound it, each on new ports."""


class _PortTaken(RuntimeError):
    """The server exited because one of its ports was taken."""


class ServedProcess:
    """A backend process in a temporary folder, up once ``ready_url`` answers 200."""

    name = "server"
    """Names its temporary folder (``alicia-<name>-``), its log and its errors."""
    start_timeout_s = 60.0
    """How long :meth:`start` waits for :attr:`ready_url` by default."""

    def __init__(self) -> None:
        """Nothing runs until :meth:`start`."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.log_path = Path(tempfile.gettempdir()) / f"alicia-{self.name}-not-started.log"

    @property
    def pid(self) -> int:
        """The server's process id (started)."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} not started")
        return self._proc.pid

    def command(self, folder: Path) -> list[str]:
        """The command line, its files written into ``folder`` (its working directory)."""
        raise NotImplementedError

    def environment(self, folder: Path) -> dict[str, str]:
        """Variables set for the server beside this process's (none by default)."""
        return {}

    @property
    def ready_url(self) -> str:
        """A URL that answers 200 once the server serves."""
        raise NotImplementedError

    def answers(self) -> bool:
        """Whether the server serves now: :attr:`ready_url` answers 200 (a server that
        speaks no HTTP says otherwise)."""
        try:
            with urllib.request.urlopen(self.ready_url, timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def pick_ports(self) -> None:
        """Choose the server's ports again (after one was taken before the server bound it)."""
        raise NotImplementedError

    def start(self, timeout: float | None = None) -> Self:
        """Start the server and wait until it answers (:attr:`start_timeout_s`). A port
        taken between its choice and the server's bind (another process of the machine
        chose it too) is chosen again, up to :data:`BIND_ATTEMPTS` times."""
        timeout = self.start_timeout_s if timeout is None else timeout
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        for attempt in range(1, BIND_ATTEMPTS + 1):
            try:
                return self._start_once(timeout)
            except _PortTaken:
                self.stop()
                if attempt == BIND_ATTEMPTS:
                    raise
                self.pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> Self:
        self._dir = tempfile.TemporaryDirectory(prefix=f"alicia-{self.name}-")
        folder = Path(self._dir.name)
        command = self.command(folder)
        env = {**os.environ, **self.environment(folder)}
        self.log_path = folder / f"{self.name}.log"
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log_tail()
                error = _PortTaken if "address already in use" in tail else RuntimeError
                raise error(f"{self.name} exited with {self._proc.returncode}:\n{tail}")
            if self.answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer on {self.ready_url} in {timeout}s")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        """SIGKILL the server, as a machine that dies would (its files stay until :meth:`stop`)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its files."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
