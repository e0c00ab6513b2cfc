"""The voice tests: a fresh recorded-stream server per test (the shared streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from alicia.harness.recorded_llm import RecordedLLM


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[RecordedLLM]:
    """A fresh recorded-stream server for each test: a voice test's turns and pacing are
    its own (``tests/streams`` only)."""
    async with RecordedLLM() as server:
        yield server
