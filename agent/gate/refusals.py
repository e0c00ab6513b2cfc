"""What a door does with a refusal besides answering: a counter, and a log line at most
once per door, sender, reason and :data:`~.doors.LOG_EVERY_S`.

A flood of refusals must not become a flood of log lines (each one a write, and a disk
the attacker fills): :func:`refused` counts every refusal in ``alicia.doors.refused``
(by ``alicia.door`` and ``alicia.reason``) and logs the first of each sender per door,
reason and interval, saying how many were refused since the last line. A door's reasons
are a handful of fixed phrases, so a sender makes a few lines a minute at most, and one
reason never hides another (a flood refused as "too many open" and then "too fast" says
both). Senders remembered are bounded (:data:`REMEMBERED`, oldest forgotten).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from alicia.agent.telemetry.instruments import REFUSED

from .doors import LOG_EVERY_S, Door

__all__ = ["REMEMBERED", "RefusalLog", "refused"]

logger = logging.getLogger("alicia.gate")

REMEMBERED: Final = 4096
"""(door, sender, reason) whose last log line is remembered."""


class RefusalLog:
    """When each (door, sender, reason) was last logged, and how many refusals since."""

    def __init__(
        self, every_s: float = LOG_EVERY_S, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Log each (door, sender, reason) at most once per ``every_s``."""
        self._every = every_s
        self._clock = clock
        self._last: OrderedDict[tuple[str, str, str], tuple[float, int]] = OrderedDict()

    def due(self, door: str, sender: str, reason: str = "") -> int:
        """How many refusals of ``sender`` at ``door`` for ``reason`` this line stands for
        (counting this one) if one is due now, else 0."""
        key = (door, sender, reason)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last[0] < self._every:
            self._last[key] = (last[0], last[1] + 1)
            return 0
        self._last[key] = (now, 0)
        self._last.move_to_end(key)
        while len(self._last) > REMEMBERED:
            self._last.popitem(last=False)
        return 1 + (last[1] if last is not None else 0)


_LOG: Final = RefusalLog()


def refused(door: Door, sender: str, reason: str, *, log: RefusalLog = _LOG) -> None:
    """Count a refusal at ``door`` of ``sender`` (an identity, or a client address), and
    log it unless one was logged for them and ``reason`` within the interval."""
    if door.refusal.counted:
        REFUSED.add(1, {"alicia.door": door.name, "alicia.reason": reason})
    if not door.refusal.logged:
        return
    count = log.due(door.name, sender, reason)
    if count:
        logger.warning(
            f"{door.name} refused: {reason}",
            extra={"door": door.name, "from": sender, "refused": count},
        )
