"""The AG-UI front end: the turn engine behind an AG-UI endpoint (``POST /agui``), and a
live LiveKit room as AG-UI events (``GET /agui/rooms/{room}/events``).

Served alone by ``python -m alicia.agent.agui`` and inside the web debug app by
``python -m alicia.web``; callers authenticate with a LiveKit access token
(:mod:`.auth`). See :mod:`.app` for the routes and :mod:`.projection` for the events.
"""

from .app import AguiService, create_app

__all__ = ["AguiService", "create_app"]
