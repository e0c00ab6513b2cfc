"""Turn-taking by pause length: how many user turns a question with a pause in the middle
becomes, and how soon after the question the agent is heard.

The real worker (``python -m alicia.agent start``, ``ALICIA_VOICE=offline``) on
livekit-server, for each turn detection (``--modes``, default ``vad model``: the VAD alone,
and LiveKit's end-of-turn model run offline, the default now; ``vad,0.5`` is the VAD alone
with the endpointing delay before it, 0.5 s: the voice rooms as they were). A listener speaks
"How long should I boil | an egg?" (espeak-ng) with a pause of 0.4 to 1.2 s of silence
at the bar, and without one, ``--trials`` times each, a new room each time. The recorded
model reasons 8 s before it answers (``vllm_progress``), so the first sound is the
spoken-progress cue. Per row: user turns per question (answers started: a turn made of a
question's first half gets its own, cut or not), LLM requests (preemptive generation
asks early too), the first sound after the question's end (p50, ms) and the longest silence
between the model being asked and the answer (max, ms). Last line::

    RESULT pauses=<s,...> <mode>_turns=<per pause,...> <mode>_first_sound_ms=<...>
           <mode>_longest_silence_ms=<...> (for each mode; ``vad,0.5`` is ``vad0.5s``)

On espeak-ng's speech the model's verdicts are close to chance (P(turn ended) 0.11-0.73
for half and whole questions alike), so the table tells what the tests' synthetic speech
gets, not what a human speaker gets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.harness.speech import (
    speak,
    speak_with_pause,
    speech_bounds,
)
from alicia.protocol import StartAnswer, new_id
from bench._stats import percentile
from bench.progress import SHAPE, pace
from tests.e2e.voice.helpers import listening
from tests.e2e.worker import running_worker
from tests.support.livekit_rooms import joined

PAUSES = (0.0, 0.4, 0.6, 0.8, 1.0, 1.2)
FIRST, THEN = "How long should I boil", "an egg?"


async def trial(
    server: LiveKitServer, llm: RecordedLLM, pcm: np.ndarray, rate: int
) -> tuple[int, int, float | None, float | None]:
    """One question: user turns (answers started), LLM requests, ms to the first sound,
    the longest silence between the first request and the last sound."""
    llm.received_at.clear()
    room = f"bench-turns-{new_id('r')}"
    async with joined(server, room, "alice") as r:
        recorder, client, mic = await listening(r, room)
        # when the speech ended (the audio goes on with espeak-ng's quiet and a pad of noise)
        ended = await mic.say(pcm, rate) - (len(pcm) - speech_bounds(pcm, rate)[1]) / rate
        try:
            await client.wait_for(StartAnswer, within=90.0)  # an answer (cut ones count)
            await recorder.until_quiet(ended, quiet_s=4.0)
        finally:
            await recorder.aclose()
        loud = recorder.loud(after=ended)
        asked = min(llm.received_at, default=None)
        answer_end = loud[-1] if loud else None
        silence = (
            recorder.longest_silence(asked, answer_end) * 1000
            if asked is not None and answer_end is not None
            else None
        )
        first = (loud[0] - ended) * 1000 if loud else None
        return len(client.of(StartAnswer)), len(llm.received_at), first, silence


async def main(modes: list[str], trials: int, pauses: list[float]) -> None:
    speech = {
        pause: (speak(f"{FIRST} {THEN}") if pause == 0 else speak_with_pause(FIRST, THEN, pause))
        for pause in {0.0, *pauses}
    }
    result: list[str] = [f"pauses={','.join(str(p) for p in pauses)}"]
    print(
        f"{'mode':<8}{'pause s':>8}{'turns':>8}{'requests':>10}{'first sound ms':>16}"
        f"{'longest silence ms':>20}"
    )
    with LiveKitServer() as server:
        async with RecordedLLM() as llm:
            llm.route_model("recorded-model", Play(SHAPE, chunk_delay=pace(8.0)))
            for mode in modes:
                detection, _, min_delay = mode.partition(",")
                env = {"ALICIA_VOICE": "offline", "ALICIA_TURN_DETECTION": detection}
                if min_delay:
                    env["ALICIA_ENDPOINTING_MIN_DELAY"] = min_delay
                turns_row, first_row, silence_row = [], [], []
                async with running_worker(server, llm.base_url, env=env):
                    await trial(server, llm, *speech[0.0])  # warm up
                    for pause in pauses:
                        turns: list[int] = []
                        requests: list[int] = []
                        firsts: list[float] = []
                        silences: list[float] = []
                        for _ in range(trials):
                            t, n, first, silence = await trial(server, llm, *speech[pause])
                            turns.append(t)
                            requests.append(n)
                            if first is not None:
                                firsts.append(first)
                            if silence is not None:
                                silences.append(silence)
                        mean_turns = sum(turns) / len(turns)
                        first_p50 = percentile(firsts, 50) if firsts else float("nan")
                        longest = max(silences, default=float("nan"))
                        print(
                            f"{mode:<8}{pause:>8.1f}{mean_turns:>8.1f}"
                            f"{sum(requests) / len(requests):>10.1f}{first_p50:>16.0f}"
                            f"{longest:>20.0f}",
                            flush=True,
                        )
                        turns_row.append(f"{mean_turns:.1f}")
                        first_row.append(f"{first_p50:.0f}")
                        silence_row.append(f"{longest:.0f}")
                name = detection.rsplit(":", 1)[-1] + (f"{min_delay}s" if min_delay else "")
                result += [
                    f"{name}_turns={','.join(turns_row)}",
                    f"{name}_first_sound_ms={','.join(first_row)}",
                    f"{name}_longest_silence_ms={','.join(silence_row)}",
                ]
    machine = f"{platform.machine()} {os.cpu_count()} cores"
    print(f"machine: {machine}, python {platform.python_version()}")
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["vad", "model"],
        help="ALICIA_TURN_DETECTION values, each optionally ,<ALICIA_ENDPOINTING_MIN_DELAY>",
    )
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--pauses", type=float, nargs="+", default=list(PAUSES))
    args = parser.parse_args()
    asyncio.run(main(args.modes, args.trials, args.pauses))
