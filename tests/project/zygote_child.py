"""What a process forked from the zygote sees (``tests/project/test_zygote.py``): one JSON
line, then the exit status its first argument names (``sleep``: it waits to be killed;
``forkserver``: first a process started from a multiprocessing forkserver, as
livekit-agents starts job processes, says where it runs)."""

import json
import multiprocessing
import os
import sys
import time
from multiprocessing.connection import Connection


def parent_of(pid: int) -> int:
    """``pid``'s parent, from ``/proc``."""
    stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def report(out: Connection) -> None:
    """In the forkserver's child: its server, that server's parent, its group, a variable."""
    server = os.getppid()
    found = {"server": server, "server_parent": parent_of(server), "group": os.getpgid(0)}
    out.send(found | {"probe": os.environ.get("ZYGOTE_PROBE")})


if __name__ == "__main__":
    seen = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "probe": os.environ.get("ZYGOTE_PROBE"),
        "zygote_only": os.environ.get("ZYGOTE_ONLY"),
        "own_group": os.getpgid(0) == os.getpid(),
        "preloaded": "livekit.agents" in sys.modules,
        "main": sys.modules["__main__"].__spec__.name,
    }
    if sys.argv[1] == "forkserver":
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["json"])
        theirs, ours = ctx.Pipe(duplex=False)
        child = ctx.Process(target=report, args=(ours,))
        child.start()
        seen |= {"pid": os.getpid(), "parent": os.getppid(), "job": theirs.recv()}
        child.join()
    print(json.dumps(seen), flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
    raise SystemExit(int(sys.argv[1]) if sys.argv[1].isdigit() else 0)
