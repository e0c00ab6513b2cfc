"""The layout is the architecture: which package may import which, checked two ways.

* Statically: every ``import`` in a layer's modules (also the ones inside functions) is
  read with ``ast`` and checked against what the layer may not import.
* Dynamically: each layer's modules are all imported in a fresh interpreter where
  ``livekit`` (and, for the engine, the front ends and storage) cannot be imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.paths import ROOT

FRONT_ENDS: tuple[str, ...] = (
    "alicia.agent.rooms",
    "alicia.agent.session",
    "alicia.agent.agui",
    "alicia.agent.watch",
    "alicia.agent.wiring",
    "alicia.agent.export",
)
"""What sits on top of the engine: the LiveKit rooms, the AgentSession adapter, AG-UI, the
watcher, the exports and the worker's wiring."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "alicia/protocol": ("livekit", "alicia.agent", "sqlalchemy", "openai"),
    "alicia/agent/llm": (
        "livekit",
        "alicia.agent.engine",
        "alicia.agent.rooms",
        "alicia.agent.storage",
        "alicia.protocol.codec",
    ),
    "alicia/agent/engine": (
        "livekit",
        "sqlalchemy",
        "alicia.agent.settings",  # options come as values (engine/options.py)
        *FRONT_ENDS,
        "alicia.agent.storage",
    ),
    "alicia/agent/storage": ("livekit", "alicia.agent.rooms", "alicia.agent.llm"),
    "alicia/agent/telemetry": (
        "livekit",
        "sqlalchemy",
        "alicia.agent.settings",
        *FRONT_ENDS,
        "alicia.agent.storage",
    ),
    "alicia/agent/agui": ("alicia.agent.rooms", "alicia.agent.session"),
    "alicia/agent/session": ("alicia.agent.rooms", "alicia.agent.agui", "alicia.agent.watch"),
    "alicia/agent/gate": (*FRONT_ENDS, "alicia.agent.storage", "alicia.agent.llm"),
    "alicia/agent/export": (
        "livekit",
        "alicia.agent.rooms",
        "alicia.agent.session",
        "alicia.agent.engine",
        "alicia.agent.llm",
    ),
}
"""Layer folder (through the alicia package) -> module prefixes none of its modules may
import."""

ALLOWED_FROM_ENGINE_IN_STORAGE = ("alicia.agent.engine.sink", "alicia.agent.engine.sealing")
"""Storage implements the engine's ports (the sink, data keys); it may import those and
nothing else of the engine."""


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _dotted(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_module_of_a_layer_imports_what_the_layer_may_not(layer: str) -> None:
    modules = _modules(layer)
    assert modules, f"no modules under {layer}"
    bad: list[str] = []
    for path in modules:
        for name in _imports(path):
            if layer == "alicia/agent/storage" and any(
                _matches(name, ok) for ok in ALLOWED_FROM_ENGINE_IN_STORAGE
            ):
                continue
            if layer == "alicia/agent/storage" and _matches(name, "alicia.agent.engine"):
                bad.append(f"{path.relative_to(ROOT)}: {name}")
            bad.extend(
                f"{path.relative_to(ROOT)}: {name}"
                for prefix in FORBIDDEN[layer]
                if _matches(name, prefix)
            )
    assert bad == []


def test_the_static_check_sees_a_forbidden_import() -> None:
    """The checker itself can fail: a livekit import, a relative one, one in a function."""
    sample = ROOT / "alicia" / "agent" / "engine" / "_layer_probe.py"
    sample.write_text(
        "from livekit import rtc\nfrom ..rooms import worker\n"
        "def f() -> None:\n    import alicia.agent.storage.writer\n"
    )
    try:
        names = _imports(sample)
    finally:
        sample.unlink()
    assert "livekit.rtc" in names
    assert "alicia.agent.rooms.worker" in names
    assert "alicia.agent.storage.writer" in names


_BLOCKER = textwrap.dedent(
    """
    import importlib, importlib.abc, pkgutil, sys

    BLOCKED = {blocked!r}

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"{{name}} is blocked in this layer test")
            return None

    sys.meta_path.insert(0, Blocker())
    package = importlib.import_module({package!r})
    loaded = [package.__name__]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
        loaded.append(info.name)
    leaked = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
    assert not leaked, leaked
    print(" ".join(loaded))
    """
)

LOAD_WITHOUT: dict[str, tuple[str, ...]] = {
    "alicia.protocol": ("livekit", "alicia.agent", "sqlalchemy"),
    "alicia.agent.llm": (
        "livekit",
        "alicia.agent.engine",
        "alicia.agent.rooms",
        "alicia.agent.storage",
    ),
    "alicia.agent.engine": (
        "livekit",
        "sqlalchemy",
        "alicia.agent.settings",
        *FRONT_ENDS,
        "alicia.agent.storage",
    ),
    "alicia.agent.storage": ("livekit", "alicia.agent.rooms"),
    "alicia.agent.export": ("livekit", "alicia.agent.rooms", "alicia.agent.session"),
}


@pytest.mark.parametrize("package", sorted(LOAD_WITHOUT))
def test_each_layer_loads_where_livekit_cannot_be_imported(package: str) -> None:
    code = _BLOCKER.format(blocked=LOAD_WITHOUT[package], package=package)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = done.stdout.split()
    expected = {_dotted(p) for p in _modules(package.replace(".", "/"))}
    assert expected <= set(loaded), expected - set(loaded)


def test_the_blocker_really_blocks_livekit() -> None:
    code = _BLOCKER.format(blocked=("livekit",), package="alicia.agent.rooms")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "livekit is blocked in this layer test" in done.stderr


OLD_NAMES = ("agent", "protocol", "client", "web", "harness", "demo")


def test_nothing_imports_the_folders_by_their_old_top_level_names() -> None:
    """Only ``alicia.*`` is installed: an ``import agent`` would load a user's agent.py."""
    sources = [
        p
        for folder in (*OLD_NAMES, "alicia", "tests", "bench", "examples")
        for p in (ROOT / folder).rglob("*.py")
    ]
    assert len(sources) > 100
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sources
        for name in _absolute_imports(path)
        if name.split(".")[0] in OLD_NAMES
    ]
    assert bad == []


def _absolute_imports(path: Path) -> list[str]:
    """Module names ``path`` imports absolutely (relative imports stay in the package)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


PACKAGES = ("agent", "client", "demo", "harness", "protocol", "web")
"""The folders the ``alicia`` package links to (its modules)."""


def _package_modules() -> dict[str, Path]:
    return {
        _dotted(p): p
        for folder in PACKAGES
        for p in sorted((ROOT / "alicia" / folder).rglob("*.py"))
    }


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (also under ``TYPE_CHECKING`` and inside
    functions), each import resolved to the longest module name it names."""
    modules = _package_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for imported in _imports(path):
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                deps.add(".".join(parts))
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other() -> None:
    """One direction: where a lower module must call back up, it owns a port (a Protocol)."""
    graph = _import_graph()
    assert len(graph) > 100
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """Small modules named for what they do (the package and the tests; not the recorded
    streams' data builder, ``tests/streams``)."""
    streams = ROOT / "tests" / "streams"
    sources = [
        *_package_modules().values(),
        *(p for p in (ROOT / "tests").rglob("*.py") if not p.is_relative_to(streams)),
    ]
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
