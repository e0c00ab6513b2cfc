"""The AG-UI endpoint as users run it, one process per module (its recorded LLM: ``llm``,
``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from tests.support.agui_endpoint import AguiProcess, running_agui


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def agui(
    request: pytest.FixtureRequest, livekit_server: LiveKitServer, llm: RecordedLLM
) -> AsyncIterator[AguiProcess]:
    """``python -m alicia.agent.agui`` on the module's ``llm``, with the module's
    ``AGUI_ENV`` (its keys, its limits)."""
    async with running_agui(livekit_server, llm.base_url, env=request.module.AGUI_ENV) as process:
        yield process
