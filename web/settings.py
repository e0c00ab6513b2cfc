"""Settings of the web debug page, read from the environment once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "WebSettings", "WebSettingsError"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


class WebSettingsError(ValueError):
    """A required variable is missing or a value does not parse."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSettings:
    """What the page's server needs (see :meth:`from_env`)."""

    livekit_url: str
    """``ALICIA_WEB_LIVEKIT_URL``, else ``LIVEKIT_URL`` (required): the LiveKit URL the
    *browser* connects to (differs from the worker's inside Docker)."""
    api_key: str = field(repr=False)
    """``LIVEKIT_API_KEY`` (required): key the join tokens are signed for."""
    api_secret: str = field(repr=False)
    """``LIVEKIT_API_SECRET`` (required): secret that signs the join tokens."""
    host: str = DEFAULT_HOST
    """``ALICIA_WEB_HOST`` (default ``127.0.0.1``): address to listen on."""
    port: int = DEFAULT_PORT
    """``ALICIA_WEB_PORT`` (default 8080): port to listen on (0 = any free port)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WebSettings:
        """Build settings from ``env`` (a mapping like ``os.environ``)."""

        def get(name: str) -> str:
            return env.get(name, "").strip()

        url = get("ALICIA_WEB_LIVEKIT_URL") or get("LIVEKIT_URL")
        missing = [
            n
            for n, v in (
                ("LIVEKIT_URL", url),
                ("LIVEKIT_API_KEY", get("LIVEKIT_API_KEY")),
                ("LIVEKIT_API_SECRET", get("LIVEKIT_API_SECRET")),
            )
            if not v
        ]
        if missing:
            raise WebSettingsError(f"{', '.join(missing)} required")
        port_text = get("ALICIA_WEB_PORT") or str(DEFAULT_PORT)
        try:
            port = int(port_text)
        except ValueError:
            msg = f"ALICIA_WEB_PORT must be an integer, not {port_text!r}"
            raise WebSettingsError(msg) from None
        if not 0 <= port <= 65535:
            raise WebSettingsError(f"ALICIA_WEB_PORT out of range: {port}")
        return cls(
            livekit_url=url,
            api_key=get("LIVEKIT_API_KEY"),
            api_secret=get("LIVEKIT_API_SECRET"),
            host=get("ALICIA_WEB_HOST") or DEFAULT_HOST,
            port=port,
        )
