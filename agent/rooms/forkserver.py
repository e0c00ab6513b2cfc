"""The job processes' forkserver outlives a SIGTERM sent to the worker's whole group.

livekit-agents starts job processes from a multiprocessing forkserver (Linux). Python's
forkserver ignores SIGINT (a terminal's ^C reaches the whole group) but not SIGTERM, which
``systemctl stop`` (``KillMode=control-group``), ``kill -TERM -<pgid>`` and some init
processes send to every process of the worker, not to the worker alone. The forkserver
then dies at once; every job process's status pipe runs through it, so the worker reads
exit code 255 for each job still running, counts it dead and shuts down while the job is
still flushing its room (its unstored reasoning steps were lost).

Imported by the forkserver (``preload_modules``), this module makes it ignore SIGTERM:
the worker drains, as on a SIGTERM to itself alone, and the forkserver still exits when
the worker does (it watches the worker's end of a pipe). Imported anywhere else, it does
nothing. Job processes ignore SIGTERM already (livekit-agents sets that in each).
"""

from __future__ import annotations

import signal
import sys
from multiprocessing import forkserver

__all__ = ["MODULE"]

MODULE = __name__
"""This module's name, for ``AgentServer(preload_modules=[...])``."""


def _imported_by_the_forkserver() -> bool:
    """The import runs inside ``multiprocessing.forkserver.main`` (its preload step)."""
    frame = sys._getframe(1)
    main = forkserver.main.__code__
    while frame is not None:
        if frame.f_code is main:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if _imported_by_the_forkserver():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
