"""The real livekit-server on loopback, on free ports."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .ports import free_port, free_udp_range
from .served import ServedProcess

__all__ = ["DEV_API_KEY", "DEV_API_SECRET", "LiveKitServer", "livekit_binary"]

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "livekit.yaml"
INSTALLER = ROOT / "scripts" / "install-livekit-server"
DEV_API_KEY = "devkey"
DEV_API_SECRET = "alicia-dev-secret-0123456789abcdef0123"


def livekit_binary() -> Path:
    """Path of the livekit-server binary, building it (once per machine) if needed."""
    override = os.environ.get("LIVEKIT_SERVER_BIN")
    if override:
        return Path(override)
    out = subprocess.run([str(INSTALLER)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


class LiveKitServer(ServedProcess):
    """A livekit-server process bound to 127.0.0.1 (dev keys, loopback ICE candidates)."""

    name = "livekit-server"
    start_timeout_s = 30.0

    def __init__(
        self,
        *,
        log_level: str = "warn",
        webhooks: Sequence[str] = (),
        redis: str | None = None,
        relay_retry_timeout_s: float | None = None,
    ) -> None:
        """``webhooks``: URLs livekit-server posts its webhook events to (signed with the
        dev key); ``redis``: ``host:port`` of the Redis a cluster's nodes share (distributed
        mode; one node alone without it); ``relay_retry_timeout_s``: its
        ``signal_relay.retry_timeout`` (None: livekit-server's 7.5 s)."""
        self.pick_ports()
        self.api_key = DEV_API_KEY
        self.api_secret = DEV_API_SECRET
        self._log_level = log_level
        self.webhooks = tuple(webhooks)
        self.redis = redis
        self.relay_retry_timeout_s = relay_retry_timeout_s
        super().__init__()

    @property
    def url(self) -> str:
        """The websocket URL clients and agents connect to."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        """The HTTP URL of the server API (room service etc.)."""
        return f"http://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        """The checked-in loopback config with this instance's ports."""
        text = CONFIG.read_text()
        text = text.replace("port: 7880", f"port: {self.port}")
        text = text.replace("tcp_port: 7881", f"tcp_port: {self.tcp_port}")
        text = text.replace("port_range_start: 50000", f"port_range_start: {self.udp_start}")
        text = text.replace("port_range_end: 50100", f"port_range_end: {self.udp_start + 63}")
        text = text.replace("level: warn", f"level: {self._log_level}")
        if self.redis:
            text += f"redis:\n  address: {self.redis}\n"
        if self.relay_retry_timeout_s is not None:
            text += f"signal_relay:\n  retry_timeout: {self.relay_retry_timeout_s * 1000:.0f}ms\n"
        if self.webhooks:
            urls = "".join(f"    - {url}\n" for url in self.webhooks)
            text += f"webhook:\n  api_key: {self.api_key}\n  urls:\n{urls}"
        return text

    def pick_ports(self) -> None:
        """Free loopback ports for signalling, TCP and a range of 64 for UDP media."""
        self.port = free_port()
        self.tcp_port = free_port()
        self.udp_start = free_udp_range(64)

    @property
    def ready_url(self) -> str:
        """The HTTP endpoint, 200 once the server serves."""
        return self.http_url

    def command(self, folder: Path) -> list[str]:
        """The binary with the config written into ``folder``."""
        cfg = folder / "livekit.yaml"
        cfg.write_text(self.config_text())
        return [str(livekit_binary()), "--config", str(cfg)]

    def token(
        self,
        identity: str,
        room: str,
        *,
        name: str | None = None,
        agent: bool = False,
        attributes: dict[str, str] | None = None,
    ) -> str:
        """A join token for ``identity`` in ``room``, minted with ``livekit-api``.

        Like every debugging token of the project it grants plaintext reasoning
        (``alicia.reasoning=full``) unless ``attributes`` says otherwise.
        """
        from livekit import api

        grants = api.VideoGrants(room_join=True, room=room, agent=agent)
        tok = api.AccessToken(self.api_key, self.api_secret).with_identity(identity)
        attrs = {"alicia.reasoning": "full"} if attributes is None else attributes
        if attrs:
            tok = tok.with_attributes(attrs)
        return tok.with_name(name or identity).with_grants(grants).to_jwt()

    def env(self) -> dict[str, str]:
        """``LIVEKIT_URL``/``LIVEKIT_API_KEY``/``LIVEKIT_API_SECRET`` for this server."""
        return {
            "LIVEKIT_URL": self.url,
            "LIVEKIT_API_KEY": self.api_key,
            "LIVEKIT_API_SECRET": self.api_secret,
        }
