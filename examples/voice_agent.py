"""An ordinary LiveKit Agents voice app (the quickstart's shape) that shows its reasoning.

Compared with the same app on livekit-agents' own OpenAI plugin, three lines change (see
the README, "Use it in your own agent"): the import, ``llm=AliciaLLM(...)`` and
``attach_reasoning``. The model's reasoning then never reaches the TTS or the
transcript, and protocol clients in the room get it as ReasoningSteps, as far as each
one's token grants (``alicia.reasoning``).

Run it like any livekit-agents app, e.g. ``python agent.py dev``, with ``LIVEKIT_URL``,
``LIVEKIT_API_KEY``, ``LIVEKIT_API_SECRET``, ``LLM_BASE_URL`` and ``LLM_MODEL`` set.
Speech here is the offline kind (Silero VAD, pocketsphinx, espeak-ng); use any STT/TTS
plugins you like instead.
"""

from __future__ import annotations

import os

from livekit.agents import Agent, AgentServer, AgentSession, JobContext, cli, inference

from alicia import AliciaLLM, attach_reasoning, bound_streams
from alicia.agent.speech import offline_speech


class Assistant(Agent):
    """The voice assistant."""

    def __init__(self) -> None:
        super().__init__(
            instructions="You are a helpful voice assistant. Answer in a few short sentences."
        )


server = AgentServer()


@server.rtc_session()
async def entrypoint(ctx: JobContext) -> None:
    """One room: the voice pipeline, with the reasoning shown to the room."""
    speech = offline_speech()
    session: AgentSession[None] = AgentSession(
        stt=speech.stt,
        vad=speech.vad,
        tts=speech.tts,
        llm=AliciaLLM(model=os.environ["LLM_MODEL"], base_url=os.environ["LLM_BASE_URL"]),
        # LiveKit's end-of-turn model, run here (its weights ship with livekit-agents): a
        # pause inside a question does not end the turn. Left to choose, ``dev`` picks the
        # cloud model. A reasoning model answering half a question costs twice.
        turn_handling={"turn_detection": inference.TurnDetector(version="v1-mini")},
    )
    bound_streams(ctx.room)  # before it connects: no incoming stream inflates unbounded
    await session.start(agent=Assistant(), room=ctx.room)
    await attach_reasoning(session, ctx.room)


if __name__ == "__main__":
    cli.run_app(server)
