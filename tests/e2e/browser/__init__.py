"""End to end in Debian's chromium: the web page, LiveKit frontends, trust (JS drivers here)."""
