"""Start real backing servers on loopback for tests, benchmarks and the demo.

* :class:`LiveKitServer` runs the pinned livekit-server binary (built by
  ``scripts/install-livekit-server``) with ``config/livekit.yaml`` on free ports.
* :class:`PostgresServer` runs a throwaway cluster (``initdb`` + ``pg_ctl`` from
  Debian's ``postgresql``) in a temporary directory on a free port.

Both are context managers that wait until the server answers and stop it on exit.
A missing component is installed (livekit-server) or reported loudly; never skipped.
"""

from .livekit_server import DEV_API_KEY, DEV_API_SECRET, LiveKitServer, livekit_binary
from .ports import free_port
from .postgres import PostgresServer

__all__ = [
    "DEV_API_KEY",
    "DEV_API_SECRET",
    "LiveKitServer",
    "PostgresServer",
    "free_port",
    "livekit_binary",
]
