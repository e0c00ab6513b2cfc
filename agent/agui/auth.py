"""Who calls the AG-UI endpoints: a LiveKit access token as the bearer token.

The app backend that mints its users' room tokens mints these too: the same JWT
(``livekit-api`` ``AccessToken``, signed with ``LIVEKIT_API_KEY``/``LIVEKIT_API_SECRET``),
whose room grant names the thread (the conversation, like a room) and whose attribute
``alicia.reasoning`` is the caller's reasoning level, honoured under the same rule as in
a room (not when the token lets its holder update its own attributes).

Exception tree::

    Exception
    └── AuthError        no token, or not a valid one (HTTP 401)
        └── Forbidden    a valid token for another thread or room (HTTP 403)
"""

from __future__ import annotations

from dataclasses import dataclass

from livekit import api

from alicia.agent.engine.participants import REASONING_GRANT, Visibility, visibility_of

__all__ = ["AuthError", "Caller", "Forbidden", "TokenCheck", "require_room"]


class AuthError(Exception):
    """The request carries no valid bearer token (HTTP 401)."""

    status = 401


class Forbidden(AuthError):
    """The token is valid but not for this thread or room (HTTP 403)."""

    status = 403


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified caller: its identity, the room (thread) its token is for, its level."""

    identity: str
    room: str
    level: Visibility


class TokenCheck:
    """Verifies bearer tokens with the deployment's LiveKit API key and secret."""

    __slots__ = ("_default", "_verifier")

    def __init__(self, api_key: str, api_secret: str, *, default: Visibility) -> None:
        """``default``: the level of a token that grants none (``ALICIA_REASONING_VISIBILITY``)."""
        self._verifier = api.TokenVerifier(api_key, api_secret)
        self._default = default

    def caller(self, authorization: str | None) -> Caller:
        """The caller of a request with this ``Authorization`` header."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("an Authorization: Bearer <LiveKit access token> header is required")
        try:
            claims = self._verifier.verify(token.strip())
        except Exception as exc:  # PyJWT's errors, a malformed token: never a 500
            raise AuthError(f"the token is not valid: {type(exc).__name__}") from None
        video = claims.video
        if not claims.identity or video is None or not video.room_join or not video.room:
            raise AuthError("the token must name an identity and grant room_join to a room")
        attributes = claims.attributes or {}
        granted = None if video.can_update_own_metadata else attributes.get(REASONING_GRANT)
        return Caller(claims.identity, video.room, visibility_of(granted, self._default))


def require_room(caller: Caller, room: str) -> None:
    """Raise :class:`Forbidden` unless ``caller``'s token is for ``room`` (a thread id)."""
    if caller.room != room:
        raise Forbidden(f"the token is for room {caller.room!r}, not {room!r}")
