"""Join tokens for debug clients, minted with ``livekit-api`` from an API key/secret.

The same token is the bearer token of the AG-UI endpoint (``agent/agui/``): its room is
the thread, its ``alicia.reasoning`` attribute the caller's level
(``alicia-client --print-token --room THREAD --grant-reasoning LEVEL``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Final

from livekit import api

__all__ = ["DEBUG_ATTRIBUTES", "NAME_PATTERN", "mint_token", "valid_name"]

DEBUG_ATTRIBUTES: Final = {"alicia.reasoning": "full"}
"""What the project's own debugging tokens grant (the CLI's API-key path, the web page's
development issuer, the demo): plaintext reasoning. Production tokens come from the
app's backend and grant what it decides."""

NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
"""Room names and identities debug clients may ask for."""


def valid_name(value: str) -> bool:
    """True if ``value`` is an acceptable room name or identity (1-128 of ``[A-Za-z0-9_.-]``)."""
    return NAME_PATTERN.fullmatch(value) is not None


def mint_token(
    api_key: str,
    api_secret: str,
    *,
    room: str,
    identity: str,
    ttl: timedelta = timedelta(hours=6),
    attributes: Mapping[str, str] | None = DEBUG_ATTRIBUTES,
) -> str:
    """A JWT that lets ``identity`` join ``room`` and publish data, with ``attributes``.

    The participant may not update its own metadata or attributes, so the attributes
    minted here are grants the worker can honour.
    """
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        can_publish=True,
        can_publish_data=True,
        can_subscribe=True,
        can_update_own_metadata=False,
    )
    tok = api.AccessToken(api_key, api_secret).with_identity(identity).with_name(identity)
    if attributes:
        tok = tok.with_attributes(dict(attributes))
    return tok.with_grants(grants).with_ttl(ttl).to_jwt()
