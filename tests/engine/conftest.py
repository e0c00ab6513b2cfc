"""The engine's tests: a fresh recorded-stream server per test, and an openai client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
import pytest_asyncio

from alicia.harness.recorded_llm import RecordedLLM
from tests.support.recorded import recorded_llm_for


@pytest_asyncio.fixture
async def llm(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RecordedLLM]:
    """The recorded-stream server with the shared streams plus the calculator ones (only
    the shared ones where the module sets ``LLM_STREAMS = "shared"``), fresh per test."""
    async with recorded_llm_for(request.module, lambda: tmp_path / "streams") as server:
        yield server


@pytest_asyncio.fixture
async def client(llm: RecordedLLM) -> AsyncIterator[openai.AsyncOpenAI]:
    """The real openai client on ``llm`` (no retries)."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:
        yield c
