"""The web debug app: token endpoint, static bundle, settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from livekit import api
from starlette.testclient import TestClient

from alicia import web
from alicia.web import BUNDLE, WebSettings, create_app
from alicia.web.settings import WebSettingsError

KEY = "devkey"
SECRET = "alicia-dev-secret-0123456789abcdef0123"
SETTINGS = WebSettings(
    livekit_url="ws://127.0.0.1:7880", api_key=KEY, api_secret=SECRET, tokens="dev"
)
IN_ROOM: set[str] = {"alice", "agent-AJ_x1"}


async def occupants(room: str) -> set[str]:
    return IN_ROOM


@pytest.fixture
def http() -> TestClient:
    return TestClient(create_app(SETTINGS, occupants=occupants))


def test_the_token_endpoint_is_off_unless_enabled() -> None:
    off = dataclasses.replace(SETTINGS, tokens="off")
    resp = TestClient(create_app(off, occupants=occupants)).get("/token")
    assert resp.status_code == 404
    assert "ALICIA_WEB_TOKENS=dev" in resp.json()["error"] and "token" not in resp.json()
    assert WebSettings.from_env(ENV).tokens == "off"  # the default


def test_enabling_it_warns_that_it_is_a_development_issuer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="alicia.web.app"):
        create_app(SETTINGS, occupants=occupants)
    assert "development token issuer" in caplog.text


@pytest.mark.parametrize("identity", ["agent-AJ_x1", "agent-anything", "agent-"])
def test_identities_reserved_for_agents_are_refused(http: TestClient, identity: str) -> None:
    resp = http.get("/token", params={"room": "conv_abc", "identity": identity})
    assert resp.status_code == 403 and "reserved for agents" in resp.json()["error"]


def test_an_identity_already_in_the_room_is_refused(http: TestClient) -> None:
    resp = http.get("/token", params={"room": "conv_abc", "identity": "alice"})
    assert resp.status_code == 409 and "already in room" in resp.json()["error"]


def test_when_the_room_cannot_be_checked_no_token_is_minted() -> None:
    async def broken(room: str) -> set[str]:
        raise ConnectionError("livekit-server down")

    resp = TestClient(create_app(SETTINGS, occupants=broken)).get("/token")
    assert resp.status_code == 503 and "token" not in resp.json()


def test_tokens_carry_only_the_configured_attributes_and_cannot_change_them() -> None:
    granted = dataclasses.replace(SETTINGS, token_attributes={"alicia.reasoning": "summary"})
    data = TestClient(create_app(granted, occupants=occupants)).get("/token").json()
    claims = api.TokenVerifier(KEY, SECRET).verify(data["token"])
    assert claims.attributes == {"alicia.reasoning": "summary"}
    assert claims.video is not None and not claims.video.can_update_own_metadata
    assert not claims.video.agent and not claims.video.room_admin
    assert claims.kind in (None, "", "standard")


def test_token_grants_join_to_the_asked_room_and_identity(http: TestClient) -> None:
    resp = http.get("/token", params={"room": "conv_abc", "identity": "web-1"})
    assert resp.status_code == 200
    assert resp.headers["cache-control"] == "no-store"
    data = resp.json()
    assert data["url"] == "ws://127.0.0.1:7880"
    assert (data["room"], data["identity"]) == ("conv_abc", "web-1")
    claims = api.TokenVerifier(KEY, SECRET).verify(data["token"])
    assert claims.identity == "web-1"
    assert claims.video is not None
    assert claims.video.room == "conv_abc" and claims.video.room_join
    assert claims.video.can_publish_data
    assert SECRET not in resp.text


def test_token_defaults_to_a_new_room_and_identity(http: TestClient) -> None:
    a = http.get("/token").json()
    b = http.get("/token").json()
    assert a["room"].startswith("conv_") and a["identity"].startswith("web-")
    assert a["room"] != b["room"]


@pytest.mark.parametrize(
    "params",
    [{"room": "a b"}, {"room": "x" * 129}, {"identity": "<script>"}, {"room": "ü"}],
)
def test_token_rejects_bad_names(http: TestClient, params: dict[str, str]) -> None:
    resp = http.get("/token", params=params)
    assert resp.status_code == 400
    assert "[A-Za-z0-9_.-]" in resp.json()["error"]


def test_index_and_bundle_are_served(http: TestClient) -> None:
    if not BUNDLE.is_file():
        pytest.fail("web bundle missing: scripts/setup runs npm ci && npm run build")
    index = http.get("/")
    assert index.status_code == 200
    assert '<script type="module" src="dist/app.js">' in index.text
    assert 'id="show-reasoning"' in index.text
    js = http.get("/dist/app.js")
    assert js.status_code == 200
    assert "javascript" in js.headers["content-type"]
    assert "reasoning_step_display" in js.text  # our code, bundled
    assert http.get("/style.css").status_code == 200
    assert http.get("/healthz").text == "ok"
    assert http.get("/nope.js").status_code == 404


def test_index_explains_a_missing_bundle(
    http: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(web.app, "BUNDLE", tmp_path / "absent.js")
    resp = http.get("/")
    assert resp.status_code == 503 and "scripts/setup" in resp.text


ENV = {"LIVEKIT_URL": "ws://x", "LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s"}


def test_settings_from_env() -> None:
    env = {
        "LIVEKIT_URL": "ws://livekit:7880",
        "ALICIA_WEB_LIVEKIT_URL": "ws://localhost:7880",
        "LIVEKIT_API_KEY": "k",
        "LIVEKIT_API_SECRET": "s",
        "ALICIA_WEB_PORT": "9000",
    }
    s = WebSettings.from_env(env)
    assert (s.livekit_url, s.host, s.port) == ("ws://localhost:7880", "127.0.0.1", 9000)
    assert "api_secret" not in repr(s) and "api_key" not in repr(s)
    with pytest.raises(WebSettingsError, match="LIVEKIT_API_KEY, LIVEKIT_API_SECRET"):
        WebSettings.from_env({"LIVEKIT_URL": "ws://x"})
    with pytest.raises(WebSettingsError, match="integer"):
        WebSettings.from_env({**env, "ALICIA_WEB_PORT": "http"})
    assert s.api_url == "ws://livekit:7880"  # the server-side URL asks who is in a room
    more = WebSettings.from_env(
        {
            **env,
            "ALICIA_WEB_TOKENS": "dev",
            "ALICIA_WEB_TOKEN_ATTRIBUTES": "alicia.reasoning=full, alicia.operator=true",
            "ALICIA_WEB_RESERVED_IDENTITIES": "agent-,bot-",
        }
    )
    assert more.tokens == "dev" and more.reserved_prefixes == ("agent-", "bot-")
    assert more.token_attributes == {"alicia.reasoning": "full", "alicia.operator": "true"}
    with pytest.raises(WebSettingsError, match="off or dev"):
        WebSettings.from_env({**env, "ALICIA_WEB_TOKENS": "yes"})
    with pytest.raises(WebSettingsError, match="key=value"):
        WebSettings.from_env({**env, "ALICIA_WEB_TOKEN_ATTRIBUTES": "oops"})
    # The documented default (a debugging grant) and the documented "none".
    assert s.token_attributes == {"alicia.reasoning": "full"}
    none = WebSettings.from_env({**env, "ALICIA_WEB_TOKEN_ATTRIBUTES": "none"})
    assert none.token_attributes == {}
