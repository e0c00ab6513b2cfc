"""The web debug app: token endpoint, static bundle, settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from livekit import api
from starlette.testclient import TestClient

import web.app
from web import BUNDLE, WebSettings, create_app
from web.settings import WebSettingsError

KEY = "devkey"
SECRET = "alicia-dev-secret-0123456789abcdef0123"
SETTINGS = WebSettings(livekit_url="ws://127.0.0.1:7880", api_key=KEY, api_secret=SECRET)


@pytest.fixture
def http() -> TestClient:
    return TestClient(create_app(SETTINGS))


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
