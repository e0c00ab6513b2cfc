"""The one-command demo: livekit-server, the worker, a question, the analytics.

Steps, each undone on exit (also on Ctrl-C or failure):

1. livekit-server on 127.0.0.1 with dev keys (:class:`alicia.harness.LiveKitServer`);
2. the LLM: ``LLM_BASE_URL`` (+ ``LLM_MODEL``) if set, else the *demo model* — a local
   server replaying recorded reasoning streams (:mod:`alicia.harness.recorded_llm`), said plainly;
3. storage: ``DATABASE_URL`` if set, else SQLite under the data directory; migrations
   applied (:func:`alicia.agent.storage.migrate`);
4. the worker, ``python -m alicia.agent start``, as a subprocess (log in the data directory);
5. the question(s), asked with the ``alicia-client`` CLI, which streams the steps;
6. with ``--web``: the web debug page, until Ctrl-C;
7. the worker is stopped (it flushes storage), then ``python -m alicia.agent.storage.stats`` prints
   the analytics summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from rich.console import Console

if TYPE_CHECKING:
    from alicia.harness import LiveKitServer
    from alicia.harness.phoenix import Phoenix
    from alicia.harness.served import ServedProcess
    from alicia.web import WebSettings

Served = TypeVar("Served", bound="ServedProcess")

__all__ = ["DEFAULT_QUESTION", "build_parser", "default_data_dir", "main"]

DEFAULT_QUESTION: Final = "9.11 and 9.8, which is greater?"
DEMO_MODEL: Final = "alicia-demo-recorded"
ROOT: Final = Path(__file__).resolve().parent.parent
WORKER_STOP_SECONDS: Final = 20.0
REGISTERED_MARK: Final = "registered worker"
"""What livekit-agents logs once livekit-server accepted the worker."""


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/alicia-reasoning`` (``~/.local/share/alicia-reasoning``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "alicia-reasoning"


def build_parser() -> argparse.ArgumentParser:
    """The demo's options."""
    p = argparse.ArgumentParser(
        prog="python -m alicia.demo",
        description="Start livekit-server and the agent on loopback, ask a question with "
        "the CLI client, show the reasoning streaming, then print the analytics.",
    )
    p.add_argument(
        "--question",
        action="append",
        metavar="TEXT",
        help=f"question to ask (repeatable; default {DEFAULT_QUESTION!r})",
    )
    p.add_argument("--web", action="store_true", help="keep the web debug page up until Ctrl-C")
    p.add_argument(
        "--voice",
        action="store_true",
        help="ask by voice (offline speech: espeak-ng, pocketsphinx, Silero VAD) and record "
        "the spoken answer",
    )
    p.add_argument("--web-port", type=int, default=8080, help="web page port (0 = any)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"where the SQLite database and logs go (default {default_data_dir()})",
    )
    p.add_argument("--hide-reasoning", action="store_true", help="ask with reasoning hidden")
    p.add_argument(
        "--traces",
        action="store_true",
        help="send the worker's traces to a local Arize Phoenix (installed into a virtualenv "
        "of its own when first needed), print each turn's trace URL and keep Phoenix up until "
        "Ctrl-C",
    )
    p.add_argument(
        "--chunk-delay",
        type=float,
        default=0.02,
        help="demo model: seconds between streamed chunks (default 0.02)",
    )
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per answer")
    return p


class DemoError(Exception):
    """The demo cannot go on; the message says why."""


@contextlib.asynccontextmanager
async def _served(server: Served, console: Console, line: str) -> AsyncIterator[Served]:
    """``server`` started (in a thread: it waits for the server to answer), then
    ``line`` (formatted with the started server) printed; stopped on exit."""
    await asyncio.to_thread(server.start)
    try:
        console.print(line.format(server=server))
        yield server
    finally:
        await asyncio.to_thread(server.stop)


def _livekit(console: Console) -> contextlib.AbstractAsyncContextManager[LiveKitServer]:
    from alicia.harness import LiveKitServer

    line = "  livekit-server  {server.url} (loopback only, dev keys)"
    return _served(LiveKitServer(), console, line)


async def _until_stopped() -> None:
    """Wait for Ctrl-C (or SIGTERM)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _close_room(server: LiveKitServer, room: str) -> None:
    """Delete the room, so the worker's job for it ends (and the worker can stop)."""
    from livekit import api

    async with api.LiveKitAPI(server.http_url, server.api_key, server.api_secret) as lk:
        with contextlib.suppress(api.TwirpError):
            await lk.room.delete_room(api.DeleteRoomRequest(room=room))


@contextlib.asynccontextmanager
async def _llm(
    console: Console, chunk_delay: float, voice: bool = False
) -> AsyncIterator[dict[str, str]]:
    base = os.environ.get("LLM_BASE_URL", "").strip()
    if base:
        model = os.environ.get("LLM_MODEL", "").strip()
        if not model:
            raise DemoError("LLM_BASE_URL is set but LLM_MODEL is not (e.g. LLM_MODEL=qwen3:8b)")
        console.print(f"  LLM             [bold]{model}[/] at {base} (from LLM_BASE_URL)")
        yield {"LLM_BASE_URL": base, "LLM_MODEL": model}
        return
    from alicia.harness.recorded_llm import RecordedLLM

    async with RecordedLLM(chunk_delay=chunk_delay) as llm:
        if voice:  # a spoken question is heard approximately: answer with one recording
            from .voice import VOICE_STREAM

            llm.route_model(DEMO_MODEL, VOICE_STREAM)
        console.print(
            "  LLM             [bold yellow]demo model[/]: LLM_BASE_URL is not set, so this "
            f"run replays recorded reasoning streams from a local server at {llm.base_url}.\n"
            "                  It is not a real model: it answers from recordings, whatever "
            "you ask.\n"
            "                  For a real one: LLM_BASE_URL=http://127.0.0.1:11434/v1 "
            "LLM_MODEL=qwen3:8b ./scripts/demo  (Ollama)"
        )
        yield {"LLM_BASE_URL": llm.base_url, "LLM_MODEL": DEMO_MODEL, "LLM_API_KEY": "demo"}


async def _storage(console: Console, data_dir: Path) -> str:
    from sqlalchemy.engine import make_url

    from alicia.agent.storage.writer import migrate

    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        url = f"sqlite+aiosqlite:///{data_dir / 'alicia-demo.db'}"
    await migrate(url)
    shown = make_url(url).render_as_string(hide_password=True)
    console.print(f"  storage         {shown} (migrations applied)")
    return url


@contextlib.asynccontextmanager
async def _worker(console: Console, env: dict[str, str], log: Path) -> AsyncIterator[None]:
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "alicia.agent",
            "start",
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            process_group=0,
        )
    console.print(f"  worker          python -m alicia.agent start (pid {proc.pid}, log {log})")
    try:
        await wait_registered(proc, log)
        yield
    finally:
        await _stop(proc)
    if proc.returncode not in (0, -signal.SIGINT, -signal.SIGTERM):
        console.print(f"[yellow]  worker exited with {proc.returncode}; see {log}[/]")


async def wait_registered(proc: asyncio.subprocess.Process, log: Path, limit: float = 90.0) -> None:
    """Wait until the worker logged that livekit-server registered it.

    Automatic dispatch happens when a room is created, so a room made before the
    worker registered would never get an agent.
    """
    offset = await asyncio.to_thread(lambda: log.stat().st_size if log.exists() else 0)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        text = await asyncio.to_thread(_read_from, log, offset)
        if REGISTERED_MARK in text:
            return
        if proc.returncode is not None:
            raise DemoError(f"the worker exited with {proc.returncode}: see {log}")
        await asyncio.sleep(0.1)
    raise DemoError(f"the worker did not register with livekit-server in {limit:g}s: see {log}")


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGINT (graceful: flushes storage), then SIGKILL if it takes too long."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(proc.wait(), WORKER_STOP_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def _run_tool(console: Console, argv: list[str], env: dict[str, str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL
    )
    try:
        return await proc.wait()
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


def page_url(port: int, room: str, settings: WebSettings) -> str:
    """The debug page for ``room`` with a token the demo minted for it: the token endpoint
    stays off (a secure default), so the page joins with this one (``#token=&url=``),
    which carries the debugging grant (``alicia.reasoning=full``)."""
    from urllib.parse import urlencode

    from livekit import api

    from alicia.protocol import new_id

    token = (
        api.AccessToken(settings.api_key, settings.api_secret)
        .with_identity(f"web-{new_id('u')}")
        .with_name("web debug page")
        .with_attributes(dict(settings.token_attributes) or {"alicia.reasoning": "full"})
        .with_grants(api.VideoGrants(room_join=True, room=room))
        .to_jwt()
    )
    fragment = urlencode({"token": token, "url": settings.livekit_url})
    return f"http://127.0.0.1:{port}/?room={room}&autoconnect=1#{fragment}"


async def _web(console: Console, env: dict[str, str], port: int, room: str) -> None:
    import uvicorn

    from alicia.agent.gate.http import serve_options
    from alicia.harness.ports import free_port
    from alicia.web import WebSettings, create_app

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # the demo handles Ctrl-C itself, then prints the analytics

    settings = WebSettings.from_env(env)
    config = uvicorn.Config(
        create_app(settings),
        **serve_options(host="127.0.0.1", port=port or free_port(), log_level="warning"),
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise DemoError(f"the web page could not listen on port {config.port}")
            await asyncio.sleep(0.05)
        url = page_url(config.port, room, settings)
        console.print(f"\n[bold]Web debug page:[/] {url}", soft_wrap=True)
        console.print("  (its token is in the fragment, with the debugging grant) — Ctrl-C to stop")
        await _until_stopped()
    finally:
        server.should_exit = True
        await task


async def run(args: argparse.Namespace) -> int:
    """Run the demo; the process exit code."""
    from alicia.protocol.ids import CONVERSATION, new_id

    console = Console(highlight=False, soft_wrap=True)
    started = time.monotonic()
    data_dir: Path = args.data_dir
    questions: list[str] = args.question or [DEFAULT_QUESTION]
    room = new_id(CONVERSATION)
    console.print("[bold]Alicia reasoning demo[/] — everything runs on this machine, on 127.0.0.1")
    async with contextlib.AsyncExitStack() as stack:
        livekit = await stack.enter_async_context(_livekit(console))
        llm_env = await stack.enter_async_context(_llm(console, args.chunk_delay, args.voice))
        db_url = await _storage(console, data_dir)
        env = {
            **os.environ,
            **livekit.env(),
            **llm_env,
            "DATABASE_URL": db_url,
            "ALICIA_LOAD_THRESHOLD": os.environ.get("ALICIA_LOAD_THRESHOLD", "inf"),
            # The worker's load is its own rooms, not this machine's CPU (which the demo's
            # other processes share): livekit-server skips a worker at load >= 1.
            "ALICIA_MAX_ROOMS": os.environ.get("ALICIA_MAX_ROOMS", "50"),
            "ALICIA_JOB_EXECUTOR": os.environ.get("ALICIA_JOB_EXECUTOR", "thread"),
            "PYTHONUNBUFFERED": "1",
        }
        if args.traces:
            from .traces import phoenix, traced_env

            traces = await stack.enter_async_context(phoenix(console))
            env.update(traced_env(traces, env))
        if args.voice:
            env["ALICIA_VOICE"] = "offline"
            # The demo's model answers about 1 s after the turn: a progress cue would be cut
            # after a word or two, glued to the answer the demo records and transcribes.
            env["ALICIA_SPOKEN_PROGRESS"] = os.environ.get("ALICIA_SPOKEN_PROGRESS", "off")
        worker = _worker(console, env, data_dir / "worker.log")
        await stack.enter_async_context(worker)
        if args.voice:
            from .voice import VOICE_QUESTION, ask_by_voice

            question = args.question[0] if args.question else VOICE_QUESTION
            code = await ask_by_voice(console, livekit, room, question, data_dir)
            if code != 0:
                console.print(f"[red]the voice turn did not complete; worker log: {data_dir}[/]")
                return code
            await _close_room(livekit, room)
            return await _finish(console, stack, env, started, data_dir)
        client = [
            str(Path(sys.executable).with_name("alicia-client")),
            "--room",
            room,
            "--identity",
            "demo-user",
            "--agent-timeout",
            "90",
            "--timeout",
            str(args.timeout),
            "--exit-after",
        ]
        if args.hide_reasoning:
            client.append("--hide-reasoning")
        for q in questions:
            client += ["--say", q]
        shown = shlex.join(["alicia-client", *client[1:]])
        console.print(f"\n[bold]Asking with the CLI client[/]  [dim]$ {shown}[/]\n")
        code = await _run_tool(console, client, env)
        if code != 0:
            console.print(f"[red]the client exited with {code}; worker log: {data_dir}[/]")
            return code
        if args.traces:
            await _show_traces(console, traces, room, len(questions))
            if not args.web:
                console.print("  Ctrl-C to stop")
                await _until_stopped()
        if args.web:
            await _web(console, env, args.web_port, room)
        await _close_room(livekit, room)
        return await _finish(console, stack, env, started, data_dir)


async def _show_traces(console: Console, server: Phoenix, room: str, turns: int) -> None:
    """One line per turn with its trace's URL in Phoenix's UI."""
    from .traces import DEMO_PROJECT, TRACE_LINE, turn_traces

    found = await turn_traces(server, room, turns)
    console.print()
    for trace_id in found:
        console.print(f"[bold]{TRACE_LINE}[/]{server.trace_url(trace_id)}", soft_wrap=True)
    if len(found) < turns:
        console.print(f"[yellow]  {turns - len(found)} turn(s) not in Phoenix yet[/]")
    console.print(
        f"  (Arize Phoenix: the turn is an LLM span `chat {{model}}` with its token counts and "
        f"one event per step; every trace: {server.url}/redirects/projects/{DEMO_PROJECT})"
    )


async def _finish(
    console: Console,
    stack: contextlib.AsyncExitStack,
    env: dict[str, str],
    started: float,
    data_dir: Path,
) -> int:
    """Stop the worker (it flushes what it stored), print the analytics, say goodbye."""
    await stack.aclose()
    console.print(
        "\n[bold]Analytics from storage[/]  [dim]$ python -m alicia.agent.storage.stats[/]\n"
    )
    stats_env = env if sys.stdout.isatty() else {**env, "COLUMNS": env.get("COLUMNS", "160")}
    code = await _run_tool(console, [sys.executable, "-m", "alicia.agent.storage.stats"], stats_env)
    if code != 0:
        console.print(f"[red]agent.storage.stats exited with {code}[/]")
        return code
    elapsed = time.monotonic() - started
    console.print(
        f"\n[bold green]Demo finished in {elapsed:.1f} s[/]; livekit-server, the worker and "
        f"the LLM server were stopped. Data kept in {data_dir}."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m alicia.demo`` (and ``./scripts/demo``)."""
    args = build_parser().parse_args(argv)
    if os.environ.get("LLM_BASE_URL", "").strip() and not os.environ.get("LLM_MODEL", "").strip():
        Console(stderr=True).print(
            "[red]demo: LLM_BASE_URL is set but LLM_MODEL is not (e.g. LLM_MODEL=qwen3:8b)[/]"
        )
        return 2
    args.data_dir = (args.data_dir or default_data_dir()).resolve()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(run(args))
    except DemoError as exc:
        Console(stderr=True).print(f"[red]demo: {exc}[/]")
        return 2
    except KeyboardInterrupt:
        return 130
