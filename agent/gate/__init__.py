"""The LiveKit room adapter and the table of doors, below ``rooms/`` and ``session/``.

* ``doors.py``: every way in (topics, streams, RPC, grant changes, HTTP routes), declared
  once with its right, its bounds and what a refusal does; no livekit import;
* ``room.py``: a room's handlers, registered only there and bounded by their rows;
* ``grants.py``: a participant's grants, only from what livekit-server vouches for;
* ``transport.py``: the engine's ``Transport`` on a room (protocol packets, typed input);
* ``ffi_routing.py``: per-room routing of the livekit FFI's events (O(1) per event);
* ``http.py``: the HTTP servers' routes, from the table only;
* ``refusals.py``: a counter and a rate-limited log line for each refusal.

Nothing is imported here: the HTTP servers read the table without loading livekit.
"""
