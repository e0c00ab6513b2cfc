"""Per-conversation data keys in the database, wrapped by the master key; crypto-shredding.

:class:`KeyStore` implements the engine's :class:`~alicia.agent.engine.sealing.DataKeys` port.
The first time a conversation asks, a random 32-byte data key is made, sealed with the
deployment's master key (the first of ``ALICIA_REASONING_KEYS``, bound to the
conversation) and stored in ``alicia_conversation_keys``; later it is read and unsealed
(any configured master key opens it: rotation). :meth:`KeyStore.erase` destroys the
wrapped key: whatever was encrypted with it cannot be decrypted again, anywhere.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import secrets
from typing import Final

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from alicia.agent.engine.sealing import ReasoningSealer, SealError

from .engine import create_engine, is_postgres
from .tables import conversation_keys as KEYS

__all__ = ["KeyErased", "KeyStore"]

logger = logging.getLogger("alicia.storage.keys")

_UTC: Final = dt.UTC


class KeyErased(SealError):
    """The conversation's data key was erased (or its master key is gone): its encrypted
    reasoning is gone for good."""


class KeyStore:
    """Data keys of conversations in the database at ``url``; an async context manager."""

    def __init__(self, url: str, master: ReasoningSealer, *, migrate: bool = True) -> None:
        """``master`` seals and opens the data keys; ``migrate``: apply migrations first."""
        self.url = url
        self._master = master
        self._migrate = migrate
        self._engine: AsyncEngine | None = None

    async def __aenter__(self) -> KeyStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the connection pool."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def _db(self) -> AsyncEngine:
        if self._engine is None:
            self._engine = create_engine(self.url, pooled=False)
        if self._migrate:  # until it has succeeded once (a first try may fail or time out)
            from .migrate import migrate_once

            await migrate_once(self._engine)
            self._migrate = False
        return self._engine

    async def data_key(self, conversation_id: str, *, create: bool = True) -> bytes | None:
        """The conversation's data key (made on first use unless ``create`` is False);
        ``None`` if it was erased (or, with ``create`` False, never made)."""
        engine = await self._db()
        async with engine.begin() as conn:
            if create:
                key = base64.b64encode(secrets.token_bytes(32)).decode()
                row = {
                    "conversation_id": conversation_id,
                    "kid": self._master.kid,
                    "wrapped": self._master.seal(conversation_id, key),
                }
                insert = (pg_dialect if is_postgres(self.url) else sqlite_dialect).insert(KEYS)
                await conn.execute(insert.values(**row).on_conflict_do_nothing())
            found = (
                await conn.execute(
                    select(KEYS.c.wrapped).where(KEYS.c.conversation_id == conversation_id)
                )
            ).one_or_none()
        if found is None or found.wrapped is None:
            return None
        try:
            return base64.b64decode(self._master.open(found.wrapped, conversation_id))
        except SealError as exc:
            raise KeyErased(f"the data key of {conversation_id!r} cannot be opened: {exc}") from exc

    async def erase(self, conversation_id: str) -> bool:
        """Destroy the conversation's data key; True if there was a live one."""
        engine = await self._db()
        async with engine.begin() as conn:
            done = await conn.execute(
                update(KEYS)
                .where(KEYS.c.conversation_id == conversation_id, KEYS.c.wrapped.is_not(None))
                .values(wrapped=None, erased_at=dt.datetime.now(_UTC))
            )
        erased = bool(done.rowcount)
        logger.info("data key erased", extra={"conversation": conversation_id, "done": erased})
        return erased
