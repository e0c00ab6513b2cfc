"""The one-command demo (``python -m alicia.demo``, run by ``./scripts/demo``).

See :mod:`alicia.demo.run`.
"""

from .run import DEFAULT_QUESTION, build_parser, default_data_dir, main

__all__ = ["DEFAULT_QUESTION", "build_parser", "default_data_dir", "main"]
