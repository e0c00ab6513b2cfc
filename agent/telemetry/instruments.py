"""The worker's own metrics beside the engine's (:mod:`.otel`): rooms, leases, AG-UI.

Instruments on the global meter (``alicia.reasoning`` scope): until a front end sets a
meter provider (:func:`~alicia.agent.telemetry.setup.meter_provider`, with
``ALICIA_METRICS_PORT``) every call is a no-op of the OpenTelemetry API. Names as in
:mod:`.otel`; on ``/metrics`` with their units (:mod:`.prometheus`):

* ``alicia.rooms`` (up-down): rooms this process serves now;
* ``alicia.leases.claims`` by ``alicia.lease.outcome`` (``held``: a first claim or a
  takeover, ``refused``: another live agent holds the room, ``unavailable``: the database
  did not answer), and ``alicia.leases.takeovers`` (claims of a room another agent held
  before: epoch above 1);
* ``alicia.storage.fenced``: writers stopped because their room was taken over;
* ``alicia.agui.requests`` by ``http.response.status_code``: AG-UI requests answered;
* ``alicia.packets.dropped`` by ``alicia.reason`` (``queue_full``: a room's incoming queue
  was full; ``unattributed``: the SDK could not name the sender); refusals are the
  engine's (:mod:`.otel`);
* ``alicia.doors.refused`` by ``alicia.door`` and ``alicia.reason``: what a door of the
  table (``alicia.agent.gate.doors``) refused before the engine saw it;
* ``alicia.queue.depth`` (gauge) by ``alicia.queue``: items waiting now, summed over the
  process (``storage``: records not yet stored; ``incoming``: packets not yet handled),
  read only when metrics are exported (:func:`watch_queue`).

Failover also leaves spans (:func:`lease_span`): ``alicia.lease.claim`` per claim (its
outcome, the epoch, and for a takeover ``alicia.lease.vacant_s``: seconds the room went
without a live agent), ``alicia.lease.lost`` when a takeover fences this agent, and
``alicia.drain`` while a stopping worker's rooms finish their turns.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation

from .otel import SCOPE

__all__ = [
    "AGUI_REQUESTS",
    "DROPPED",
    "FENCED",
    "LEASE_CLAIMS",
    "REFUSED",
    "ROOMS",
    "TAKEOVERS",
    "lease_span",
    "watch_queue",
]

_T = TypeVar("_T")

_METER: Final = metrics.get_meter(SCOPE)

ROOMS: Final = _METER.create_up_down_counter(
    "alicia.rooms", unit="{room}", description="Rooms served by this process"
)
LEASE_CLAIMS: Final = _METER.create_counter(
    "alicia.leases.claims", unit="{claim}", description="Room lease claims, by outcome"
)
TAKEOVERS: Final = _METER.create_counter(
    "alicia.leases.takeovers", unit="{takeover}", description="Rooms claimed from another agent"
)
FENCED: Final = _METER.create_counter(
    "alicia.storage.fenced", unit="{writer}", description="Writers stopped by a takeover"
)
AGUI_REQUESTS: Final = _METER.create_counter(
    "alicia.agui.requests", unit="{request}", description="AG-UI requests, by status code"
)
DROPPED: Final = _METER.create_counter(
    "alicia.packets.dropped", unit="{packet}", description="Incoming packets dropped, by reason"
)
REFUSED: Final = _METER.create_counter(
    "alicia.doors.refused",
    unit="{refusal}",
    description="Ways in refused at their door, by door and reason",
)

_QUEUES: weakref.WeakKeyDictionary[Any, tuple[str, Callable[[Any], int]]] = (
    weakref.WeakKeyDictionary()
)


def watch_queue(kind: str, owner: _T, depth: Callable[[_T], int]) -> None:
    """Count ``depth(owner)`` in ``alicia.queue.depth{alicia.queue=kind}`` while ``owner``
    lives (held weakly; read only when the metrics are exported)."""
    _QUEUES[owner] = (kind, depth)


def _depths(_options: CallbackOptions) -> Iterable[Observation]:
    totals: dict[str, int] = {}
    for owner, (kind, depth) in list(_QUEUES.items()):
        totals[kind] = totals.get(kind, 0) + depth(owner)
    return [Observation(n, {"alicia.queue": kind}) for kind, n in totals.items()]


_METER.create_observable_gauge(
    "alicia.queue.depth", [_depths], unit="{item}", description="Items waiting, by queue"
)

_TRACER: Final = trace.get_tracer(SCOPE)


@contextmanager
def lease_span(
    name: str, room: str, **attributes: str | int | float | bool
) -> Iterator[trace.Span]:
    """A failover span (``alicia.lease.claim``, ``alicia.lease.lost``, ``alicia.drain``) on
    ``room``; a no-op until a front end sets a tracer provider."""
    attrs = {"gen_ai.conversation.id": room, **attributes}
    with _TRACER.start_as_current_span(name, attributes=attrs) as span:
        yield span
