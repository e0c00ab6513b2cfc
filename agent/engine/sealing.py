"""Encrypted reasoning values: a step sealed for clients that may not read it in plaintext.

:class:`ReasoningSealer` turns a step's text into JWE compact serialisation (RFC 7516)
with ``alg: dir`` and ``enc: A256GCM`` through joserfc. The protected header names the key
(``kid``), the conversation (``cid``) and what the value is for (:data:`BINDING`: its
kind, the message or call it belongs to, the caller it was issued to); the protected
header is the cipher's additional authenticated data, so a value cannot be moved to
another conversation, message or caller. Keys come from
``ALICIA_REASONING_KEYS`` (``kid=base64(32 bytes)``, comma-separated): the first key
seals, every key opens (rotation).

Exception tree::

    ValueError
    └── KeyConfigError       ALICIA_REASONING_KEYS does not parse
    Exception
    └── SealError            a value was changed, belongs to another conversation, names
                             an unknown key, or is no JWE at all (never a crash)
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Final, Protocol

from joserfc import jwe
from joserfc.errors import JoseError
from joserfc.jwe import JWERegistry
from joserfc.jwk import OctKey
from joserfc.registry import HeaderParameter

__all__ = [
    "BINDING",
    "DataKeys",
    "KeyConfigError",
    "ReasoningSealer",
    "SealError",
    "parse_keys",
]

_ALG: Final = "dir"
_ENC: Final = "A256GCM"
BINDING: Final = {
    "knd": "what the value holds: step (reasoning text) or passback (provider material)",
    "ref": "the message or tool call it belongs to",
    "sub": "the identity of the caller it was issued to",
}
"""Protected header fields that bind a value to what it is for (all optional)."""
_REGISTRY: Final = JWERegistry(
    header_registry={
        "cid": HeaderParameter("Alicia conversation id", "str", required=True),
        **{name: HeaderParameter(doc, "str") for name, doc in BINDING.items()},
    },
    algorithms=[_ALG, _ENC],
)


class KeyConfigError(ValueError):
    """``ALICIA_REASONING_KEYS`` is malformed (names the bad item, never the key)."""


class SealError(Exception):
    """An encrypted value cannot be opened: tampered, another conversation's, unknown key."""


class DataKeys(Protocol):
    """Where a conversation's own data key comes from (``agent/storage/keys.py``)."""

    async def data_key(self, conversation_id: str) -> bytes | None:
        """The conversation's 32-byte data key, made on first use; ``None`` if erased."""
        ...


def parse_keys(spec: str) -> list[tuple[str, bytes]]:
    """``kid=base64,kid2=base64`` to ``[(kid, 32 bytes), …]``, in order."""
    keys: list[tuple[str, bytes]] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        kid, sep, encoded = item.partition("=")
        kid = kid.strip()
        if not sep or not kid:
            raise KeyConfigError(f"ALICIA_REASONING_KEYS items are kid=base64, not {kid!r}…")
        try:
            raw = base64.b64decode(encoded.strip() + "=" * (-len(encoded.strip()) % 4))
        except (binascii.Error, ValueError):
            raise KeyConfigError(f"key {kid!r} is not base64") from None
        if len(raw) != 32:
            raise KeyConfigError(f"key {kid!r} must be 32 bytes, not {len(raw)}")
        if any(kid == k for k, _ in keys):
            raise KeyConfigError(f"key id {kid!r} appears twice")
        keys.append((kid, raw))
    return keys


class ReasoningSealer:
    """Seals step text for one deployment's keys; opens what they sealed."""

    __slots__ = ("_keys", "_kid")

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        """``keys``: ``(kid, 32 bytes)``; the first one seals."""
        if not keys:
            raise KeyConfigError("at least one reasoning key is needed")
        self._kid = keys[0][0]
        self._keys = {kid: OctKey.import_key(raw) for kid, raw in keys}

    @property
    def kid(self) -> str:
        """The id of the key that seals."""
        return self._kid

    def seal(self, conversation_id: str, text: str, **bind: str) -> str:
        """``text`` as JWE compact serialisation bound to ``conversation_id`` and to
        ``bind`` (:data:`BINDING`: ``knd``, ``ref``, ``sub``)."""
        header = {"alg": _ALG, "enc": _ENC, "kid": self._kid, "cid": conversation_id, **bind}
        return jwe.encrypt_compact(header, text.encode(), self._keys[self._kid], registry=_REGISTRY)

    def open(self, value: str, conversation_id: str, **bind: str) -> str:
        """The text sealed in ``value`` for ``conversation_id`` (and, for each field of
        ``bind``, sealed with that same value); :class:`SealError` if not."""
        try:
            kid = _protected_kid(value)
            key = self._keys.get(kid)
            if key is None:
                raise SealError(f"unknown key id {kid!r}")
            obj = jwe.decrypt_compact(value, key, registry=_REGISTRY)
        except SealError:
            raise
        except (JoseError, ValueError, TypeError, KeyError, binascii.Error) as exc:
            raise SealError(f"not a valid encrypted value: {type(exc).__name__}") from None
        if obj.protected.get("cid") != conversation_id:
            raise SealError("the encrypted value belongs to another conversation")
        for name, expected in bind.items():
            if obj.protected.get(name) != expected:
                raise SealError(f"the encrypted value was not issued for this {_WHAT[name]}")
        if obj.plaintext is None:
            raise SealError("the encrypted value holds nothing")
        try:
            return obj.plaintext.decode()
        except UnicodeDecodeError:
            raise SealError("the encrypted value is not text") from None


_WHAT: Final = {"knd": "use", "ref": "message", "sub": "caller"}


def _protected_kid(value: str) -> str:
    """The ``kid`` of a compact JWE's protected header (before any decryption)."""
    import json

    head = value.split(".", 1)[0]
    header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    kid = header.get("kid") if isinstance(header, dict) else None
    if not isinstance(kid, str):
        raise ValueError("no kid")
    return kid
