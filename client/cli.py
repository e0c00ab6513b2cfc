"""``alicia-client``: chat with the agent from a terminal and watch it reason.

Joins a room, performs the Configuration handshake, sends each ``--say`` message and
then every line read from standard input (TTY or not), rendering reasoning steps,
tool calls and the answer as they arrive. Line commands: ``/r`` (or ``:reasoning``)
toggles show-reasoning with a Configuration update, ``/reasoning on|off`` sets it,
``/quit`` leaves. ``--json`` prints every envelope (sent and received) as one JSON
object per line instead.

The client follows the agent: when it leaves, a status line says the client waits (up
to ``--agent-timeout`` seconds) for another; when another agent takes over, the client
resumes with it (PROTOCOL.md §4.9) and says so ("the agent was replaced (agent-…);
resumed"). Only a participant of kind AGENT (with ``--agent-name``, the one dispatched
under that name) is ever shown.

Exit codes: 0 ok, 2 usage, 3 cannot connect, 4 no agent / handshake failed (also: the
agent left and none took over), 5 a turn timed out or ended with an agent error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final

from alicia.protocol import Envelope
from alicia.protocol.ids import CONVERSATION, new_id

__all__ = [
    "EXIT_AGENT",
    "EXIT_CONNECT",
    "EXIT_TURN",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

EXIT_USAGE: Final = 2
EXIT_CONNECT: Final = 3
EXIT_AGENT: Final = 4
EXIT_TURN: Final = 5

TOGGLE_COMMANDS: Final = frozenset({"/r", "/reasoning", ":r", ":reasoning"})
QUIT_COMMANDS: Final = frozenset({"/q", "/quit", "/exit", ":q", ":quit"})
_EOF: Final = object()


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    p = argparse.ArgumentParser(
        prog="alicia-client",
        description="Chat with the Alicia agent over LiveKit and watch its reasoning steps.",
    )
    p.add_argument("--url", default=os.environ.get("LIVEKIT_URL"), help="LiveKit ws URL")
    p.add_argument("--room", help="room (= conversation) to join; default: a new conv_… name")
    p.add_argument("--identity", default=None, help="participant identity (default cli-…)")
    p.add_argument("--token", help="join token (default: minted from the API key/secret)")
    p.add_argument("--api-key", default=os.environ.get("LIVEKIT_API_KEY"))
    p.add_argument("--api-secret", default=os.environ.get("LIVEKIT_API_SECRET"))
    p.add_argument(
        "--say",
        action="append",
        default=[],
        metavar="TEXT",
        help="send this message (repeatable; line commands such as /r work too)",
    )
    p.add_argument(
        "--exit-after",
        action="store_true",
        help="exit once the --say messages are answered instead of reading stdin",
    )
    show = p.add_mutually_exclusive_group()
    show.add_argument("--show-reasoning", dest="show_reasoning", action="store_true", default=True)
    show.add_argument("--hide-reasoning", dest="show_reasoning", action="store_false")
    p.add_argument(
        "--grant-reasoning",
        choices=["full", "summary", "encrypted", "none"],
        default="full",
        help="with --api-key/--api-secret: the reasoning level the minted token grants "
        "(default full; the server decides what the client sees)",
    )
    p.add_argument(
        "--agent-name",
        default=os.environ.get("ALICIA_AGENT_NAME") or None,
        help="trust only the agent dispatched under this name (explicit dispatch)",
    )
    p.add_argument(
        "--print-token",
        action="store_true",
        help="print the token minted for --room/--identity/--grant-reasoning and exit: a "
        "debugging bearer token for the AG-UI endpoint (thread = --room)",
    )
    p.add_argument("--json", action="store_true", help="print envelopes as JSON lines")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per answer")
    p.add_argument(
        "--agent-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the agent (and for another when it leaves)",
    )
    return p


def _stdin_lines(loop: asyncio.AbstractEventLoop) -> asyncio.Queue[object]:
    """Read stdin in a daemon thread (works with pipes and TTYs); bounded queue."""
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=64)

    def put(item: object) -> None:
        asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

    def pump() -> None:
        try:
            for line in sys.stdin:
                put(line.rstrip("\r\n"))
        except (OSError, ValueError, RuntimeError):
            pass
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            put(_EOF)

    threading.Thread(target=pump, name="alicia-client-stdin", daemon=True).start()
    return queue


async def run(args: argparse.Namespace) -> int:
    """Run the client with parsed ``args``; the process exit code."""
    import msgspec
    from rich.console import Console

    from .render import TurnRenderer, agent_status
    from .session import (
        AgentMissingError,
        ClientSession,
        ConnectError,
        HandshakeError,
        TurnTimeoutError,
    )
    from .tokens import mint_token, valid_name

    err = Console(stderr=True, soft_wrap=True)
    out = Console(soft_wrap=True, highlight=False)
    if not args.url and not args.print_token:
        err.print("[red]error:[/] no LiveKit URL: pass --url or set LIVEKIT_URL")
        return EXIT_USAGE
    room = args.room or new_id(CONVERSATION)
    identity = args.identity or f"cli-{new_id('u')[2:12]}"
    token = args.token
    if token is None:
        if not (args.api_key and args.api_secret):
            err.print(
                "[red]error:[/] no --token and no API key/secret "
                "(set LIVEKIT_API_KEY and LIVEKIT_API_SECRET)"
            )
            return EXIT_USAGE
        if not (valid_name(room) and valid_name(identity)):
            err.print("[red]error:[/] room and identity must be 1-128 of [A-Za-z0-9_.-]")
            return EXIT_USAGE
        token = mint_token(
            args.api_key,
            args.api_secret,
            room=room,
            identity=identity,
            attributes={"alicia.reasoning": args.grant_reasoning},
        )
    if args.print_token:
        sys.stdout.write(token + "\n")
        return 0

    status = err if args.json else out
    renderer = TurnRenderer(out)
    session = ClientSession(
        show_reasoning=args.show_reasoning,
        agent_name=args.agent_name,
        agent_rejoin_timeout=args.agent_timeout,
    )
    session.on_agent(lambda event: status.print(agent_status(event)))
    if args.json:

        def print_json(env: Envelope[Any]) -> None:
            sys.stdout.write(msgspec.json.encode(env).decode() + "\n")
            sys.stdout.flush()

        session.on_envelope(print_json)
    else:
        session.on_event(renderer)

    async with session:
        try:
            await session.connect(args.url, token)
        except ConnectError as exc:
            err.print(f"[red]error:[/] {exc}")
            return EXIT_CONNECT
        status.print(f"[dim]joined room {room} as {identity}; waiting for the agent…[/]")
        try:
            agent = await session.wait_for_agent(args.agent_timeout)
            config = await session.handshake()
        except (AgentMissingError, HandshakeError) as exc:
            err.print(f"[red]error:[/] {exc}")
            return EXIT_AGENT
        shown = "shown" if session.show_reasoning else "hidden"
        features = ", ".join(config.features or []) or "none"
        status.print(
            f"[dim]agent {agent} ready: conversation {session.conversation_id}, "
            f"server features: {features}; reasoning {shown} (/r toggles)[/]"
        )
        if session.show_reasoning:
            # The server decides what this participant sees; say which level it granted.
            granted = set(config.features or [])
            if "reasoning_steps" in granted:
                pass
            elif "reasoning_summary" in granted:
                status.print("[yellow]reasoning: summary (the full steps only encrypted)[/]")
            elif "reasoning_encrypted" in granted:
                status.print("[yellow]reasoning: encrypted (steps are opaque values)[/]")
            else:
                status.print("[yellow]reasoning: not granted to this participant[/]")

        async def handle(line: str, *, echo: bool = True) -> int | None:
            text = line.strip()
            if not text:
                return None
            cmd = text.lower()
            if cmd in QUIT_COMMANDS:
                return 0
            if cmd in TOGGLE_COMMANDS or cmd.startswith(("/reasoning ", ":reasoning ")):
                arg = cmd.split(maxsplit=1)[1] if " " in cmd else ""
                want = {"on": True, "off": False}.get(arg, not session.show_reasoning)
                try:
                    await session.set_show_reasoning(want)
                except (AgentMissingError, HandshakeError) as exc:
                    err.print(f"[red]error:[/] {exc}")
                    return EXIT_AGENT
                status.print(f"[dim]reasoning {'shown' if want else 'hidden'}[/]")
                return None
            if echo and not args.json:
                renderer.question(text)
            try:
                turn = await session.ask(text)
                await session.wait_turn(turn, timeout=args.timeout)
            except TurnTimeoutError as exc:
                err.print(f"[red]error:[/] {exc}")
                return EXIT_TURN
            except (AgentMissingError, HandshakeError) as exc:
                err.print(f"[red]error:[/] {exc}")
                return EXIT_AGENT
            if turn.error is not None and not turn.error.recoverable:
                return EXIT_TURN
            return None

        for line in args.say:
            code = await handle(line)
            if code is not None:
                return code
        if args.exit_after:
            return 0
        lines = _stdin_lines(asyncio.get_running_loop())
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                out.print("[bold green]you > [/]", end="")
            item = await lines.get()
            if item is _EOF:
                break
            assert isinstance(item, str)
            code = await handle(item, echo=not interactive)  # a TTY shows what was typed
            if code is not None:
                return code
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``alicia-client`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
