"""Request bodies of the HTTP front ends (AG-UI, the watcher's webhooks), read with a limit.

:func:`read_body` reads a body as it arrives and stops at the limit
(:class:`BodyTooLarge`), so a huge body is refused without being buffered; a
``Content-Length`` over the limit is refused before anything is read.
"""

from __future__ import annotations

from starlette.requests import Request

__all__ = ["BodyTooLarge", "read_body"]


class BodyTooLarge(Exception):
    """The request body is over the limit (HTTP 413)."""

    status = 413


async def read_body(request: Request, limit: int, what: str = "the request body") -> bytes:
    """The request body, read as it arrives; :class:`BodyTooLarge` once over ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"{what} is over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"{what} is over {limit} bytes")
    return bytes(body)
