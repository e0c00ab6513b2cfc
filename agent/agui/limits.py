"""How many AG-UI streams a caller, and the process, may hold at once.

Every run (``POST /agui``) and room stream (``GET /agui/rooms/{room}/events``) holds a
:class:`Slot` from the moment it is accepted (before its body is read or its LiveKit
connection is made) until its response has ended and, for a run, its turn has closed. A
caller (a token identity) holds at most ``ALICIA_AGUI_MAX_PER_CALLER`` slots, runs and
room streams together, and one client address at most ``ALICIA_AGUI_MAX_PER_ADDRESS``
whatever identities its tokens name; the process at most ``ALICIA_AGUI_MAX_RUNS`` of each
kind. So one caller can never take the endpoint from everyone else.

Exception tree::

    Exception
    └── LimitError           no slot for this stream
        ├── CallerLimit      the caller holds its share already (HTTP 429)
        └── ServerBusy       the process serves as many as it may (HTTP 503)
"""

from __future__ import annotations

from typing import Literal

__all__ = ["CallerLimit", "Kind", "LimitError", "Limits", "ServerBusy", "Slot"]

Kind = Literal["run", "room"]


class LimitError(Exception):
    """No slot for this stream."""

    status = 503


class CallerLimit(LimitError):
    """The caller holds ``ALICIA_AGUI_MAX_PER_CALLER`` streams already (HTTP 429)."""

    status = 429


class ServerBusy(LimitError):
    """The process serves ``ALICIA_AGUI_MAX_RUNS`` streams of this kind (HTTP 503)."""

    status = 503


class Slot:
    """One accepted stream's place, freed when its last holder lets go."""

    __slots__ = ("_holders", "_limits", "address", "identity", "kind")

    def __init__(self, limits: Limits, identity: str, kind: Kind, address: str = "") -> None:
        """Held once (by the response that took it)."""
        self._limits = limits
        self.identity = identity
        self.kind = kind
        self.address = address
        self._holders = 1

    @property
    def held(self) -> bool:
        """Someone still holds the slot."""
        return self._holders > 0

    def hold(self) -> None:
        """One more holder (a run's task besides its response); each calls :meth:`release`."""
        if self._holders <= 0:
            raise RuntimeError("the slot was freed already")
        self._holders += 1

    def release(self) -> None:
        """One holder lets go; the last one frees the slot. Extra calls do nothing."""
        if self._holders <= 0:
            return
        self._holders -= 1
        if self._holders == 0:
            self._limits._free(self)


class Limits:
    """The slots of one process (see the module docstring)."""

    def __init__(self, *, per_caller: int, per_kind: int, per_address: int = 16) -> None:
        """``per_caller``: slots one identity may hold; ``per_address``: slots one client
        address may hold; ``per_kind``: runs (and room streams) the process serves at once."""
        self.per_caller = per_caller
        self.per_kind = per_kind
        self.per_address = per_address
        self._callers: dict[str, int] = {}
        """identity -> slots held (only identities holding one)."""
        self._addresses: dict[str, int] = {}
        """client address -> slots held (only addresses holding one)."""
        self._kinds: dict[Kind, int] = {"run": 0, "room": 0}

    def held_by(self, identity: str) -> int:
        """Slots ``identity`` holds now."""
        return self._callers.get(identity, 0)

    def open(self, kind: Kind) -> int:
        """Streams of ``kind`` being served."""
        return self._kinds[kind]

    def take(self, identity: str, kind: Kind, address: str = "") -> Slot:
        """A slot for a new stream of ``identity`` from client ``address``;
        :class:`LimitError` if none is free."""
        if self._callers.get(identity, 0) >= self.per_caller:
            raise CallerLimit(
                f"this caller has {self.per_caller} AG-UI runs and room streams open already "
                "(ALICIA_AGUI_MAX_PER_CALLER); close one and try again"
            )
        if address and self._addresses.get(address, 0) >= self.per_address:
            raise CallerLimit(
                f"this address has {self.per_address} AG-UI runs and room streams open "
                "already (ALICIA_AGUI_MAX_PER_ADDRESS); close one and try again"
            )
        if self._kinds[kind] >= self.per_kind:
            what = "runs" if kind == "run" else "room streams"
            raise ServerBusy(f"too many {what} at once; try again")
        self._callers[identity] = self._callers.get(identity, 0) + 1
        if address:
            self._addresses[address] = self._addresses.get(address, 0) + 1
        self._kinds[kind] += 1
        return Slot(self, identity, kind, address)

    def _free(self, slot: Slot) -> None:
        self._kinds[slot.kind] -= 1
        _drop(self._callers, slot.identity)
        if slot.address:
            _drop(self._addresses, slot.address)


def _drop(held: dict[str, int], key: str) -> None:
    """One slot fewer for ``key`` (forgotten at none)."""
    left = held[key] - 1
    if left:
        held[key] = left
    else:
        del held[key]
