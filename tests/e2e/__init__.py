"""End to end: real worker processes, livekit-server, Postgres, browsers (helpers shared below)."""
