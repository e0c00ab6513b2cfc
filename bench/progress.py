"""Spoken progress: the silence a listener hears while a reasoning model thinks, per policy.

An AgentSession (Silero VAD, pocketsphinx, espeak-ng, :class:`~alicia.agent.session.AliciaLLM`
with the reasoning bridge, in this process) answers a spoken question from the recorded
``vllm_progress`` stream, paced so that the model reasons for ``--reasoning-s`` seconds
(8 by default) before its first answer token. A listening client (granted ``summary``)
records every audio frame of the agent. For each policy (``off``, ``cue``, ``summary``,
``--trials`` each, interleaved in one run) it measures:

* ``silence_max``: the longest stretch without agent audio between the end of the
  question and the end of the answer (max over the trials);
* the answer's first audio after the model's first answer token left the recorded
  server (``answer_delay`` = p50 with remarks (cue and summary) - p50 with ``off``; with
  remarks it is dated back from the answer's end by the answer's length in the ``off``
  trials, since a remark that is cut runs straight into the answer);
* the reasoning's canary phrases heard by pocketsphinx's keyword spotting (all trials).

Last line::

    RESULT silence_max_ms_off=<x> silence_max_ms_cue=<x> silence_max_ms_summary=<x>
           answer_delay_ms=<x> canary_heard=<n>

Targets: silence_max <= 3000 ms with remarks on; answer_delay <= 150 ms; canary_heard=0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from livekit import rtc

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import STREAMS_DIR, Play, RecordedLLM, read_events
from alicia.harness.speech import ROOM_RATE, AudioRecorder, Microphone, speak, spotted
from alicia.protocol import AssistantSentence, Commentary, new_id
from bench._stats import percentile
from bench.voice import agent_in
from tests.support.livekit_rooms import ProtocolClient

SHAPE = "vllm_progress"
CANARIES = ("yellow submarine", "silver kettle")
POLICIES = ("off", "cue", "summary")


def pace(reasoning_s: float, stream: Path = STREAMS_DIR / f"{SHAPE}.sse") -> float:
    """Seconds per SSE event so that the reasoning of ``stream`` (a chat-completions
    recording; :data:`SHAPE`'s by default) lasts ``reasoning_s``."""
    events = read_events(stream)
    for i, event in enumerate(events):
        with contextlib.suppress(ValueError, IndexError, KeyError, TypeError):
            data = json.loads(event.removeprefix("data: "))
            if data["choices"][0]["delta"].get("content"):
                return reasoning_s / i
    raise ValueError(f"{stream.name} has no answer")


@dataclass(frozen=True, slots=True)
class Trial:
    """What one listener heard of one spoken question."""

    silence_max_s: float
    answer_after_token_s: float | None
    """The first sound that starts after the first answer token (``off``: the answer)."""
    end_after_token_s: float | None
    """The end of the answer's audio after the first answer token."""
    first_sound_s: float | None
    remarks: tuple[str, ...]
    runs: tuple[tuple[float, float], ...]
    """Stretches of agent audio (seconds after the end of the question)."""
    canaries: int


async def trial(
    server: LiveKitServer, recorded: RecordedLLM, policy: str, question: Any, rate: int
) -> Trial:
    """Ask once under ``policy``; measure at the listening client."""
    room = f"bench-progress-{new_id('r')}"
    first_token: list[float] = []

    def hook(body: Mapping[str, Any], stream: str) -> Any:
        def on_event(event: str, at_ns: int) -> None:
            if not first_token and '"content":"' in event and '"content":""' not in event:
                first_token.append(at_ns / 1e9)

        return on_event

    recorded.on_stream = hook
    env = {"ALICIA_REASONING_VISIBILITY": "none", "ALICIA_SPOKEN_PROGRESS": policy}
    async with agent_in(server, recorded.base_url, room, True, env=env):
        client = rtc.Room()
        recorder = AudioRecorder(client, frame_ms=10)
        token = server.token("listener", room, attributes={"alicia.reasoning": "summary"})
        await client.connect(server.url, token)
        protocol = ProtocolClient(client, room)
        try:
            await protocol.wait_for_agent()
            await protocol.handshake()
            mic = Microphone(client)
            await mic.start()
            ended = await mic.say(question, rate, trailing_silence_s=1.5)
            await protocol.wait_for(AssistantSentence, within=90.0, is_final=True)
            async with asyncio.timeout(60):  # the answer is spoken to its end
                while not (loud := recorder.loud(after=ended)) or time.monotonic() - loud[-1] < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
        finally:
            await recorder.aclose()
            await client.disconnect()
    loud = recorder.loud(after=ended)
    end = loud[-1]
    runs = sound_runs(loud)
    token_at = first_token[0] if first_token else None
    onset = None if token_at is None else next((a for a, _ in runs if a >= token_at), None)
    heard = recorder.pcm_between(ended, end)
    return Trial(
        silence_max_s=recorder.longest_silence(ended, end),
        answer_after_token_s=None if onset is None or token_at is None else onset - token_at,
        end_after_token_s=None if token_at is None else end - token_at,
        first_sound_s=loud[0] - ended if loud else None,
        remarks=tuple(c.content for c in protocol.of(Commentary)),
        runs=tuple((round(a - ended, 2), round(b - ended, 2)) for a, b in runs),
        canaries=sum(spotted(heard, ROOM_RATE, c) for c in CANARIES),
    )


def sound_runs(loud: list[float], *, pause_s: float = 0.3) -> list[tuple[float, float]]:
    """Loud frame times grouped into stretches of sound (pauses under ``pause_s`` joined)."""
    runs: list[list[float]] = []
    for at in loud:
        if runs and at - runs[-1][1] < pause_s:
            runs[-1][1] = at
        else:
            runs.append([at, at])
    return [(a, b) for a, b in runs]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


async def main(
    trials: int, reasoning_s: float, policies: tuple[str, ...], *, verbose: bool = False
) -> None:
    from alicia.harness.recorded_llm import load_manifest

    spec = load_manifest()[SHAPE]
    question, rate = speak(spec.user)
    results: dict[str, list[Trial]] = {p: [] for p in policies}
    with LiveKitServer() as server:
        async with RecordedLLM() as recorded:
            recorded.route_model("recorded-model", Play(SHAPE, chunk_delay=pace(reasoning_s)))
            for i in range(trials):
                order = policies if i % 2 == 0 else tuple(reversed(policies))
                for policy in order:
                    t = await trial(server, recorded, policy, question, rate)
                    results[policy].append(t)
                    after = _ms(t.answer_after_token_s)
                    first = _ms(t.first_sound_s)
                    print(
                        f"trial {i + 1} {policy:7s}: silence max {t.silence_max_s * 1000:.0f} ms, "
                        f"first sound {first} ms, answer after token {after} ms, "
                        f"canaries {t.canaries}, remarks {list(t.remarks)}",
                        flush=True,
                    )
                    if verbose:
                        print(f"  sound: {list(t.runs)}", flush=True)

    def silence(policy: str) -> str:
        values = [t.silence_max_s * 1000 for t in results.get(policy, [])]
        return f"{max(values):.0f}" if values else "nan"

    # With remarks, a remark can still be playing when the answer starts (it is cut and
    # the answer follows within a few hundred ms), so the answer's first sound is dated
    # back from its end by the answer's own length, measured in the ``off`` trials (the
    # same text through the same TTS).
    spans = [
        t.end_after_token_s - t.answer_after_token_s
        for t in results.get("off", [])
        if t.end_after_token_s is not None and t.answer_after_token_s is not None
    ]
    span = percentile(spans, 50) if spans else None

    def onset_after_token(t: Trial, policy: str) -> float | None:
        if policy == "off" or span is None or t.end_after_token_s is None:
            return t.answer_after_token_s
        return t.end_after_token_s - span

    def after_token(policy_set: tuple[str, ...]) -> float:
        values = [
            v * 1000
            for p in policy_set
            for t in results.get(p, [])
            if (v := onset_after_token(t, p)) is not None
        ]
        return percentile(values, 50) if values else float("nan")

    delay = after_token(("cue", "summary")) - after_token(("off",))
    canaries = sum(t.canaries for ts in results.values() for t in ts)
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}"
    )
    print(
        f"RESULT silence_max_ms_off={silence('off')} silence_max_ms_cue={silence('cue')} "
        f"silence_max_ms_summary={silence('summary')} answer_delay_ms={delay:.0f} "
        f"canary_heard={canaries}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="trials per policy")
    parser.add_argument("--reasoning-s", type=float, default=8.0, help="seconds of reasoning")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--verbose", action="store_true", help="print each trial's sound")
    args = parser.parse_args()
    chosen = tuple(p for p in args.policies.split(",") if p)
    asyncio.run(main(args.trials, args.reasoning_s, chosen, verbose=args.verbose))
