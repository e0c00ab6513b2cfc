"""Settings of the web debug page, read from the environment once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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
    tokens: Literal["off", "dev"] = "off"
    """``ALICIA_WEB_TOKENS`` (default ``off``): ``dev`` turns on ``GET /token``, a
    development issuer that mints a join token for whoever can reach the page. Off, the
    page needs a token minted by the app's own backend (``#token=…&url=…``)."""
    api_url: str = ""
    """``LIVEKIT_URL`` (server side; default: ``livekit_url``): where the token endpoint
    asks livekit-server who is in a room."""
    reserved_prefixes: tuple[str, ...] = ("agent-",)
    """``ALICIA_WEB_RESERVED_IDENTITIES`` (default ``agent-``, comma-separated prefixes):
    identities the token endpoint never issues (livekit-agents names its agents
    ``agent-<job id>``)."""
    token_attributes: Mapping[str, str] = field(
        default_factory=lambda: {"alicia.reasoning": "full"}
    )
    """``ALICIA_WEB_TOKEN_ATTRIBUTES`` (default ``alicia.reasoning=full``, a debugging
    grant; ``k=v,k2=v2``, or ``none`` for no attributes): the only participant attributes
    (grants) minted tokens carry. Tokens never allow updating one's own attributes, so
    these stay grants."""

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
        tokens = get("ALICIA_WEB_TOKENS").lower() or "off"
        if tokens not in ("off", "dev"):
            raise WebSettingsError(f"ALICIA_WEB_TOKENS must be off or dev, not {tokens!r}")
        prefixes = get("ALICIA_WEB_RESERVED_IDENTITIES") or "agent-"
        raw = env.get("ALICIA_WEB_TOKEN_ATTRIBUTES")
        attributes: dict[str, str] = {}
        if raw is None or not raw.strip():
            attributes = {"alicia.reasoning": "full"}  # the documented debugging default
            raw = ""
        elif raw.strip().lower() == "none":
            raw = ""
        for item in filter(None, (i.strip() for i in raw.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                msg = f"ALICIA_WEB_TOKEN_ATTRIBUTES items are key=value, not {item!r}"
                raise WebSettingsError(msg)
            attributes[key.strip()] = value.strip()
        return cls(
            livekit_url=url,
            api_key=get("LIVEKIT_API_KEY"),
            api_secret=get("LIVEKIT_API_SECRET"),
            host=get("ALICIA_WEB_HOST") or DEFAULT_HOST,
            port=port,
            tokens="dev" if tokens == "dev" else "off",
            api_url=get("LIVEKIT_URL") or url,
            reserved_prefixes=tuple(p.strip() for p in prefixes.split(",") if p.strip()),
            token_attributes=attributes,
        )
