"""Worker processes forked from one that has already imported livekit-agents.

A worker's first CPU second and a half goes to importing livekit-agents (``openai``'s
types alone are a third of it); the suite starts a few hundred workers on 2 cores. So a
test process starts, once, a **zygote**: ``python -m tests.support.zygote``, which imports
the third-party modules every worker imports (:data:`PRELOADED`: none of ours, nothing
that starts a thread) and then waits. Asked for a process, it forks; the child takes the
request's environment (all of it: ``os.environ`` is replaced), folder, argument list and
log file, makes its own process group (as ``process_group=0``), and runs the module as
``python -m`` does (:func:`runpy.run_module` as ``__main__``), so the worker runs the
same code from ``main()`` on. The zygote reaps its children and reports each exit
status; :class:`ForkedProcess` is the test's handle, with the
:class:`asyncio.subprocess.Process` calls the tests use.

What it cannot give: a module that reads the environment when it is imported reads the
zygote's. Of :data:`PRELOADED`'s, only ``prometheus_client`` matters here (it picks
multiprocess mode at import, from ``PROMETHEUS_MULTIPROC_DIR``): :func:`forkable` says
no to such an environment, and the caller runs the command itself. The tests of the
command as a newcomer runs it (the process executor's default path) run it too.

A forked worker's job processes come from the zygote too: livekit-agents starts them from
a multiprocessing forkserver, a new interpreter that imports livekit-agents again (about
2.5 CPU-s; the suite starts dozens). In a forked worker, :func:`_forkservers_from_zygote`
has the zygote fork that forkserver instead (over a Unix socket, the forkserver's
listener, its "alive" pipe and the worker's output passed as file descriptors), in the
worker's process group, environment and folder; it then runs
``multiprocessing.forkserver.main`` as a spawned one would, preloads and all.

Only under pytest (``PYTEST_VERSION`` is set, in its subprocesses too):
a benchmark run by hand executes its workers. ``ALICIA_TEST_FORK=0`` turns it off,
``1`` on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

__all__ = [
    "PRELOADED",
    "ForkedProcess",
    "ModuleProcess",
    "Zygote",
    "forkable",
    "python_module",
    "zygote",
]

PRELOADED: Final = (
    "livekit.agents",
    "livekit.agents.cli",
    "livekit.api",
    "livekit.rtc",
    "livekit.plugins.openai",
    "openai",
    "aiohttp",
    "msgspec",
    "sqlalchemy.ext.asyncio",
    "asyncpg",
)
"""What the zygote imports before it forks (what a text worker imports, none of ours)."""
_ANSWER_WITHIN: Final = 120.0
"""How long a request waits for the zygote's fork (its first, for the zygote's imports)."""
_UNFORKABLE: Final = ("ALICIA_METRICS_PORT", "PROMETHEUS_MULTIPROC_DIR")
"""An environment with one of these needs ``prometheus_client`` imported afresh."""


def forkable(env: Mapping[str, str]) -> bool:
    """Whether a process with ``env`` may be forked from the zygote (see the module)."""
    default = "1" if "PYTEST_VERSION" in os.environ else "0"  # a benchmark run by hand: no
    if os.environ.get("ALICIA_TEST_FORK", default) != "1":
        return False
    return not any(env.get(k) for k in _UNFORKABLE)


class ForkedProcess:
    """A process the zygote forked: its pid, and its exit status once the zygote reaped
    it (``-N`` for signal N, as :class:`asyncio.subprocess.Process`)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._ended = threading.Event()
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        """The exit status, or ``None`` while it runs."""
        return self._code

    def _exited(self, code: int) -> None:
        self._code = code
        self._ended.set()

    async def wait(self) -> int:
        """Until it ended; its exit status."""
        while not self._ended.is_set():
            await asyncio.sleep(0.05)
        assert self._code is not None
        return self._code

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the process (nothing once it is reaped)."""
        if self._code is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's side: the zygote's process, one request at a time."""

    def __init__(self, cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=str(cwd),
            env=env,
            process_group=0,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._lock = threading.Lock()
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}
        self._replies: dict[int | None, dict[str, Any]] = {}  # by request id; None: gone
        self._abandoned: set[int] = set()  # requests that timed out: their child is killed
        self._next_id = 0
        self._reply = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            msg = json.loads(line)
            if "exit" in msg:
                with self._reply:
                    child = self._children.pop(msg["exit"], None)
                    if child is None:
                        self._early[msg["exit"]] = msg["code"]
                if child is not None:
                    child._exited(msg["code"])
                continue
            with self._reply:
                rid = msg.get("id")
                if rid in self._abandoned:  # its caller gave up: nobody will stop it
                    self._abandoned.discard(rid)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(int(msg["pid"]), signal.SIGKILL)
                    continue
                self._replies[rid] = msg
                self._reply.notify_all()
        with self._reply:  # the zygote is gone: so are its children's statuses
            self._replies[None] = {"error": "the zygote exited"}
            self._reply.notify_all()
            for child in self._children.values():
                child._exited(-signal.SIGKILL)

    def _spawn(
        self, module: str, args: Sequence[str], env: Mapping[str, str], cwd: str, log: Path
    ) -> ForkedProcess:
        request: dict[str, Any] = {"module": module, "args": list(args), "env": dict(env)}
        request |= {"cwd": cwd, "log": str(log)}
        log.touch()  # read by the caller at once
        with self._lock:
            self._next_id += 1
            rid = request["id"] = self._next_id
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
            with self._reply:
                # The first request waits for the zygote's imports: 30 s was too short on
                # 2 cores with two CPU hogs beside five test processes
                if not self._reply.wait_for(
                    lambda: rid in self._replies or None in self._replies, _ANSWER_WITHIN
                ):
                    self._abandoned.add(rid)  # the late child is killed on arrival
                    raise RuntimeError(f"the zygote did not answer in {_ANSWER_WITHIN:.0f} s")
                reply = self._replies.pop(rid, None) or self._replies[None]
                if "pid" not in reply:
                    raise RuntimeError(f"the zygote could not fork: {reply}")
                child = ForkedProcess(int(reply["pid"]))
                code = self._early.pop(child.pid, None)
                if code is None:
                    self._children[child.pid] = child
        if code is not None:
            child._exited(code)
        return child

    async def spawn(
        self, module: str, args: Sequence[str], *, env: Mapping[str, str], cwd: str, log: Path
    ) -> ForkedProcess:
        """``python -m module *args`` with ``env`` in ``cwd``, its output to ``log``,
        forked from the zygote."""
        return await asyncio.to_thread(self._spawn, module, args, env, cwd, log)

    def close(self) -> None:
        """Stop the zygote (it kills the process groups of its children still running)."""
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_ZYGOTE: Zygote | None = None
_STARTING = threading.Lock()


def zygote(cwd: Path) -> Zygote:
    """This process's zygote, started on first use and stopped at exit."""
    global _ZYGOTE
    with _STARTING:
        if _ZYGOTE is None:
            import atexit

            _ZYGOTE = Zygote(cwd)
            atexit.register(_ZYGOTE.close)
        return _ZYGOTE


ModuleProcess = asyncio.subprocess.Process | ForkedProcess
"""A ``python -m`` process a test started, executed or forked."""


async def python_module(
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    log: Path,
    cwd: Path,
    fork: bool = True,
) -> ModuleProcess:
    """``python -m module *args`` in its own process group, its output to ``log``:
    forked from this process's zygote when ``fork`` and :func:`forkable`, else executed
    (a test of the command as printed asks ``fork=False``)."""
    if fork and forkable(env):
        return await zygote(cwd).spawn(module, args, env=env, cwd=str(cwd), log=log)
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args, env=dict(env), cwd=str(cwd),
            stdout=out, stderr=asyncio.subprocess.STDOUT, process_group=0,
        )  # fmt: skip


# --- the zygote's own side -------------------------------------------------------------


def _serve() -> dict[str, Any] | None:
    """Fork on each request; in the parent never return (until stdin ends: ``None``), in
    a child return its request."""
    # numpy's OpenBLAS starts a thread pool at import (one thread on 2 cores): one
    # thread of BLAS in the workers, and nothing but this thread to fork
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    for name in PRELOADED:
        __import__(name)
    tasks = len(os.listdir("/proc/self/task"))
    if tasks != 1:  # a thread would not survive a fork
        raise SystemExit(f"zygote: {tasks} threads after the imports; fork is unsafe")
    out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # what the imports print would break the replies
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    children: set[int] = set()
    servers: set[int] = set()  # forkservers for forked workers: no one waits for them
    folder = tempfile.mkdtemp(prefix="alicia-zygote-")
    global _SOCKET
    _SOCKET = os.path.join(folder, "forkservers")
    requests = socket.socket(socket.AF_UNIX)
    requests.bind(_SOCKET)
    requests.listen()
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    sel.register(requests, selectors.EVENT_READ)
    pending = b""

    def reply(msg: dict[str, Any]) -> None:
        os.write(out, json.dumps(msg).encode() + b"\n")

    def reap() -> None:
        while children or servers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in servers:
                servers.discard(pid)
                continue
            children.discard(pid)
            reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    def in_child() -> None:
        sel.close()
        requests.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (wake_r, wake_w, out, devnull):
            os.close(fd)

    while True:
        for key, _ in sel.select():
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                reap()
                continue
            if key.fileobj is requests:
                conn, _ = requests.accept()
                with conn:
                    try:
                        server = _forkserver_request(conn)
                    except (OSError, ValueError, RuntimeError, EOFError):
                        continue  # the worker sees its connection closed: its error
                    pid = os.fork()
                    if pid == 0:
                        in_child()
                        conn.close()
                        _run_forkserver(*server)  # never returns
                    servers.add(pid)
                    for fd in server[1]:
                        os.close(fd)
                    with contextlib.suppress(OSError):
                        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                continue
            chunk = os.read(0, 1 << 20)
            if not chunk:  # the test process is gone: so go the children
                for pid in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.unlink(_SOCKET)
                    os.rmdir(folder)
                return None
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request: dict[str, Any] = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    in_child()
                    return request
                with contextlib.suppress(OSError):  # the child does too: whoever is first
                    os.setpgid(pid, pid)
                children.add(pid)
                reply({"pid": pid, "id": request.get("id")})
        reap()


_SOCKET: str | None = None
"""Where the zygote takes forked workers' requests for a forkserver (set in the zygote)."""
_SERVER_FDS: Final = 4
"""A forkserver request's descriptors: its listener, its "alive" pipe, stdout, stderr."""


def _forkserver_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A forked worker's request for a forkserver: its settings and descriptors."""
    from multiprocessing import reduction

    conn.settimeout(10)
    fds = reduction.recvfds(conn, _SERVER_FDS)
    try:
        request = _read_json_line(conn)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def _read_json_line(conn: socket.socket) -> dict[str, Any]:
    """One newline-ended JSON object from ``conn`` (EOFError if it closes first)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise EOFError("the message ended early")
        data += chunk
    message: dict[str, Any] = json.loads(data)
    return message


def _settle(request: dict[str, Any], out: int, err: int, argv: list[str]) -> None:
    """In a forked child: stdin from /dev/null, ``out`` and ``err`` as stdout and stderr
    (closed here), the request's folder and environment, ``argv``."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # not the zygote's requests
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {null, out, err}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = argv


def _run_forkserver(request: dict[str, Any], fds: list[int]) -> None:
    """In the zygote's child: become the worker's forkserver (the request's process group,
    folder, environment and output) and serve; exit when it ends."""
    listener, alive_r, out, err = fds
    code = 1
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, int(request["pgid"]))
        _settle(request, out, err, list(request["argv"]))
        from multiprocessing import forkserver

        forkserver.main(listener, alive_r, request["preload"], **request["data"])
        code = 0
    except SystemExit as exc:  # the forkserver's end: its worker is gone
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _forkservers_from_zygote(address: str) -> None:
    """In a forked worker: multiprocessing's forkserver is forked by the zygote at
    ``address`` instead of spawned (see the module). Replaces
    ``ForkServer.ensure_running``; the server is not this process's child, so it is alive
    while its pid is."""
    from multiprocessing import connection, forkserver, reduction, resource_tracker, spawn, util

    def ensure_running(self: Any) -> None:
        with self._lock:
            resource_tracker.ensure_running()
            if self._forkserver_pid is not None:
                try:
                    os.kill(self._forkserver_pid, 0)
                    return
                except ProcessLookupError:  # gone: start another
                    os.close(self._forkserver_alive_fd)
                    self._forkserver_address = None
                    self._forkserver_alive_fd = None
                    self._forkserver_pid = None
            data: dict[str, Any] = {}
            if self._preload_modules:
                prepared = spawn.get_preparation_data("ignore")
                data = {k: v for k, v in prepared.items() if k in ("main_path", "sys_path")}
            request = {
                "preload": list(self._preload_modules),
                "data": data,
                "pgid": os.getpgid(0),
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "argv": list(sys.argv),
            }
            with socket.socket(socket.AF_UNIX) as listener:
                server_address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
                listener.bind(server_address)
                if not util.is_abstract_socket_namespace(server_address):
                    os.chmod(server_address, 0o600)
                listener.listen()
                alive_r, alive_w = os.pipe()
                try:
                    with socket.socket(socket.AF_UNIX) as conn:
                        conn.settimeout(60)
                        conn.connect(address)
                        reduction.sendfds(conn, [listener.fileno(), alive_r, 1, 2])
                        conn.sendall(json.dumps(request).encode() + b"\n")
                        pid = int(_read_json_line(conn)["pid"])
                except BaseException:
                    os.close(alive_w)
                    raise
                finally:
                    os.close(alive_r)
                self._forkserver_address = server_address
                self._forkserver_alive_fd = alive_w
                self._forkserver_pid = pid

    forkserver.ForkServer.ensure_running = ensure_running  # type: ignore[method-assign]


def _become(request: dict[str, Any]) -> None:
    """In the forked child: the request's process group, folder, files and environment."""
    os.setpgid(0, 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _settle(request, log, log, [request["module"], *request["args"]])
    if _SOCKET is not None and os.environ.get("ALICIA_TEST_FORK_SERVERS", "1") == "1":
        _forkservers_from_zygote(_SOCKET)


if __name__ == "__main__":
    _request = _serve()
    if _request is not None:
        import runpy

        _become(_request)
        runpy.run_module(_request["module"], run_name="__main__", alter_sys=True)
