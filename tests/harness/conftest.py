"""The harness tests: a fresh recorded-stream server per test, and an openai client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from openai import AsyncOpenAI

from alicia.harness.recorded_llm import RecordedLLM


@pytest_asyncio.fixture
async def llm_server() -> AsyncIterator[RecordedLLM]:
    """A fresh recorded-stream server on 127.0.0.1 (no pacing; script it per test)."""
    async with RecordedLLM() as server:
        yield server


@pytest_asyncio.fixture
async def client(llm_server: RecordedLLM) -> AsyncIterator[AsyncOpenAI]:
    """The real openai client on ``llm_server`` (no retries)."""
    async with AsyncOpenAI(base_url=llm_server.base_url, api_key="test", max_retries=0) as c:
        yield c
