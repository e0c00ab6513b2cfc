"""What a process forked from the zygote sees (``tests/project/test_zygote.py``): one JSON
line, then the exit status its first argument names (``sleep``: it waits to be killed)."""

import json
import os
import sys
import time

if __name__ == "__main__":
    print(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "cwd": os.getcwd(),
                "probe": os.environ.get("ZYGOTE_PROBE"),
                "zygote_only": os.environ.get("ZYGOTE_ONLY"),
                "own_group": os.getpgid(0) == os.getpid(),
                "preloaded": "livekit.agents" in sys.modules,
                "main": sys.modules["__main__"].__spec__.name,
            }
        ),
        flush=True,
    )
    if sys.argv[1] == "sleep":
        time.sleep(60)
    raise SystemExit(int(sys.argv[1]))
