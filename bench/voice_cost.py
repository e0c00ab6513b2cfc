"""What a voice room costs: CPU per room-second of our voice room against livekit-agents'
stock AgentSession with the same offline speech parts.

Each variant serves its room in a process of its own (``--serve ours|stock``), started
for the room and measured from the moment it is in the room until the room ends, with
everything it runs (the recognizer process, espeak-ng's processes):

* **ours**: the worker's voice room (:func:`~alicia.agent.rooms.voice_agent.serve_voice_room`:
  the AgentSession with :class:`~alicia.agent.session.AliciaLLM`, the reasoning bridge,
  spoken progress, the gated session host, the doors);
* **stock**: ``AgentSession`` with livekit-agents' OpenAI plugin
  (``livekit.plugins.openai.LLM``) and the same Silero VAD, pocketsphinx, espeak-ng and
  turn handling (LiveKit's end-of-turn model, offline).

A listener speaks ``--questions`` questions (espeak-ng) into each room, one after the
other answer, with a protocol client that asks for every step (ours sends them; the stock
agent sends none). The recorded model reasons ``--reasoning`` seconds before it answers
(``vllm_progress``, one SSE event per token). Rooms alternate between the variants,
``--rooms`` each. Last line::

    RESULT voice_cpu_ratio=<ours/stock> ours_cpu_ms_per_room_s=<x> stock_cpu_ms_per_room_s=<x>

(medians over the rooms; target: ratio at most 1.1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stats import tree_cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()


# -- the agent side (a process per room) ---------------------------------------------------


async def serve(variant: str, room_name: str) -> None:
    """Serve ``room_name`` as ``variant`` until stdin closes; print the CPU and seconds."""
    from livekit import rtc
    from livekit.agents import Agent, AgentSession

    from alicia.agent.rooms.voice_agent import serve_voice_room, turn_handling, voice_parts
    from alicia.agent.settings import Settings
    from alicia.agent.speech import prewarm

    settings = Settings.from_env(os.environ)
    prewarm()
    room = rtc.Room()
    await room.connect(settings.livekit_url, os.environ["BENCH_AGENT_TOKEN"])
    closers: list[Any] = []

    class _Job:  # what serve_voice_room uses of a JobContext
        def __init__(self) -> None:
            self.room = room

        def add_shutdown_callback(self, fn: Any) -> None:
            closers.append(fn)

    session: AgentSession[Any] | None = None
    if variant == "ours":
        await serve_voice_room(_Job(), settings)  # type: ignore[arg-type]
    else:
        from livekit.plugins import openai as lk_openai

        parts = voice_parts(settings)
        session = AgentSession(
            stt=parts.stt,
            tts=parts.tts,
            vad=parts.vad,
            llm=lk_openai.LLM(
                model=settings.llm_model, base_url=settings.llm_base_url, api_key="bench"
            ),
            turn_handling=turn_handling(parts, settings),
        )
        await session.start(Agent(instructions=settings.system_prompt), room=room)
        closers.append(session.aclose)
    start_cpu, start = tree_cpu_seconds(os.getpid()), time.monotonic()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    cpu, seconds = tree_cpu_seconds(os.getpid()) - start_cpu, time.monotonic() - start
    print(f"cost cpu_s={cpu:.3f} room_s={seconds:.3f}", flush=True)
    for close in closers:
        with contextlib.suppress(Exception):
            await close()
    await room.disconnect()


# -- the listener side ---------------------------------------------------------------------


async def one_room(server: Any, llm: Any, variant: str, questions: int) -> tuple[float, float]:
    """A room served by ``variant``: (CPU seconds, room seconds) of its agent process."""
    from alicia.harness.speech import AudioRecorder, Microphone, speak
    from alicia.protocol import AssistantSentence, new_id
    from bench.progress import SHAPE
    from bench.voice import agent_token
    from tests.support.livekit_rooms import ProtocolClient, joined

    spec = llm.spec(SHAPE)
    pcm, rate = speak(spec.user)
    room = f"bench-voice-cost-{new_id('r')}"
    env = {
        **os.environ,
        **server.env(),
        "LLM_BASE_URL": llm.base_url,
        "LLM_MODEL": "recorded-model",
        "LLM_API_KEY": "bench",
        "ALICIA_VOICE": "offline",
        "ALICIA_REASONING_VISIBILITY": "full",
        "BENCH_AGENT_TOKEN": agent_token(server, room),
        "PYTHONPATH": str(ROOT),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(THIS),
        "--serve",
        variant,
        "--room",
        room,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        process_group=0,  # its own group (killed as one), in the suite's session
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        async with asyncio.timeout(120):
            while (await proc.stdout.readline()).strip() != b"ready":
                if proc.returncode is not None:
                    raise RuntimeError(f"the {variant} agent ended")
        async with joined(server, room, "alice") as r:
            recorder = AudioRecorder(r)
            client = ProtocolClient(r, room)
            if variant == "ours":
                await client.wait_for_agent()
                await client.handshake()
            mic = Microphone(r)
            await mic.start()
            for n in range(1, questions + 1):
                ended = await mic.say(pcm, rate)
                await recorder.until_quiet(ended, quiet_s=3.0)  # the answer was spoken
                if variant == "ours":
                    finals = sum(bool(s.is_final) for s in client.of(AssistantSentence))
                    assert finals >= n, finals
            await recorder.aclose()
        proc.stdin.close()
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stdout.readline()).decode()
                if line.startswith("cost "):
                    fields = dict(kv.split("=") for kv in line.split()[1:])
                    return float(fields["cpu_s"]), float(fields["room_s"])
                if not line:
                    raise RuntimeError(f"the {variant} agent printed no cost")
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            await proc.wait()


async def main(rooms: int, questions: int, reasoning_s: float) -> None:
    from alicia.harness import LiveKitServer
    from alicia.harness.recorded_llm import Play, RecordedLLM
    from bench._stats import percentile
    from bench.progress import SHAPE, pace

    per_room: dict[str, list[float]] = {"ours": [], "stock": []}
    with LiveKitServer() as server:
        async with RecordedLLM() as llm:
            llm.route_model("recorded-model", Play(SHAPE, chunk_delay=pace(reasoning_s)))
            for i in range(rooms):
                for variant in ("ours", "stock") if i % 2 == 0 else ("stock", "ours"):
                    cpu, seconds = await one_room(server, llm, variant, questions)
                    per_room[variant].append(cpu / seconds * 1000)
                    print(
                        f"room {i + 1} {variant:<5}: {cpu:.2f} CPU-s over {seconds:.1f} s = "
                        f"{cpu / seconds * 1000:.1f} CPU-ms per room-second",
                        flush=True,
                    )
    ours = percentile(per_room["ours"], 50)
    stock = percentile(per_room["stock"], 50)
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}"
    )
    print(
        f"RESULT voice_cpu_ratio={ours / stock:.3f} ours_cpu_ms_per_room_s={ours:.1f} "
        f"stock_cpu_ms_per_room_s={stock:.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=4, help="rooms per variant")
    parser.add_argument("--questions", type=int, default=2, help="questions per room")
    parser.add_argument("--reasoning", type=float, default=4.0, help="seconds the model reasons")
    parser.add_argument("--serve", choices=("ours", "stock"), help=argparse.SUPPRESS)
    parser.add_argument("--room", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.room))
    else:
        asyncio.run(main(args.rooms, args.questions, args.reasoning))
