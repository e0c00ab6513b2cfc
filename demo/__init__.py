"""The one-command demo (``python -m demo``, run by ``./scripts/demo``): see :mod:`demo.run`."""

from .run import DEFAULT_QUESTION, build_parser, default_data_dir, main

__all__ = ["DEFAULT_QUESTION", "build_parser", "default_data_dir", "main"]
