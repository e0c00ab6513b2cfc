"""The table of doors: every way into the project's servers, declared once.

A door is one way in: data packets on a topic, text or byte streams on a topic, RPC
methods, the changes livekit-server reports of a participant, an HTTP route. Each row
says who may use it (a :class:`~alicia.agent.engine.rights.Right`, decided by the
engine's one rule), its bounds per sender and per room or process, and what a refusal
does. The handlers are registered only through this table (:mod:`.room` for a room,
:mod:`.http` for routes; ``tests/project/test_doors.py`` fails on any other
registration), and the attack harness (``tests/e2e/doors/``) attacks every row.

This module imports nothing of livekit: the HTTP servers, the docs and the tests read it.
``python -m alicia.agent.gate`` prints it as a Markdown table.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from alicia.agent.engine.rights import Right
from alicia.protocol import DATA_TOPIC, MAX_PACKET_BYTES, TEXT_BUDGET_BYTES

__all__ = [
    "DOORS",
    "LOG_EVERY_S",
    "MAX_STREAM_BYTES",
    "Bounds",
    "Door",
    "Kind",
    "Refusal",
    "Server",
    "door",
    "doors_of",
    "markdown",
]

LOG_EVERY_S: Final = 60.0
"""A refusal is logged at most once per door, sender, reason and this many seconds (counted
always)."""


class Kind(enum.Enum):
    """What sort of way in a door is."""

    PACKETS = "data packets"
    TEXT_STREAMS = "text streams"
    BYTE_STREAMS = "byte streams"
    RPC = "RPC methods"
    CHANGES = "attribute and permission changes"
    HTTP = "HTTP route"

    @property
    def streams(self) -> bool:
        """Streams: a reader per message, closed at once when refused."""
        return self in (Kind.TEXT_STREAMS, Kind.BYTE_STREAMS)


class Server(enum.Enum):
    """Who serves a door."""

    ROOM = "every room's agent"
    """Text rooms, voice rooms and ``attach_reasoning`` in anyone's AgentSession."""
    TEXT_ROOM = "text rooms with LiveKit's conventions, voice rooms"
    """The typed input of a room (``ALICIA_LK_CONVENTIONS``, on by default)."""
    VOICE_ROOM = "voice rooms, attach_reasoning"
    """Where livekit-agents' AgentSession runs."""
    AGUI = "the AG-UI endpoint"
    WATCHER = "the failover watcher"
    WEB = "the web debug page"
    WORKER = "the worker's HTTP port"
    """livekit-agents' health and Prometheus servers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """How much of a door one sender (``*_each``) and everyone together (``*_all``: per
    room for room doors, per process for routes) may hold. ``None``: not bounded there
    (the row says why)."""

    open_each: int | None = None
    """Streams, requests or connections of one sender open at once."""
    open_all: int | None = None
    """The same for all senders together."""
    bytes_each: int | None = None
    """Bytes of one message, stream or body."""
    rate_per_s: float | None = None
    """Sustained messages (or streams opened) per second per sender, after ``burst``."""
    burst: int | None = None
    deadline_s: float | None = None
    """A stream, request or body must be whole within this many seconds of opening."""
    queued_each: int | None = None
    """Messages of one sender read and waiting to be handled."""
    memory_mb: float = 5.0
    """What the worker's resident memory may grow while the attack harness attacks it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """What a refusal does: to the sender, to the stream, and to the operator."""

    answer: str
    """What the sender gets."""
    closes: bool = False
    """A stream's reader is closed at once (nothing more of it is read or kept), a body
    left unread closes its connection."""
    counted: bool = True
    """Counted: in ``alicia.doors.refused`` by door and reason (the AG-UI endpoint's in
    ``alicia.agui.requests`` by status code)."""
    logged: bool = True
    """Logged at most once per door, sender, reason and :data:`LOG_EVERY_S`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Door:
    """One way in."""

    name: str
    kind: Kind
    at: str
    """The topic, the method or ``METHOD /path``."""
    served_by: Server
    right: Right
    bounds: Bounds
    refusal: Refusal
    operations: Mapping[str, Right] = field(default_factory=dict)
    """Requests within the door that need more than :attr:`right`, by name."""
    settings: tuple[str, ...] = ()
    """Variables that change its bounds (the numbers here are their defaults)."""
    about: str = ""

    def needs(self, operation: str) -> Right:
        """The right ``operation`` needs within this door."""
        return self.operations.get(operation, self.right)


SESSION_OPEN: Final = (
    "ping",
    "get_chat_history",
    "get_session_state",
    "get_session_usage",
    "get_framework_info",
)
"""Session host requests anyone in the room may send: read-only, no reasoning, nothing the
room does not see anyway."""
SESSION_OPERATOR: Final = (
    "run_input",
    "update_io",
    "get_agent_info",
    "finalize_simulation",
    "get_rtc_stats",
)
"""Session host requests that need the operator grant: they steer the agent, or tell its
instructions or its network addresses (``get_rtc_stats`` carries ICE candidates)."""

_ERROR_MESSAGE: Final = "an ErrorMessage (rate-limited, ALICIA_ERROR_RATE)"

DOORS: Final[tuple[Door, ...]] = (
    Door(
        name="protocol",
        kind=Kind.PACKETS,
        at=DATA_TOPIC,
        served_by=Server.ROOM,
        right=Right.ANYONE,
        operations={
            "ControlStop, ControlVariation of another's turn": Right.OPERATOR,
            "types only the agent sends": Right.NOBODY,
        },
        bounds=Bounds(
            bytes_each=MAX_PACKET_BYTES,
            rate_per_s=20.0,
            burst=40,
            queued_each=256,
            open_all=4096,
        ),
        refusal=Refusal(
            answer=f"{_ERROR_MESSAGE}: 504 too fast or too many waiting, 101 too large or "
            "malformed, 203 not permitted"
        ),
        settings=("ALICIA_RATE", "ALICIA_RATE_BURST", "ALICIA_ERROR_RATE", "ALICIA_ERROR_BURST"),
        about="The Alicia protocol; every message type under the engine's rules.",
    ),
    Door(
        name="chat",
        kind=Kind.TEXT_STREAMS,
        at="lk.chat",
        served_by=Server.TEXT_ROOM,
        right=Right.ANYONE,
        bounds=Bounds(
            open_each=4,
            open_all=16,
            bytes_each=TEXT_BUDGET_BYTES + 1,
            rate_per_s=2.0,
            burst=10,
            deadline_s=15.0,
        ),
        refusal=Refusal(answer=f"{_ERROR_MESSAGE}: 504", closes=True),
        about="Typed input (LiveKit's text input convention): a user turn.",
    ),
    Door(
        name="session host",
        kind=Kind.BYTE_STREAMS,
        at="lk.agent.session",
        served_by=Server.VOICE_ROOM,
        right=Right.ANYONE,
        operations=dict.fromkeys(SESSION_OPERATOR, Right.OPERATOR),
        bounds=Bounds(
            open_each=2,
            open_all=8,
            bytes_each=64 * 1024,
            rate_per_s=5.0,
            burst=10,
            deadline_s=2.0,
            queued_each=4,
        ),
        refusal=Refusal(
            answer="a SessionResponse whose error names the rule (a request refused); "
            "nothing (a stream refused at the door)",
            closes=True,
        ),
        about="livekit-agents' session host: requests for the agent, one small protobuf each.",
    ),
    Door(
        name="pre-connect audio",
        kind=Kind.BYTE_STREAMS,
        at="lk.agent.pre-connect-audio-buffer",
        served_by=Server.VOICE_ROOM,
        right=Right.PUBLISHER,
        bounds=Bounds(
            open_each=1,
            open_all=4,
            bytes_each=2 * 1024 * 1024,
            rate_per_s=0.5,
            burst=2,
            deadline_s=3.0,
            memory_mb=16.0,  # 4 streams' 2 MiB held at most, and their tracks' decoders
        ),
        refusal=Refusal(answer="nothing (logged)", closes=True),
        about="The microphone's audio from before the agent joined, once per track, only "
        "from its publisher (2 MiB raw, 256 KiB Opus), whole within RoomIO's own 3 s.",
    ),
    Door(
        name="grants",
        kind=Kind.CHANGES,
        at="participant attributes and permissions",
        served_by=Server.ROOM,
        right=Right.SERVER,
        bounds=Bounds(),
        refusal=Refusal(
            answer="nothing: the change is no grant (a participant that could set its own "
            "attributes at any moment of its session has none from them)",
            counted=False,
            logged=False,
        ),
        about="What a participant may see and do, from what livekit-server vouches for; "
        "checked again at every change, for every kind of participant.",
    ),
    Door(
        name="rpc",
        kind=Kind.RPC,
        at="any method",
        served_by=Server.ROOM,
        right=Right.NOBODY,
        bounds=Bounds(),
        refusal=Refusal(
            answer="RpcError 1400 (unsupported method), the SDK's own answer",
            counted=False,
            logged=False,
        ),
        about="No RPC method is registered.",
    ),
    Door(
        name="other topics",
        kind=Kind.BYTE_STREAMS,
        at="any other topic",
        served_by=Server.ROOM,
        right=Right.NOBODY,
        bounds=Bounds(bytes_each=2 * 1024 * 1024),
        refusal=Refusal(
            answer="nothing: the SDK drops what no handler takes",
            closes=True,
            counted=False,
            logged=False,
        ),
        about="Data packets, text and byte streams on topics not in this table.",
    ),
    Door(
        name="agui run",
        kind=Kind.HTTP,
        at="POST /agui",
        served_by=Server.AGUI,
        right=Right.ROOM_TOKEN,
        bounds=Bounds(
            open_each=4,
            open_all=64,
            bytes_each=4 * 1024 * 1024,
            deadline_s=10.0,
            queued_each=2,
        ),
        refusal=Refusal(
            answer="HTTP 401/403 (token), 400 (not a RunAgentInput), 413, 408, 429 (per "
            "caller or address), 503 (uploads); the connection closed if the body is unread"
        ),
        settings=(
            "ALICIA_AGUI_MAX_PER_CALLER",
            "ALICIA_AGUI_MAX_RUNS",
            "ALICIA_AGUI_MAX_PER_ADDRESS",
            "ALICIA_AGUI_BODY_TIMEOUT",
            "ALICIA_AGUI_MAX_UPLOADS",
            "ALICIA_AGUI_TRUSTED_PROXIES",
        ),
        about="One AG-UI run as Server-Sent Events; 16 streams per client address.",
    ),
    Door(
        name="agui room events",
        kind=Kind.HTTP,
        at="GET /agui/rooms/{room}/events",
        served_by=Server.AGUI,
        right=Right.ROOM_TOKEN,
        bounds=Bounds(open_each=4, open_all=64),
        refusal=Refusal(answer="HTTP 401/403 (token), 429 (per caller or address)"),
        settings=("ALICIA_AGUI_MAX_PER_CALLER", "ALICIA_AGUI_MAX_RUNS"),
        about="A live room's turns as AG-UI events, at the caller's level.",
    ),
    Door(
        name="agui health",
        kind=Kind.HTTP,
        at="GET /agui/healthz",
        served_by=Server.AGUI,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed: it says ok", counted=False, logged=False),
    ),
    Door(
        name="webhook",
        kind=Kind.HTTP,
        at="POST /webhook",
        served_by=Server.WATCHER,
        right=Right.SIGNED,
        bounds=Bounds(bytes_each=1024 * 1024, deadline_s=10.0),
        refusal=Refusal(
            answer="HTTP 401 (signature), 413 (size), 408 (time); the connection closed if "
            "the body is unread"
        ),
        about="livekit-server's room events; the watcher only looks at the room again.",
    ),
    Door(
        name="watcher health",
        kind=Kind.HTTP,
        at="GET /healthz",
        served_by=Server.WATCHER,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed: it says ok", counted=False, logged=False),
    ),
    Door(
        name="web token",
        kind=Kind.HTTP,
        at="GET /token",
        served_by=Server.WEB,
        right=Right.DEV_TOKENS,
        bounds=Bounds(),
        refusal=Refusal(
            answer="HTTP 404 (ALICIA_WEB_TOKENS off), 400 (names), 403 (an agent's "
            "identity), 409 (an identity present in the room)"
        ),
        settings=("ALICIA_WEB_TOKENS",),
        about="Development tokens; they never let anyone set its own attributes.",
    ),
    Door(
        name="web page",
        kind=Kind.HTTP,
        at="GET /",
        served_by=Server.WEB,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed: the page holds no token", counted=False, logged=False),
    ),
    Door(
        name="web health",
        kind=Kind.HTTP,
        at="GET /healthz",
        served_by=Server.WEB,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed: it says ok", counted=False, logged=False),
    ),
    Door(
        name="web static",
        kind=Kind.HTTP,
        at="GET /*",
        served_by=Server.WEB,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="HTTP 404 for what is not there", counted=False, logged=False),
        about="The page's bundle and style sheet.",
    ),
    Door(
        name="worker health",
        kind=Kind.HTTP,
        at="GET /",
        served_by=Server.WORKER,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed", counted=False, logged=False),
        settings=("ALICIA_HTTP_HOST", "ALICIA_HTTP_PORT"),
        about="livekit-agents' health check, on loopback unless ALICIA_HTTP_HOST says.",
    ),
    Door(
        name="worker info",
        kind=Kind.HTTP,
        at="GET /worker",
        served_by=Server.WORKER,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed", counted=False, logged=False),
        settings=("ALICIA_HTTP_HOST", "ALICIA_HTTP_PORT"),
        about="livekit-agents' worker description (jobs, load), beside the health check.",
    ),
    Door(
        name="metrics",
        kind=Kind.HTTP,
        at="GET /metrics",
        served_by=Server.WORKER,
        right=Right.LOCAL,
        bounds=Bounds(),
        refusal=Refusal(answer="none needed", counted=False, logged=False),
        settings=("ALICIA_HTTP_HOST", "ALICIA_METRICS_PORT"),
        about="Prometheus, on loopback unless ALICIA_HTTP_HOST says; counts, no content.",
    ),
)
"""Every way in (see the module docstring)."""

_BY_NAME: Final = {d.name: d for d in DOORS}

MAX_STREAM_BYTES: Final = max(
    d.bounds.bytes_each or 0 for d in DOORS if d.kind.streams and d.served_by is not Server.AGUI
)
"""The most any one incoming data stream of a room may be, inflated (the largest stream
door's bytes): livekit's SDK ends a longer one itself (``DataStreamOptions``)."""


def door(name: str) -> Door:
    """The row named ``name`` (``KeyError`` if the table has none)."""
    return _BY_NAME[name]


def doors_of(server: Server) -> Iterator[Door]:
    """The rows ``server`` serves."""
    return (d for d in DOORS if d.served_by is server)


def _bounds(b: Bounds) -> str:
    parts = [
        f"{b.open_each} open per sender" if b.open_each is not None else "",
        f"{b.open_all} open in all" if b.open_all is not None else "",
        f"{b.bytes_each:,} bytes each" if b.bytes_each is not None else "",
        f"{b.rate_per_s:g}/s (burst {b.burst})" if b.rate_per_s is not None else "",
        f"whole within {b.deadline_s:g} s" if b.deadline_s is not None else "",
        f"{b.queued_each} waiting per sender" if b.queued_each is not None else "",
    ]
    return "; ".join(p for p in parts if p) or "none of its own"


def markdown() -> str:
    """The table as Markdown: door, way in, served by, right, bounds, refusal."""
    lines = [
        "| door | way in | served by | who may use it | bounds (defaults) | a refusal |",
        "|---|---|---|---|---|---|",
    ]
    for d in DOORS:
        right = d.right.value
        if d.operations:
            right += "; " + "; ".join(f"{op}: {r.value}" for op, r in d.operations.items())
        refusal = d.refusal.answer + ("; reader closed at once" if d.refusal.closes else "")
        at = f"{d.kind.value} `{d.at}`" if d.kind is not Kind.HTTP else f"`{d.at}`"
        lines.append(
            f"| {d.name} | {at} | {d.served_by.value} | {right} | {_bounds(d.bounds)} | {refusal} |"
        )
    return "\n".join(lines)
