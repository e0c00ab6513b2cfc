"""Reasoning kept for a provider's pass-back rule, sealed while it waits.

Some providers need their own reasoning back (:mod:`alicia.agent.llm.providers`): between the
rounds of a turn (DeepSeek V4, OpenRouter) or from turn to turn (the Responses API's
reasoning items). A :class:`Keeper` holds that material as :class:`Kept` values: sealed
with the conversation's data key (JWE, the same sealing as ``encryptedValue``) when the
conversation has one, so under zero data retention no plaintext reasoning waits in
memory between requests; opened only to build the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ["Keeper", "Kept"]

_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


@dataclass(frozen=True, slots=True)
class Kept:
    """One round's pass-back material: sealed (``sealed``) or, without a key, in memory."""

    sealed: str | None = None
    plain: dict[str, Any] | None = None


class Keeper:
    """Seals pass-back material for one conversation; opens it for the next request."""

    __slots__ = ("_open", "_seal")

    def __init__(
        self,
        seal: Callable[[str], str] | None = None,
        open_: Callable[[str], str] | None = None,
    ) -> None:
        """``seal``/``open_``: the conversation's JWE functions (None: keep in memory)."""
        self._seal = seal
        self._open = open_

    @property
    def sealing(self) -> bool:
        """Material is kept encrypted."""
        return self._seal is not None

    def keep(self, material: dict[str, Any] | None) -> Kept | None:
        """``material`` as a :class:`Kept` (None stays None)."""
        if material is None:
            return None
        if self._seal is None:
            return Kept(plain=material)
        return Kept(sealed=self._seal(_encode(material).decode()))

    def open(self, kept: Kept | None) -> dict[str, Any] | None:
        """The material of ``kept`` (raises the sealer's error if it cannot be opened)."""
        if kept is None:
            return None
        if kept.sealed is None:
            return kept.plain
        if self._open is None:
            raise ValueError("kept reasoning is sealed but no key can open it")
        return _decode(self._open(kept.sealed).encode())
