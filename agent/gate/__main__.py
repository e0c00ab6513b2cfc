"""``python -m alicia.agent.gate``: print the table of doors as Markdown."""

from __future__ import annotations

from .doors import markdown

if __name__ == "__main__":
    print(markdown())
