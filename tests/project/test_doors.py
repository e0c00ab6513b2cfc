"""One table of doors: handlers are registered only through it, and servers start its way.

Read with ``ast`` in every module of the servers (``agent/``, ``web/``, ``demo/``): a room
handler (``register_*_stream_handler``, ``register_rpc_method``, ``.on("data_received")``
and the participant changes that carry grants) is registered only in the room adapter
(``agent/gate/room.py``; ``agent/gate/grants.py`` follows the changes to know where a grant
came from), a Starlette route is made only in ``agent/gate/http.py``, and every uvicorn
server is started with ``serve_options`` (no forwarded header trusted by default).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from starlette.routing import Mount, Route

from alicia.agent.gate.doors import DOORS, Kind, Server, doors_of, markdown
from tests.paths import ROOT

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SERVER_CODE = ("agent", "web")
"""The servers' code (``demo/`` and ``client/`` are clients of the rooms)."""
REGISTERS = frozenset(
    {"register_byte_stream_handler", "register_text_stream_handler", "register_rpc_method"}
)
DOOR_EVENTS = frozenset(
    {
        "data_received",
        "sip_dtmf_received",
        "participant_attributes_changed",
        "participant_permissions_changed",
    }
)
ROUTES = frozenset({"Route", "Mount", "WebSocketRoute", "Host", "Router"})
ALLOWED = {
    "register": {"agent/gate/room.py"},
    "event": {"agent/gate/room.py", "agent/gate/grants.py"},
    "route": {"agent/gate/http.py"},
}


def _modules() -> list[Path]:
    return sorted(p for folder in SERVER_CODE for p in (ROOT / folder).rglob("*.py"))


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def registrations(path: Path) -> list[tuple[str, int, str]]:
    """(what, line, how) for every handler registration in ``path``."""
    found: list[tuple[str, int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        called = _name(node.func)
        if called in REGISTERS:
            found.append(("register", node.lineno, called))
        elif called in ("on", "once") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and first.value in DOOR_EVENTS:
                found.append(("event", node.lineno, f".on({first.value!r})"))
        elif called in ROUTES or called in ("add_route", "add_api_route", "add_routes"):
            found.append(("route", node.lineno, called))
        elif called == "setattr" and len(node.args) >= 2:
            target = node.args[1]
            if isinstance(target, ast.Constant) and str(target.value).startswith("register_"):
                found.append(("register", node.lineno, f"setattr({target.value!r})"))
    return found


def test_handlers_are_registered_only_through_the_table_of_doors() -> None:
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line}: {how}"
        for path in _modules()
        for what, line, how in registrations(path)
        if str(path.relative_to(ROOT)) not in ALLOWED[what]
    ]
    assert not elsewhere, "register it through agent/gate (room.py, http.py):\n" + "\n".join(
        elsewhere
    )


def test_the_check_finds_each_kind_of_registration(tmp_path: Path) -> None:
    """The reader above is not blind: each way of registering is found."""
    module = tmp_path / "m.py"
    module.write_text(
        "room.register_byte_stream_handler('t', h)\n"
        "room.local_participant.register_rpc_method('m', h)\n"
        "room.on('data_received', h)\n"
        "room.on('participant_attributes_changed', h)\n"
        "Route('/x', h)\n"
        "setattr(room, 'register_text_stream_handler', h)\n"
        "room.on('disconnected', h)\n"
    )
    assert [how for _, _, how in registrations(module)] == [
        "register_byte_stream_handler",
        "register_rpc_method",
        ".on('data_received')",
        ".on('participant_attributes_changed')",
        "Route",
        "setattr('register_text_stream_handler')",
    ]


def test_every_uvicorn_server_starts_with_the_projects_options() -> None:
    """``uvicorn.run`` and ``uvicorn.Config`` get ``**serve_options(...)``: uvicorn's own
    default trusts ``X-Forwarded-For`` from loopback."""
    bare: list[str] = []
    for path in [*_modules(), ROOT / "tests" / "e2e" / "web_app.py"]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _name(node.func) in ("run", "Config"):
                if not (
                    isinstance(node.func, ast.Attribute) and _name(node.func.value) == "uvicorn"
                ):
                    continue
                spread = [k.value for k in node.keywords if k.arg is None]
                if not any(
                    isinstance(v, ast.Call) and _name(v.func) == "serve_options" for v in spread
                ):
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, bare


def test_each_starlette_server_serves_exactly_its_rows() -> None:
    from alicia.agent.agui.app import AguiService
    from alicia.agent.settings import Settings, WatchSettings
    from alicia.agent.watch.app import create_app as watch_app
    from alicia.web import WebSettings, create_app

    keys = {
        "LIVEKIT_URL": "ws://127.0.0.1:1",
        "LIVEKIT_API_KEY": "k",
        "LIVEKIT_API_SECRET": "s" * 32,
    }
    settings = Settings.from_env(
        {**keys, "LLM_BASE_URL": "http://127.0.0.1:1/v1", "LLM_MODEL": "m"}
    )
    agui = AguiService(settings)
    web = create_app(
        WebSettings(livekit_url=keys["LIVEKIT_URL"], api_key="k", api_secret="s" * 32), agui=agui
    )
    watch_env = {**keys, "DATABASE_URL": "postgresql+asyncpg://x@127.0.0.1/x"}
    watch = watch_app(WatchSettings.from_env({**watch_env, "ALICIA_AGENT_NAME": "alicia"}))

    def served(app: object) -> set[str]:
        out = set()
        for route in app.routes:  # type: ignore[attr-defined]
            if isinstance(route, Route):
                out |= {f"{m} {route.path}" for m in route.methods or () if m != "HEAD"}
            elif isinstance(route, Mount):
                out.add(f"GET {route.path}/*")
        return out

    def declared(*servers: Server) -> set[str]:
        return {d.at for s in servers for d in doors_of(s)}

    assert served(web) == declared(Server.WEB, Server.AGUI)
    assert served(watch) == declared(Server.WATCHER)


def test_the_table_is_whole_and_in_the_readme() -> None:
    names = [d.name for d in DOORS]
    assert len(names) == len(set(names))
    assert {d.kind for d in DOORS} == set(Kind)
    for d in DOORS:
        assert d.refusal.answer and d.right, d.name
        if d.kind.streams and d.right.of_participants and d.name != "other topics":
            b = d.bounds
            assert None not in (b.open_each, b.open_all, b.bytes_each, b.deadline_s), d.name
    assert markdown() in (ROOT / "README.md").read_text()
