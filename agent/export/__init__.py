"""Stored conversations in other ecosystems' forms: ``alicia-export`` (:mod:`.cli`).

* ``reader.py``: a conversation's live rows read back as turns (never decrypted).
* ``agui.py``: AG-UI message history (``ag_ui.core`` models, camelCase wire form).
* ``mew.py``: MEW protocol v0.4 envelopes (reasoning contexts, MCP requests), JSON Lines.
* ``openhands.py``: OpenHands events (``args.thought`` + ``args.reasoning_content``).
* ``jsonl.py``: the stored rows, one per line.
"""
