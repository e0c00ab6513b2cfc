"""docker-compose.yml agrees with the code: services, ports, keys and env.

Docker does not run here: the file is parsed (PyYAML) and checked against
config/livekit.yaml, the pinned livekit-server version, agent/settings.py and
web/settings.py. Values in ``${VAR:-default}`` form are checked with their defaults.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from alicia.agent.settings import Settings
from alicia.web.settings import DEFAULT_PORT, WebSettings
from tests.paths import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SERVICES = {"livekit", "postgres", "migrate", "demo-llm", "worker", "web"}
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    svc = compose["services"]
    assert isinstance(svc, dict)
    return svc


def env_of(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment with ``${VAR:-default}`` resolved to the default."""
    raw = service.get("environment") or {}
    assert isinstance(raw, dict), "use the mapping form for environment"
    return {k: _VAR.sub(lambda m: m.group(2) or "", str(v)) for k, v in raw.items()}


def published(service: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(host_ip, host_port, container_port, proto)`` for each published port."""
    out = []
    for spec in service.get("ports", []):
        text, _, proto = str(spec).partition("/")
        host_ip, host_port, container = text.split(":")
        out.append((host_ip, host_port, container, proto or "tcp"))
    return out


def command_option(service: dict[str, Any], option: str) -> str | None:
    cmd = service["command"]
    args = cmd if isinstance(cmd, list) else shlex.split(cmd)
    return args[args.index(option) + 1] if option in args else None


def settings_env_names() -> set[str]:
    """Every environment variable agent/settings.py reads."""
    source = (ROOT / "agent" / "settings.py").read_text()
    names = set(re.findall(r'r\.\w+\(\s*"([A-Z][A-Z0-9_]+)"', source))
    assert {"LIVEKIT_URL", "LLM_BASE_URL", "LLM_MODEL", "DATABASE_URL"} <= names, names
    return names


def test_the_stack_has_its_services_and_the_app_image_builds_from_the_repo(
    services: dict[str, dict[str, Any]],
) -> None:
    assert set(services) == SERVICES
    for name in ("migrate", "demo-llm", "worker", "web"):
        assert services[name]["build"] == ".", name
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists() or src == "README.md", f"Dockerfile COPY {src}"
    assert "npm ci" in dockerfile and "npm run build" in dockerfile


def test_livekit_image_matches_the_pinned_server_version(
    services: dict[str, dict[str, Any]],
) -> None:
    installer = (ROOT / "scripts" / "install-livekit-server").read_text()
    match = re.search(r"LIVEKIT_SERVER_VERSION:-(v[\d.]+)", installer)
    assert match is not None
    assert services["livekit"]["image"] == f"livekit/livekit-server:{match.group(1)}"


def test_livekit_config_ports_and_keys_match_the_loopback_config(
    services: dict[str, dict[str, Any]],
) -> None:
    lk = services["livekit"]
    mount = next(v for v in lk["volumes"] if v.endswith(":/etc/livekit.yaml:ro"))
    compose_cfg = load(ROOT / mount.split(":")[0])
    base = load(ROOT / "config" / "livekit.yaml")
    assert command_option(lk, "--config") == "/etc/livekit.yaml"
    assert compose_cfg["port"] == base["port"]
    assert compose_cfg["keys"] == base["keys"]
    for key in ("tcp_port", "port_range_start", "port_range_end"):
        assert compose_cfg["rtc"][key] == base["rtc"][key], key
    assert "bind_addresses" not in compose_cfg  # all interfaces inside the container
    ports = published(lk)
    assert ("127.0.0.1", str(base["port"]), str(base["port"]), "tcp") in ports
    rtc = base["rtc"]
    assert ("127.0.0.1", str(rtc["tcp_port"]), str(rtc["tcp_port"]), "tcp") in ports
    udp = f"{rtc['port_range_start']}-{rtc['port_range_end']}"
    assert ("127.0.0.1", udp, udp, "udp") in ports


def test_every_published_port_is_on_loopback(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for host_ip, *_ in published(svc):
            assert host_ip == "127.0.0.1", name
    assert "ports" not in services["postgres"]


def test_worker_env_is_valid_settings_pointing_at_the_compose_services(
    services: dict[str, dict[str, Any]],
) -> None:
    env = env_of(services["worker"])
    assert set(env) <= settings_env_names(), set(env) - settings_env_names()
    settings = Settings.from_env(env)  # raises on a missing or bad value
    base = load(ROOT / "config" / "livekit.yaml")
    assert settings.livekit_url == f"ws://livekit:{base['port']}"
    assert {settings.livekit_api_key: settings.livekit_api_secret} == base["keys"]
    llm = urlsplit(settings.llm_base_url)
    assert llm.hostname == "demo-llm"
    assert str(llm.port) == command_option(services["demo-llm"], "--port")
    assert llm.path == "/v1"
    assert command_option(services["demo-llm"], "--host") == "0.0.0.0"
    assert services["worker"]["command"] == ["python", "-m", "alicia.agent", "start"]


def test_database_url_matches_postgres_and_migrations_run_first(
    services: dict[str, dict[str, Any]],
) -> None:
    pg = env_of(services["postgres"])
    for name in ("worker", "migrate"):
        url = make_url(env_of(services[name])["DATABASE_URL"])
        assert url.drivername == "postgresql+asyncpg", name
        assert (url.username, url.password, url.database) == (
            pg["POSTGRES_USER"],
            pg["POSTGRES_PASSWORD"],
            pg["POSTGRES_DB"],
        )
        assert (url.host, url.port) == ("postgres", 5432)
    assert services["migrate"]["command"] == ["alembic", "upgrade", "head"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    deps = services["worker"]["depends_on"]
    assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert {"livekit", "demo-llm"} <= set(deps)
    assert (ROOT / "alembic.ini").is_file()


def test_web_env_is_valid_and_its_port_is_published(services: dict[str, dict[str, Any]]) -> None:
    web = services["web"]
    env = env_of(web)
    settings = WebSettings.from_env(env)
    worker = env_of(services["worker"])
    assert (settings.api_key, settings.api_secret) == (
        worker["LIVEKIT_API_KEY"],
        worker["LIVEKIT_API_SECRET"],
    )
    base = load(ROOT / "config" / "livekit.yaml")
    # The browser runs on the host: it gets the published livekit port on loopback.
    assert settings.livekit_url == f"ws://127.0.0.1:{base['port']}"
    assert settings.port == DEFAULT_PORT
    assert ("127.0.0.1", str(DEFAULT_PORT), str(DEFAULT_PORT), "tcp") in published(web)
    assert command_option(web, "--host") == "0.0.0.0"
    assert web["command"][:3] == ["python", "-m", "alicia.web"]
