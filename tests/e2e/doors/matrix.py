"""The attack harness's matrix: every door of the table x every attack.

The harness reads ``alicia.agent.gate.doors.DOORS``; for each row and each
:class:`Attack` it either runs the attacker for the row's kind and right (bounded by the
row's own numbers) and checks the refusal the row promises, or names why the attack does
not apply to a row of that kind (:func:`not_applicable`, a rule per kind and right). A
row nothing covers fails the harness: a door added to the table is attacked by
construction, or the harness says it cannot.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from alicia.agent.engine.rights import Right
from alicia.agent.gate.doors import DOORS, Door, Kind

__all__ = ["Attack", "Cell", "Matrix", "not_applicable"]

CELL_TIMEOUT_S = 90.0
"""One attack on one door, at most (a hang is the cell's failure, not the suite's)."""


class Attack(enum.Enum):
    """The same attacks on every door."""

    NO_GRANT = "no grant"
    SELF_GRANT = "a grant set by oneself"
    TOO_MANY = "too many at once"
    TOO_BIG = "too big"
    TOO_SLOW = "too slow"
    NEVER_FINISHED = "never finished"
    MALFORMED = "malformed"
    AFTER_LEAVING = "after leaving"
    GRANT_CHANGED = "after a grant change"
    MANY_IDENTITIES = "many identities, one address"
    MANY_ADDRESSES = "one identity, many addresses"


def not_applicable(door: Door, attack: Attack) -> str | None:
    """Why ``attack`` cannot be made on ``door`` (``None``: it must be made)."""
    room = door.kind is not Kind.HTTP
    right = door.right
    grants = attack in (Attack.NO_GRANT, Attack.SELF_GRANT, Attack.GRANT_CHANGED)
    if grants and right is Right.ANYONE and not door.operations:
        return "anyone in the room may use it: its bounds hold for everyone"
    if attack is not Attack.NO_GRANT and grants and right is Right.LOCAL:
        return "read-only, no content: whoever reaches the listen address (loopback)"
    if attack is Attack.SELF_GRANT and right is Right.PUBLISHER:
        return "publishing the track is the right; no attribute gives it"
    if attack is Attack.GRANT_CHANGED and not room:
        return "an HTTP caller's grant is its token, fixed: a new grant is a new token"
    if attack is Attack.GRANT_CHANGED and right in (Right.PUBLISHER, Right.NOBODY):
        return "no grant to change: its right is not an attribute"
    if door.kind is Kind.CHANGES and attack not in (Attack.NO_GRANT, Attack.SELF_GRANT):
        if attack is Attack.GRANT_CHANGED:
            return None
        return "a change is livekit-server's message, whole, one per change"
    if door.kind in (Kind.PACKETS, Kind.RPC) and attack in (
        Attack.TOO_SLOW,
        Attack.NEVER_FINISHED,
    ):
        return "a packet arrives whole or not at all"
    if door.kind is Kind.PACKETS and attack is Attack.AFTER_LEAVING:
        return "livekit-server relays nothing from one who left; its state is forgotten (Left)"
    if room and attack is Attack.MANY_ADDRESSES:
        return "livekit-server keeps one connection per identity (see the protocol row)"
    if room and door.right is Right.NOBODY and attack not in (Attack.NO_GRANT, Attack.TOO_BIG):
        return "not served: what comes is dropped by the SDK (no handler, no reader)"
    body = (Attack.TOO_BIG, Attack.TOO_SLOW, Attack.NEVER_FINISHED, Attack.MALFORMED)
    if not room and door.at.startswith("GET ") and attack in body:
        return "a GET has no body to hold"
    if right is Right.SIGNED and attack in (
        Attack.TOO_MANY,
        Attack.MANY_IDENTITIES,
        Attack.MANY_ADDRESSES,
    ):
        return "livekit-server is its one sender; an unsigned body is refused as it is read"
    if not room and right is Right.LOCAL and attack is not Attack.NO_GRANT:
        return "read-only GET, no body, no content: nothing to hold"
    if not room and right is Right.DEV_TOKENS and attack is not Attack.NO_GRANT:
        return "off by default (HTTP 404); with ALICIA_WEB_TOKENS=dev: tests/clients/test_web.py"
    if door.kind is Kind.RPC and attack not in (Attack.NO_GRANT, Attack.TOO_BIG):
        return "no method is registered: every call is refused whole by the SDK"
    return None


@dataclass
class Cell:
    """One door x attack: what happened."""

    door: str
    attack: Attack
    outcome: str = ""
    ok: bool = False
    seconds: float = 0.0


Attacker = Callable[[Door, Attack], Awaitable[tuple[bool, str]]]
"""``(ok, outcome)`` of one attack on one door: ``ok`` when the row's refusal happened."""


@dataclass
class Matrix:
    """The cells of the doors one test attacks, filled as it goes."""

    doors: list[Door]
    cells: list[Cell] = field(default_factory=list)

    @classmethod
    def of(cls, keep: Callable[[Door], bool]) -> Matrix:
        """The matrix of the table's doors ``keep`` selects."""
        return cls([d for d in DOORS if keep(d)])

    def todo(self) -> list[tuple[Door, Attack]]:
        """The cells to attack (the others are filled as not applicable)."""
        made = []
        for d in self.doors:
            for attack in Attack:
                reason = not_applicable(d, attack)
                if reason is None:
                    made.append((d, attack))
                else:
                    self.cells.append(Cell(d.name, attack, f"n/a: {reason}", True))
        return made

    async def run(self, door: Door, attack: Attack, attacker: Attacker | None) -> Cell:
        """Make one attack; a missing attacker is a failed cell."""
        cell = Cell(door.name, attack)
        started = time.monotonic()
        if attacker is None:
            cell.outcome = "NO ATTACKER: the harness cannot attack this door yet"
        else:
            try:
                async with asyncio.timeout(CELL_TIMEOUT_S):
                    cell.ok, cell.outcome = await attacker(door, attack)
            except Exception as exc:  # the harness records it as the cell's failure
                cell.outcome = f"attack failed: {exc!r}"
        cell.seconds = time.monotonic() - started
        self.cells.append(cell)
        print(f"  {door.name} / {attack.value}: {cell.outcome} ({cell.seconds:.1f} s)", flush=True)
        return cell

    async def run_door(
        self, door: Door, cells: list[tuple[Door, Attack]], attacker: Attacker
    ) -> None:
        """Every cell of ``door`` at once (each attack has identities of its own), then
        the one that fills the door for everyone (it would refuse the others)."""
        mine = [a for d, a in cells if d is door]
        first = [a for a in mine if a is not Attack.MANY_IDENTITIES]
        b = door.bounds
        # as many at once as the door lets in together: one attack holds a sender's places
        # (too many at once), the others one or two each
        each = b.open_each or 1
        at_once = len(first) if b.open_all is None else max(1, (b.open_all - each) // min(each, 2))
        gate = asyncio.Semaphore(at_once)

        async def one(a: Attack) -> None:
            async with gate:
                await self.run(door, a, attacker)

        await asyncio.gather(*(one(a) for a in first))
        if Attack.MANY_IDENTITIES in mine:
            await self.run(door, Attack.MANY_IDENTITIES, attacker)

    def failed(self) -> list[Cell]:
        """The cells whose promise did not hold."""
        return [c for c in self.cells if not c.ok]

    def markdown(self) -> str:
        """door | attack | outcome | seconds, in the table's order."""
        order = {d.name: i for i, d in enumerate(self.doors)}
        rows = sorted(self.cells, key=lambda c: (order[c.door], list(Attack).index(c.attack)))
        lines = ["| door | attack | outcome | s |", "|---|---|---|---|"]
        for c in rows:
            mark = "" if c.ok else "**FAILED** "
            lines.append(f"| {c.door} | {c.attack.value} | {mark}{c.outcome} | {c.seconds:.1f} |")
        return "\n".join(lines)
