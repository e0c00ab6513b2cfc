"""The session adapter's tests: a fresh recorded-stream server per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from alicia.harness.recorded_llm import RecordedLLM


@pytest_asyncio.fixture
async def server() -> AsyncIterator[RecordedLLM]:
    """A fresh recorded-stream server on 127.0.0.1 (``tests/streams``), scripted per test."""
    async with RecordedLLM() as s:
        yield s
