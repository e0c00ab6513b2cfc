"""How a benchmark process that used livekit's FFI ends."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = ["run_and_exit"]


def run_and_exit(main: Callable[[], None]) -> NoReturn:
    """Run ``main``, then end without the interpreter's teardown: livekit's FFI runtime
    may still call back into Python while it finalizes, and a Rust panic there aborts the
    process (seen once in a fresh-clone run, after the RESULT line). ``main`` has closed
    and printed everything; an exception or ``sys.exit`` from it ends the process as
    usual."""
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
