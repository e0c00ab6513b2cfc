"""``alicia-client`` run as a user runs it (the installed script next to this Python)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

CLI = Path(sys.executable).with_name("alicia-client")


async def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, limit: float = 60
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CLI),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
    )
    out, err = await asyncio.wait_for(
        proc.communicate(stdin.encode() if stdin is not None else None), limit
    )
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
