"""The HTTP servers' routes, built from the table of doors only.

:func:`routes` gives a Starlette server exactly the routes its rows declare
(``METHOD /path``; a path ending in ``/*`` mounts an app there, such as static files),
each with the endpoint its caller names by door: a row without an endpoint, or an
endpoint without a row, is an error when the app is made, not an open door. It is the
only place that makes a Starlette ``Route`` (``tests/project/test_doors.py``).

:func:`serve_options` is what every uvicorn server of the project is started with:
uvicorn's ``proxy_headers`` (on by default, trusting ``X-Forwarded-For`` from loopback)
off, so a client's address is the connection's; a route that needs the client behind a
proxy reads the forwarded header itself from proxies configured by name
(``ALICIA_AGUI_TRUSTED_PROXIES``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from starlette.routing import BaseRoute, Mount, Route

from .doors import Kind, Server, doors_of

__all__ = ["SERVE_OPTIONS", "routes", "serve_options"]

SERVE_OPTIONS: Final[Mapping[str, Any]] = {"proxy_headers": False, "server_header": False}
"""uvicorn options of every server the project starts (see the module docstring)."""


def serve_options(**options: Any) -> dict[str, Any]:
    """:data:`SERVE_OPTIONS` with ``options`` (host, port, log level, ...)."""
    return {**SERVE_OPTIONS, **options}


def routes(
    server: Server, endpoints: Mapping[str, Any], *, also: Sequence[BaseRoute] = ()
) -> list[BaseRoute]:
    """``server``'s routes from the table: ``endpoints`` maps each of its HTTP doors' names
    to its endpoint (or, for a ``/*`` path, the app mounted there). ``also``: another
    server's routes (made here too) served beside them. Mounts come last."""
    declared = [d for d in doors_of(server) if d.kind is Kind.HTTP]
    names = {d.name for d in declared}
    if unknown := sorted(set(endpoints) - names):
        raise ValueError(f"no door in the table for {unknown} on {server.name}")
    if missing := sorted(names - set(endpoints)):
        raise ValueError(f"doors of {server.name} without an endpoint: {missing}")
    made: list[BaseRoute] = []
    mounts: list[BaseRoute] = []
    for d in declared:
        method, _, path = d.at.partition(" ")
        if path.endswith("/*"):
            mounts.append(Mount(path[:-2] or "/", app=endpoints[d.name]))
        else:
            made.append(Route(path, endpoints[d.name], methods=[method]))
    return [*made, *also, *mounts]
