"""A throwaway PostgreSQL cluster (Debian's ``postgresql``) on a free loopback port."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .ports import free_port

__all__ = ["PostgresServer", "pg_bindir"]


def pg_bindir() -> Path:
    """The folder holding ``initdb``/``pg_ctl``; a clear error if postgresql is missing."""
    override = os.environ.get("PG_BINDIR")
    if override:
        return Path(override)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise RuntimeError(
        "PostgreSQL server binaries not found: run ./scripts/setup "
        "(installs Debian's postgresql) or set PG_BINDIR"
    )


def _as_postgres_user() -> list[str]:
    # initdb refuses to run as root; Debian's package creates the `postgres` user.
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


class PostgresServer:
    """``initdb`` + ``pg_ctl start`` in a temporary directory; trust auth on 127.0.0.1."""

    def __init__(self, *, user: str = "alicia", database: str = "alicia") -> None:
        self.port = free_port()
        self.user = user
        self.database = database
        self._dir: str | None = None
        self._bin = pg_bindir()

    @property
    def datadir(self) -> Path:
        """The cluster's data directory."""
        if self._dir is None:
            raise RuntimeError("PostgresServer not started")
        return Path(self._dir) / "data"

    @property
    def pid(self) -> int:
        """The postmaster's process id (its backends are its children), while it runs."""
        return int((self.datadir / "postmaster.pid").read_text().split()[0])

    def url(self, driver: str = "postgresql+asyncpg") -> str:
        """SQLAlchemy URL, e.g. ``postgresql+asyncpg://alicia@127.0.0.1:5432/alicia``."""
        return f"{driver}://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def dsn(self) -> str:
        """libpq/asyncpg DSN."""
        return self.url("postgresql")

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*_as_postgres_user(), *args], check=True, capture_output=True, text=True
        )

    def start(self, timeout: float = 30.0) -> PostgresServer:
        """Create the cluster and database, start the server, wait for readiness."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="alicia-pg-")
            os.chmod(self._dir, 0o777)
            if os.geteuid() == 0:
                shutil.chown(self._dir, "postgres", "postgres")
            self._run(
                str(self._bin / "initdb"),
                "-D", str(self.datadir),
                "-U", self.user,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            )  # fmt: skip
        self.resume(timeout)
        self._ensure_database()
        return self

    def resume(self, timeout: float = 30.0) -> None:
        """(Re)start the server on the same data directory and port."""
        sockdir = Path(self._dir or "") / "sock"
        sockdir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(sockdir, "postgres", "postgres")
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={sockdir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self._bin / "pg_ctl"),
            "-D", str(self.datadir),
            "-o", opts,
            "-l", str(Path(self._dir or "") / "postgres.log"),
            "-w", "-t", str(int(timeout)),
            "start",
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            probe = subprocess.run(
                [str(self._bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError(f"postgres did not become ready on port {self.port}")

    def pause(self, mode: str = "fast") -> None:
        """Stop the server but keep the data (for outage tests)."""
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def _ensure_database(self) -> None:
        psql = [
            str(self._bin / "psql"),
            "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "postgres",
            "-tAc",
        ]  # fmt: skip
        exists = subprocess.run(
            [*psql, f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        if exists != "1":
            subprocess.run(
                [*psql, f'CREATE DATABASE "{self.database}"'], check=True, capture_output=True
            )

    def stop(self) -> None:
        """Stop the server and delete the cluster."""
        if self._dir is None:
            return
        with contextlib.suppress(subprocess.CalledProcessError):
            self.pause("immediate")
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
