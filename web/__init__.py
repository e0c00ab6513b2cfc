"""The web debug page: a token endpoint plus the bundled frontend (``web/frontend``).

``create_app(WebSettings)`` builds the Starlette app; ``python -m alicia.web`` serves it with
uvicorn on loopback. The browser bundle is built by ``npm run build`` (scripts/setup).
"""

from .app import BUNDLE, STATIC_DIR, create_app
from .settings import WebSettings

__all__ = ["BUNDLE", "STATIC_DIR", "WebSettings", "create_app"]
