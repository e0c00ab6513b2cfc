"""Tests of storage (alicia.agent.storage) and the exports (alicia.agent.export)."""
