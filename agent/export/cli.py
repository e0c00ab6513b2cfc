"""``alicia-export`` (``python -m alicia.agent.export``): a stored conversation in another
ecosystem's form.

::

    alicia-export --conversation conv_x --format agui              # to stdout
    alicia-export --conversation conv_x --format mew --output conv_x.mew.jsonl
    alicia-export --database-url sqlite+aiosqlite:///alicia.db --conversation conv_x --format jsonl

Formats: ``agui`` (a JSON array of AG-UI messages), ``mew`` (MEW v0.4 envelopes, JSON
Lines), ``openhands`` (a JSON array of OpenHands events), ``jsonl`` (the stored rows, JSON
Lines). Reads ``DATABASE_URL`` unless ``--database-url`` is given; never decrypts.
Exit status 0, or 2 for a usage error, an unreadable database or an unknown conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from . import agui, jsonl, mew, openhands
from .reader import ConversationNotFound, read_conversation
from .turns import StoredConversation

__all__ = ["EXIT_ERROR", "FORMATS", "main", "render"]

EXIT_ERROR: Final = 2

FORMATS: Final[dict[str, Callable[[StoredConversation], str]]] = {
    "agui": agui.dumps,
    "mew": mew.dumps,
    "openhands": openhands.dumps,
    "jsonl": jsonl.dumps,
}
"""Format name -> the function that writes a conversation in it."""


def render(conv: StoredConversation, fmt: str) -> str:
    """``conv`` in format ``fmt`` (a key of :data:`FORMATS`), as the file's text."""
    return FORMATS[fmt](conv)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="alicia-export", description="Write a stored conversation as AG-UI, MEW, OpenHands."
    )
    p.add_argument("--conversation", required=True, metavar="ID", help="conversation id")
    p.add_argument("--format", required=True, choices=list(FORMATS), help="output form")
    p.add_argument("--output", "-o", metavar="FILE", help="write here (default: stdout)")
    p.add_argument("--database-url", help="SQLAlchemy async URL (default: $DATABASE_URL)")
    return p


def _fail(message: str) -> int:
    print(f"alicia-export: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``alicia-export``; returns the exit status."""
    args = build_parser().parse_args(argv)
    url = (args.database_url or os.environ.get("DATABASE_URL", "")).strip()
    if not url:
        return _fail("no database: pass --database-url or set DATABASE_URL")
    from alicia.agent.storage.errors import StorageError

    try:
        conv = asyncio.run(read_conversation(url, args.conversation))
    except ConversationNotFound:
        return _fail(f"no conversation {args.conversation!r} in the database")
    except StorageError as exc:
        return _fail(f"cannot read the database: {exc}")
    text = render(conv, args.format)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write {args.output}: {exc.strerror or exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
