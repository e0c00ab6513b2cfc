"""What the voice tests share: the session settings an app attaches the bridge with, a
room joined as an agent participant, a listener that speaks to the agent, and a module's
voice worker started once (:class:`OneWorker`), and a worker log's turn-taking in short
lines (:func:`turn_timeline`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping

from livekit import rtc

from alicia.agent.session.attach import session_settings
from alicia.agent.settings import Settings
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.harness.speech import AudioRecorder, Microphone
from alicia.protocol import new_id
from tests.e2e.worker import WorkerProcess, running_worker
from tests.support.livekit_rooms import ProtocolClient, joined


def settings_for(llm: RecordedLLM, **env: str) -> Settings:
    return session_settings(
        {"ALICIA_REASONING_VISIBILITY": "none", "LLM_BASE_URL": llm.base_url, **env},
        model="recorded-model",
    )


@contextlib.asynccontextmanager
async def agent_room(server: LiveKitServer, room: str) -> AsyncIterator[rtc.Room]:
    from livekit import api

    identity = f"agent-{new_id('x')}"
    token = (
        api.AccessToken(server.api_key, server.api_secret)
        .with_identity(identity)
        .with_kind("agent")
        .with_grants(api.VideoGrants(room_join=True, room=room, agent=True))
        .to_jwt()
    )
    async with joined(server, room, identity, token) as r:
        yield r


async def listening(
    room: rtc.Room, conversation: str
) -> tuple[AudioRecorder, ProtocolClient, Microphone]:
    """In ``room``: a recorder of the agent's audio, a protocol client that has greeted the
    agent, and a published microphone to speak with."""
    recorder = AudioRecorder(room)
    client = ProtocolClient(room, conversation)
    await client.wait_for_agent()
    await client.handshake()
    mic = Microphone(room)
    await mic.start()
    return recorder, client, mic


class OneWorker:
    """A module's voice worker, one at a time (rooms are dispatched automatically: two
    workers would share them), started again only when a test needs other settings (a
    voice worker's start is seconds of CPU: it loads the speech models). ``env_of`` gives
    the worker's settings for a test's key."""

    def __init__(
        self, server: LiveKitServer, llm: RecordedLLM, env_of: Callable[[str], Mapping[str, str]]
    ) -> None:
        self.server, self.llm, self.env_of = server, llm, env_of
        self.key: str | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._worker: WorkerProcess | None = None

    async def get(self, key: str) -> WorkerProcess:
        """The running worker with the settings of ``key``."""
        if self.key != key or self._worker is None:
            await self.stop()
            self._stack = contextlib.AsyncExitStack()
            running = running_worker(self.server, self.llm.base_url, env=self.env_of(key))
            self._worker = await self._stack.enter_async_context(running)
            self.key = key
        return self._worker

    async def stop(self) -> None:
        """Stop the running worker, if any."""
        stack, self._stack, self._worker, self.key = self._stack, None, None, None
        if stack is not None:
            await stack.aclose()


_TURN_EVENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "recognized live": ("recognized", ("audio_s", "after_end_s")),
    "received user transcript": ("transcript", ("lk.pii.user_transcript", "transcript_delay")),
    "eot prediction": ("verdict", ("probability", "endpointing_delay", "trigger", "from_cache")),
    "eot prediction timed out, committing without a prediction": ("verdict timed out", ()),
    "user turn committed": ("committed", ("source", "delay_completed")),
    "VAD inference is slower than realtime": ("VAD late", ("delay",)),
}
"""livekit-agents' and the recognizer's log records that say how a user turn ended: a short
name for each, and its fields worth reading."""


def turn_timeline(log: str) -> str:
    """What a voice worker's ``log`` says of its user turns, on one line (each record's
    time, short name and telling fields, `` | `` between them): the cause of a turn-taking
    failure, where the whole log (thousands of lines) is cut in the failure's report."""
    said: list[str] = []
    for line in log.splitlines():
        if not line.startswith("{") or not any(f'"{m}"' in line for m in _TURN_EVENTS):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        event = _TURN_EVENTS.get(record.get("message", ""))
        if event is None:
            continue
        name, fields = event
        values = [
            f"{f.rsplit('_', 1)[-1] if '.' in f else f}={_short(record[f])}"
            for f in fields
            if f in record
        ]
        said.append(" ".join([str(record.get("timestamp", ""))[14:21], name, *values]))
    return " | ".join(said)


def _short(value: object) -> str:
    return (
        f"{value:.2f}"
        if isinstance(value, float)
        else repr(value)
        if isinstance(value, str)
        else str(value)
    )
