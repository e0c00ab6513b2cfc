"""The watcher's rule (pure), its webhook endpoint's signature check, and its following of
a dispatch (on stand-ins for livekit-server's API and the leases)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest
from livekit import api
from starlette.testclient import TestClient

from alicia.agent.settings import WatchSettings
from alicia.agent.storage.leases import Lease
from alicia.agent.watch.app import create_app
from alicia.agent.watch.watcher import RoomView, Watcher, decide

NOW = 1_000_000.0


def lease(identity: str | None, beat_ago: float, dispatched_ago: float | None = None) -> Lease:
    dispatched = None if dispatched_ago is None else NOW - dispatched_ago
    return Lease("room", identity, "w1" if identity else None, NOW - beat_ago, dispatched)


def rule(view: RoomView, held: Lease | None) -> tuple[bool, tuple[str, ...]]:
    d = decide(view, held, now=NOW, timeout_s=1.5, grace_s=10.0)
    return d.dispatch, d.remove


def test_a_room_without_clients_needs_no_agent() -> None:
    assert rule(RoomView((), ()), None) == (False, ())


def test_a_live_agent_holding_the_lease_is_left_alone() -> None:
    view = RoomView(("alice",), (("agent-a", NOW - 60),))
    assert rule(view, lease("agent-a", beat_ago=0.5)) == (False, ())


def test_a_dead_agent_is_removed_and_replaced() -> None:
    view = RoomView(("alice",), (("agent-a", NOW - 60),))
    assert rule(view, lease("agent-a", beat_ago=2.0)) == (True, ("agent-a",))


def test_a_stopped_agent_that_joined_recently_is_removed_too() -> None:
    """Its lease went stale: it is not "starting", however recently it joined."""
    view = RoomView(("alice",), (("agent-a", NOW - 3),))
    assert rule(view, lease("agent-a", beat_ago=2.0)) == (True, ("agent-a",))


def test_a_new_room_gets_an_agent_and_a_pending_dispatch_is_waited_for() -> None:
    view = RoomView(("alice",), ())
    assert rule(view, None) == (True, ())
    assert rule(view, lease(None, beat_ago=NOW, dispatched_ago=3.0)) == (False, ())
    assert rule(view, lease(None, beat_ago=NOW, dispatched_ago=12.0)) == (True, ())


def test_an_agent_still_claiming_its_room_is_given_time() -> None:
    view = RoomView(("alice",), (("agent-b", NOW - 1),))
    assert rule(view, lease("agent-a", beat_ago=5.0)) == (False, ())


def test_an_agent_that_never_claims_is_removed_after_the_grace() -> None:
    view = RoomView(("alice",), (("agent-x", NOW - 30),))
    assert rule(view, None) == (True, ("agent-x",))


def watch_settings(**changes: Any) -> WatchSettings:
    """Settings for a watcher that reaches no server unless a test gives it one."""
    settings = WatchSettings(
        livekit_url="ws://127.0.0.1:1",
        livekit_api_key="key",
        livekit_api_secret="secret-secret-secret-secret-secret",
        database_url="sqlite+aiosqlite:///:memory:",
        agent_name="alicia",
    )
    return dataclasses.replace(settings, **changes)


def watch_client() -> TestClient:
    """The watcher's web app under test (no lifespan: nothing is polled)."""
    return TestClient(create_app(watch_settings()))


def test_webhooks_need_livekit_s_signature() -> None:
    client = watch_client()
    body = '{"event": "participant_joined", "room": {"name": "r1"}}'
    assert client.post("/webhook", content=body).status_code == 401
    forged = api.AccessToken("key", "not-the-secret-not-the-secret-not-the").with_sha256(
        base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    )
    headers = {"Authorization": forged.to_jwt()}
    assert client.post("/webhook", content=body, headers=headers).status_code == 401
    signed = api.AccessToken("key", "secret-secret-secret-secret-secret").with_sha256(
        base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    )
    headers = {"Authorization": signed.to_jwt()}
    reply = client.post("/webhook", content=body, headers=headers)
    assert reply.status_code == 200
    assert client.app.state.watcher._pending == {"r1"}  # type: ignore[attr-defined]


def test_an_agent_s_departure_is_logged_with_its_reason_even_one_unknown_here(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = watch_client()
    for room, reason in (("r1", 4), ("r2", 999)):  # PARTICIPANT_REMOVED; a newer server's
        body = json.dumps(
            {
                "event": "participant_left",
                "room": {"name": room},
                "participant": {"identity": "agent-a", "disconnectReason": reason},
            }
        )
        signed = api.AccessToken("key", "secret-secret-secret-secret-secret").with_sha256(
            base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        )
        with caplog.at_level(logging.INFO, logger="alicia.watch"):
            reply = client.post(
                "/webhook", content=body, headers={"Authorization": signed.to_jwt()}
            )
        assert reply.status_code == 200
    said = [r.getMessage() for r in caplog.records if r.name == "alicia.watch"]
    assert said == [
        "webhook participant_left r1 agent-a (PARTICIPANT_REMOVED)",
        "webhook participant_left r2 agent-a (999)",
    ]
    assert client.app.state.watcher._pending == {"r1", "r2"}  # type: ignore[attr-defined]


class _SlowDispatchAPI:
    """livekit-server's API as the watcher sees it, where a worker takes each dispatch
    (its lease says so) before the request that created it has returned."""

    def __init__(self, leases: _Leases) -> None:
        self.created: list[str] = []
        self.agent_dispatch = SimpleNamespace(create_dispatch=self._create)
        self.room = SimpleNamespace(list_participants=self._participants)
        self._leases = leases

    async def _create(self, request: api.CreateAgentDispatchRequest) -> Any:
        self.created.append(request.room)
        self._leases.accepted_at = time.time()  # the job is taken while the reply travels
        await asyncio.sleep(0.3)
        return SimpleNamespace(id=f"AD_{len(self.created)}")

    async def _participants(self, request: api.ListParticipantsRequest) -> Any:
        alice = api.ParticipantInfo(identity="alice", kind=api.ParticipantInfo.Kind.STANDARD)
        return SimpleNamespace(participants=[alice])  # its agent has not joined yet


class _Leases:
    def __init__(self) -> None:
        self.accepted_at: float | None = None

    async def get(self, room: str) -> Lease:
        return Lease(room, None, None, 0.0, time.time(), accepted_at=self.accepted_at)

    async def begin_dispatch(self, room: str, timeout_s: float, grace_s: float) -> bool:
        return True


async def test_a_dispatch_taken_before_its_request_returned_is_not_sent_again() -> None:
    settings = watch_settings(redispatch_s=0.2)
    leases = _Leases()
    lk = _SlowDispatchAPI(leases)
    watcher = Watcher(settings, leases)  # type: ignore[arg-type]
    watcher._lk = lk  # type: ignore[assignment]
    await watcher._dispatch("r1", "a test")
    await asyncio.gather(*watcher._following.values())
    assert lk.created == ["r1", "r1"]  # the takeover's two copies, and no third
