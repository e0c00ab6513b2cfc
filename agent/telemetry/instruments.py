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
* ``alicia.agui.requests`` by ``http.response.status_code``: AG-UI requests answered.
"""

from __future__ import annotations

from typing import Final

from opentelemetry import metrics

from .otel import SCOPE

__all__ = [
    "AGUI_REQUESTS",
    "FENCED",
    "LEASE_CLAIMS",
    "ROOMS",
    "TAKEOVERS",
]

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
