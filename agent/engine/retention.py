"""What one conversation keeps in memory per turn, and where that stops growing.

Every store a conversation adds to on each turn is capped; past :data:`RETAINED_TURNS`
turns its memory stays flat (``tests/engine/test_retention.py``; ``bench/soak.py`` warms up to it
before it measures).
"""

from __future__ import annotations

from typing import Final

__all__ = ["HISTORY_LIMIT", "KNOWN_IDS", "RETAINED_TURNS", "STEP_CHAINS", "UNSEALED_LIMIT"]

HISTORY_LIMIT: Final = 200
"""Past exchanges a conversation remembers (for owners, variations and the LLM context)."""
STEP_CHAINS: Final = 256
"""``stepIndex`` chains a conversation keeps in memory (one per turn; the least recently
advanced is dropped first, and a turn seeds its chain from storage again)."""
KNOWN_IDS: Final = 2 * STEP_CHAINS
"""Message ids remembered per conversation to refuse reuse: the user messages and answers
of the last 256 turns (more than the history holds). An older id is forgotten; storage
keeps what it stored first under it."""
UNSEALED_LIMIT: Final = 1024
"""Steps held in memory under zero data retention while the conversation's data key is
still being fetched (they are stored sealed once it comes; past this, not stored).
Steps are at most a few kilobytes each: a turn makes tens."""
RETAINED_TURNS: Final = max(HISTORY_LIMIT, STEP_CHAINS, KNOWN_IDS // 2)
"""Turns after which a conversation's memory stops growing: every per-turn store is full."""
