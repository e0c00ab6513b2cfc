"""Spoken progress, heard through the real worker, livekit-server and offline speech.

The worker runs as ``python -m alicia.agent start`` with ``ALICIA_VOICE=offline``. The
recorded ``vllm_progress`` stream is paced so that the model reasons for 8 s before its
first answer token. A listening client speaks the question (espeak-ng) and records every
audio frame of the agent; pocketsphinx tells what it heard:

* a first remark within 2 s of the end of the question, no silence over 3 s before the
  answer, then the answer; a summary remark's words come from a paragraph's first
  sentence; the canaries of the reasoning's other sentences are never heard;
* a second listener granted ``none``: only cues are heard;
* a model that answers within the delay: no remark at all;
* speaking over a remark, or a ControlStop, ends it; the LLM's next request holds none
  (a typed question after the summary remarks' turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from livekit import api, rtc

from alicia.agent.engine.remarks import CUES, speakable, tool_cue
from alicia.agent.engine.sink import REMARK_TYPE
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.harness.speech import (
    ROOM_RATE,
    AudioRecorder,
    Microphone,
    pairs_heard,
    speak,
    spotted,
    spotted_phrases,
    transcribe,
)
from alicia.protocol import (
    AssistantSentence,
    Commentary,
    ControlStop,
    StartAnswer,
    Transcription,
    UserMessage,
    new_id,
)
from bench.progress import CANARIES, SHAPE, pace, sound_runs
from tests.e2e.voice.helpers import OneWorker
from tests.e2e.worker import WorkerProcess, running_worker
from tests.support.livekit_rooms import ProtocolClient, joined
from tests.worker_streams import HERE as TOOL_STREAMS
from tests.worker_streams import combined_streams

pytestmark = pytest.mark.integration

PAD_S = 0.3
"""``speak`` pads the speech with this much faint noise: the question ends before it."""
FIRST_REMARK_BOUND_S = 3.0
"""Seconds from the model being asked (the recorded server's arrival time) to the first
remark's sound: the promise (1.2 s of delay plus synthesis, well inside the silence of a
model that reasons 8 s), with margin for a loaded 2-core machine running the suite in
parallel. The figure itself is measured by ``bench/progress.py`` (README)."""
LONGEST_SILENCE_S = 4.0
"""The longest silence while the model thinks: the quiet before the next remark
(``ALICIA_PROGRESS_GAP``, 2.5 s) plus its synthesis and delivery, with margin for a
loaded 2-core machine (3.07 s seen); without remarks it would be the 8 s of reasoning."""
ANSWER_HEARD = 0.25
"""The answer's word pairs the recognizer must hear (0.44 missing 4 of 8 key words)."""


@pytest.fixture
def llm(module_llm: RecordedLLM) -> RecordedLLM:
    """The module's recorded LLM (its workers' too), reset, its model routed to the progress
    stream, paced: the model reasons 8 s before its first answer."""
    module_llm.reset()
    module_llm.route_model("recorded-model", Play(SHAPE, chunk_delay=pace(8.0)))
    return module_llm


def voice_env(policy: str) -> dict[str, str]:
    """A voice worker's settings with spoken progress ``policy``."""
    return {
        "ALICIA_VOICE": "offline",
        "ALICIA_REASONING_VISIBILITY": "none",
        "ALICIA_SPOKEN_PROGRESS": policy,
        # speech over a remark: a turn however late it is recognized (CI: over 2 s late)
        "ALICIA_FALSE_INTERRUPTION_TIMEOUT": "30",
    }


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def module_llm() -> AsyncIterator[RecordedLLM]:
    async with RecordedLLM() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def workers(
    livekit_server: LiveKitServer, module_llm: RecordedLLM
) -> AsyncIterator[OneWorker]:
    """The module's voice worker, by spoken progress policy (one at a time)."""
    one = OneWorker(livekit_server, module_llm, voice_env)
    try:
        yield one
    finally:
        await one.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def summary_worker(workers: OneWorker) -> WorkerProcess:
    return await workers.get("summary")


@pytest_asyncio.fixture(loop_scope="session")
async def cue_worker(workers: OneWorker) -> WorkerProcess:
    return await workers.get("cue")


def granted(server: LiveKitServer, room: str, identity: str, level: str) -> str:
    return server.token(identity, room, attributes={"alicia.reasoning": level})


class Listener:
    """A participant that asks the question aloud and records everything the agent says."""

    def __init__(self, room: rtc.Room, conversation: str, *, keep_mic: bool = False) -> None:
        """``keep_mic``: for a listener that speaks again after the answer began (otherwise
        its microphone is unpublished then: the turn was taken, and a silent published
        microphone costs the agent a sixth of a core)."""
        self.room = room
        self.keep_mic = keep_mic
        self.recorder = AudioRecorder(room)
        self.client = ProtocolClient(room, conversation)
        self.mic = Microphone(room)
        self.ended = 0.0
        """When the question's speech ended (``time.monotonic()``)."""
        self.answer_seen_at: float | None = None
        """When the answer's first envelope arrived (it comes before its audio)."""

    async def ask(self, text: str) -> None:
        """Speak ``text`` once the agent is there (the question ends at :attr:`ended`)."""
        await self.client.wait_for_agent()
        await self.client.handshake()
        await self.mic.start()
        pcm, rate = speak(text)
        watch = asyncio.create_task(self._watch_answer())
        try:
            self.ended = await self.mic.say(pcm, rate) - PAD_S
        except BaseException:
            watch.cancel()
            raise
        self._watch = watch

    async def _watch_answer(self) -> None:
        while not self.client.of(StartAnswer):
            await asyncio.sleep(0.02)
        self.answer_seen_at = time.monotonic()
        if not self.keep_mic:
            await self.mic.stop()

    async def hear_answer(self) -> float:
        """Wait for the whole answer to be spoken; returns when its audio ended."""
        await self.client.wait_for(AssistantSentence, within=90.0, is_final=True)
        await self.recorder.until_quiet(self.ended, quiet_s=2.0, within=60.0)
        self._watch.cancel()
        return self.recorder.loud(after=self.ended)[-1]

    def remarks(self) -> list[Commentary]:
        return [c for c in self.client.of(Commentary) if c.comment_type == REMARK_TYPE]

    def before_answer(self) -> np.ndarray:
        """What was heard between the question and the answer's first envelope."""
        assert self.answer_seen_at is not None
        return self.recorder.pcm_between(self.ended, self.answer_seen_at)


SUMMARY_WORDS = {"comparing", "soft", "hard", "yolks", "thinking", "altitude", "size"}
SUMMARY_WORDS |= {"putting", "answer", "together", "checking", "boiling", "times", "eggs"}
"""Words of the paragraphs' first sentences (none is in a cue)."""


def summary_heard(pcm: np.ndarray, summaries: list[str]) -> tuple[bool, str]:
    """Whether a summary remark is heard in ``pcm`` (the speech before the answer), and
    what the recognizer made of it. Its transcript sharing a word of the summaries is
    enough; when the recognizer garbles them all (a loaded machine's run heard "cardio"
    and "barely" for "hard yolks"), keyword spotting of the summaries' word pairs, the
    recognizer's steadier mode, decides (the cue's words are in no pair)."""
    heard = transcribe(pcm, ROOM_RATE)
    if SUMMARY_WORDS & set(heard.split()):
        return True, heard
    pairs = {" ".join(p) for text in summaries for p in itertools.pairwise(text.lower().split())}
    return bool(spotted_phrases(pcm, ROOM_RATE, {pair.strip(".,") for pair in pairs})), heard


def assert_no_canary(listener: Listener, spoken: list[str]) -> None:
    for canary in CANARIES:
        assert canary not in " ".join(spoken).lower()
    assert not spotted_phrases(listener.recorder.pcm(), ROOM_RATE, CANARIES)


async def test_a_listener_granted_none_who_joins_leaves_only_cues(
    livekit_server: LiveKitServer, llm: RecordedLLM, summary_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    room = f"progress-none-{new_id('r')}"
    alice = granted(livekit_server, room, "alice", "summary")
    bob = granted(livekit_server, room, "bob", "none")
    async with joined(livekit_server, room, "alice", alice) as r:
        listener = Listener(r, room)
        await listener.ask(spec.user)
        await listener.client.wait_for(Commentary, within=30.0)  # then bob joins
        async with joined(livekit_server, room, "bob", bob) as other:
            joined_at = time.monotonic()
            bob_hears = AudioRecorder(other)
            await listener.hear_answer()
            await listener.recorder.aclose()
            await bob_hears.aclose()
    texts = [c.content for c in listener.remarks()]
    assert len(texts) >= 2, texts
    assert set(texts) <= set(CUES), texts  # the first is a cue; bob lowers the rest
    assert listener.answer_seen_at is not None
    after_join = listener.recorder.pcm_between(joined_at, listener.answer_seen_at)
    assert not SUMMARY_WORDS & set(transcribe(after_join, ROOM_RATE).split())
    assert_no_canary(listener, texts)
    assert not spotted_phrases(bob_hears.pcm(), ROOM_RATE, CANARIES)


async def summary_remark_sounding(listener: Listener, worker: WorkerProcess) -> float:
    """Wait (40 s at most) until a summary remark's Commentary arrived and its sound is
    heard; when the Commentary arrived (``time.monotonic()``: it starts playing)."""
    try:
        async with asyncio.timeout(40):
            while not [c for c in listener.remarks() if c.content not in CUES]:
                await asyncio.sleep(0.02)
            shown = time.monotonic()
            while not listener.recorder.loud(after=shown):
                await asyncio.sleep(0.02)
    except TimeoutError as exc:
        remarks = [c.content for c in listener.remarks()]
        raise AssertionError(f"{remarks}\n{worker.log(20000)}") from exc
    return shown


STOPPED_WITHIN_S = 1.0
"""Seconds from a listener's grant being lowered to the end of a summary remark's sound:
the agent hears of it (livekit-server sends an attribute change at once), stops at the
next frame, and what it had handed to the audio output still plays (0.1 s ahead, plus
livekit's 200 ms source queue and the delivery). A remark plays about 2 s."""


async def test_a_summary_remark_stops_when_a_listener_s_grant_is_lowered_while_it_plays(
    livekit_server: LiveKitServer, llm: RecordedLLM, summary_worker: WorkerProcess
) -> None:
    # What a participant granted less who joins mid-remark causes: the level drops while
    # the remark plays (a grant lowered by the server API is that moment, made exactly).
    spec = llm.spec(SHAPE)
    room = f"progress-lowered-{new_id('r')}"
    alice = granted(livekit_server, room, "alice", "summary")
    bob = granted(livekit_server, room, "bob", "summary")
    async with (
        joined(livekit_server, room, "alice", alice) as r,
        contextlib.AsyncExitStack() as stack,
        api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk,
    ):
        listener = Listener(r, room)
        await listener.ask(spec.user)  # the agent listens to alice (the first to join)
        other = await stack.enter_async_context(joined(livekit_server, room, "bob", bob))
        bob_hears = AudioRecorder(other)
        shown = await summary_remark_sounding(listener, summary_worker)
        await lk.room.update_participant(
            api.UpdateParticipantRequest(
                room=room, identity="bob", attributes={"alicia.reasoning": "none"}
            )
        )
        lowered, lowered_wall = time.monotonic(), time.time()
        await listener.hear_answer()
        await listener.recorder.aclose()
        await bob_hears.aclose()
    assert listener.answer_seen_at is not None
    runs = sound_runs(listener.recorder.loud(after=shown))
    playing = runs[0]  # the summary remark's sound, heard before the grant was lowered
    assert playing[0] < lowered, (shown, lowered, runs)
    assert playing[1] - lowered < STOPPED_WITHIN_S, (shown, lowered, lowered_wall, runs)
    texts = [c.content for c in listener.remarks()]
    later = [c.content for c in listener.remarks() if (c.timestamp or 0) / 1000 > lowered_wall]
    assert set(later) <= set(CUES), texts  # cues take over
    assert_no_canary(listener, texts)


async def test_a_listener_who_joins_during_a_summary_remark_hears_none_of_it_unannounced(
    livekit_server: LiveKitServer, llm: RecordedLLM, summary_worker: WorkerProcess
) -> None:
    # bob publishes nothing: livekit-server announces him to the agent in its next batch
    # of joins, up to 3 s later, yet he may subscribe to the agent's audio at once.
    spec = llm.spec(SHAPE)
    room = f"progress-unannounced-{new_id('r')}"
    alice = granted(livekit_server, room, "alice", "summary")
    bob = granted(livekit_server, room, "bob", "none")
    transcriber = (
        api.AccessToken(livekit_server.api_key, livekit_server.api_secret)
        .with_identity("bot")
        .with_kind("agent")
        .with_attributes({"alicia.reasoning": "none"})
        .with_grants(api.VideoGrants(room_join=True, room=room, agent=True))
        .to_jwt()
    )
    async with (
        joined(livekit_server, room, "alice", alice) as r,
        contextlib.AsyncExitStack() as stack,
    ):
        listener = Listener(r, room)
        alice_reads = Transcripts(r)
        await listener.ask(spec.user)
        # Another agent (a transcriber, a note taker), granted none: never let in to listen.
        bot = await stack.enter_async_context(joined(livekit_server, room, "bot", transcriber))
        bot_hears = AudioRecorder(bot)
        shown = await summary_remark_sounding(listener, summary_worker)
        bob_joins = time.monotonic()
        other = await stack.enter_async_context(joined(livekit_server, room, "bob", bob))
        bob_hears, bob_reads = AudioRecorder(other), Transcripts(other)
        await listener.hear_answer()
        await listener.recorder.aclose()
        await bob_hears.aclose()
        await bot_hears.aclose()
    assert bot_hears.loud() == []  # not a sound, the answer's neither
    runs = sound_runs(listener.recorder.loud(after=shown))
    playing = runs[0]  # the summary remark, playing when bob joined
    assert playing[0] < bob_joins < playing[1], (shown, bob_joins, runs)
    heard = sound_runs(bob_hears.loud())
    assert heard, "bob, let in once announced, hears the agent"  # the answer at least
    assert heard[0][0] > playing[1], (bob_joins, playing, heard)  # none of the remark
    texts = [c.content for c in listener.remarks()]
    assert_no_canary(listener, texts)
    # LiveKit's transcription goes to everyone in the room, announced or not, granted or
    # not: it carries the cues, never a summary remark.
    summaries = [words(t) for t in texts if t not in CUES]
    assert summaries, texts
    transcripts = [words(t) for t in alice_reads.texts + bob_reads.texts]
    assert any(words(CUES[0]) in words(t) for t in alice_reads.texts), alice_reads.texts
    assert not [s for s in summaries for t in transcripts if s in t], (summaries, transcripts)


class Transcripts:
    """Every ``lk.transcription`` text stream a participant receives, read whole."""

    def __init__(self, room: rtc.Room) -> None:
        self.texts: list[str] = []
        self._reading: set[asyncio.Task[None]] = set()
        room.register_text_stream_handler("lk.transcription", self._on_stream)

    def _on_stream(self, reader: rtc.TextStreamReader, identity: str) -> None:
        async def read() -> None:
            self.texts.append(await reader.read_all())

        task = asyncio.get_running_loop().create_task(read())
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)


def words(text: str) -> str:
    """``text``'s words, lower case, without punctuation, one space apart."""
    return " ".join("".join(c for c in w if c.isalnum()) for w in text.lower().split())


# Not first in the module: the speech lanes' first test runs in the suite's first minute,
# while every xdist worker starts its livekit-server, Postgres and workers, and its
# question was transcribed up to 10 s late there (fresh71); the module starts with a test
# that states no time. Beside the other summary tests: one worker serves them all.
async def test_remarks_fill_the_silence_with_summaries_and_never_the_reasoning(
    livekit_server: LiveKitServer, llm: RecordedLLM, summary_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    room = f"progress-{new_id('r')}"
    async with joined(
        livekit_server, room, "alice", granted(livekit_server, room, "alice", "summary")
    ) as r:
        listener = Listener(r, room)
        await listener.ask(spec.user)
        transcript = await listener.client.wait_for(Transcription, within=60.0)
        answer_end = await listener.hear_answer()
        await listener.recorder.aclose()
        # A typed second question, answered at once: what the LLM reads then.
        said = len(listener.remarks())
        llm.route_model("recorded-model", Play(SHAPE, chunk_delay=0.0005))
        await listener.client.send(
            UserMessage(id=new_id("m"), conversation_id=room, content="And a duck egg?")
        )
        async with asyncio.timeout(60):  # the second answer
            while len([s for s in listener.client.of(AssistantSentence) if s.is_final]) < 2:
                await asyncio.sleep(0.1)
    log = summary_worker.log()
    # The LLM never reads a remark: the second request has the first answer in its
    # context, and none of the remarks (summaries of the reasoning, and cues).
    request = json.dumps(llm.requests[-1])
    assert "And a duck egg?" in request
    assert spec.answer.split(".")[0] in request
    for text in [c.content for c in listener.remarks()[:said]]:
        assert text not in request, text
    runs = sound_runs(listener.recorder.loud(after=listener.ended))
    remarks = listener.remarks()[:said]
    texts = [c.content for c in remarks]
    # Heard: a first remark soon after the model is asked, no long silence while it
    # thinks, then the answer.
    asked = next(at for at in llm.received_at if at > listener.ended)
    assert runs[0][0] - asked < FIRST_REMARK_BOUND_S, (asked, runs, texts, log)
    # Before the answer: without remarks the first sound would be the answer, after the
    # 8 s of reasoning. (Not a bound from the question's end: recognition and end of turn
    # come first, and took 3.95, 6.45 and 8.4 s on the loaded 2-core CI machine; the
    # figure on an idle machine is bench/progress.py's.)
    assert listener.answer_seen_at is not None
    assert runs[0][0] < listener.answer_seen_at - 1.0, (runs, listener.answer_seen_at, texts)
    silence = listener.recorder.longest_silence(asked, answer_end)
    assert silence < LONGEST_SILENCE_S, (asked, runs, texts)
    assert len(remarks) >= 2, texts
    assert {c.target_id for c in remarks} == {transcript.id}
    assert all(c.author_role == "assistant" for c in remarks)
    assert texts[0] == CUES[0]  # the first remark acknowledges
    topics = [speakable(step.split(". ")[0] + ".") for step in spec.steps]
    assert [t for t in texts if t in topics], (texts, topics)
    assert set(texts) <= {*topics, *CUES}, texts
    assert len(texts) == len(set(texts))
    heard_summary, remarks_heard = summary_heard(
        listener.before_answer(), [t for t in texts if t in topics]
    )
    assert heard_summary, (remarks_heard, texts)
    heard = transcribe(listener.recorder.pcm_between(listener.ended, answer_end), ROOM_RATE)
    assert pairs_heard(heard, spec.answer) >= ANSWER_HEARD, heard
    assert_no_canary(listener, texts)
    for canary in CANARIES:  # the check can fail: spoken, the canaries are heard
        sentence = next(x for x in spec.reasoning.replace("\n", " ").split(". ") if canary in x)
        assert spotted(*speak(sentence), canary), sentence


async def test_a_model_that_answers_within_the_delay_gets_no_remark(
    livekit_server: LiveKitServer, llm: RecordedLLM, cue_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    # Reasoning for 0.08 s, then the answer: its first sentence is ready well within the
    # 0.7 s the model gets after the turn (1.2 s after the question) before a first remark.
    llm.route_model("recorded-model", Play(SHAPE, chunk_delay=0.0005))
    room = f"progress-fast-{new_id('r')}"
    async with joined(livekit_server, room, "alice") as r:
        listener = Listener(r, room)
        await listener.ask(spec.user)
        await listener.hear_answer()
        await listener.recorder.aclose()
    assert listener.remarks() == []
    assert listener.answer_seen_at is not None
    # Nothing was said before the answer.
    assert listener.recorder.loud(after=listener.ended)[0] > listener.answer_seen_at


async def remark_playing(listener: Listener, earlier: int = 0) -> Commentary:
    """Wait for the first remark after the ``earlier`` ones and its sound (after the question)."""
    async with asyncio.timeout(30.0):
        while len(listener.remarks()) <= earlier:
            await asyncio.sleep(0.05)
    remark = listener.remarks()[earlier]
    async with asyncio.timeout(10):
        while not listener.recorder.loud(after=listener.ended):
            await asyncio.sleep(0.05)
    return remark


def finals(listener: Listener) -> list[Transcription]:
    """The final transcriptions the listener was sent, in order."""
    return [t for t in listener.client.of(Transcription) if t.final]


def assert_turn_ended_unspoken(listener: Listener, target: str | None, cut_wall: float) -> None:
    """The turn of ``target`` said no more remarks after ``cut_wall`` and never answered."""
    later = [
        c.content
        for c in listener.remarks()
        if c.target_id == target and (c.timestamp or 0) / 1000 > cut_wall + 0.5
    ]
    assert later == [], later
    answers = {s.id for s in listener.client.of(StartAnswer) if s.previous_id == target}
    said = [s.text for s in listener.client.of(AssistantSentence) if s.previous_id in answers]
    assert "".join(said) == "", said  # closed as stopped, with nothing said


async def test_speaking_over_a_remark_interrupts_it_and_its_answer(
    livekit_server: LiveKitServer, llm: RecordedLLM, cue_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    room = f"progress-barge-{new_id('r')}"
    interruption, irate = speak("Wait, wait, that is enough for now.")
    async with joined(livekit_server, room, "alice") as r:
        listener = Listener(r, room, keep_mic=True)
        # A first, fast answer: livekit-agents ignores the user's audio during the first
        # 3 s the agent speaks in a session (its echo-cancellation warm-up).
        llm.route_model("recorded-model", Play(SHAPE, chunk_delay=0.0005))
        await listener.ask(spec.user)
        await listener.hear_answer()
        # The fast answer may have had a remark too, on a loaded machine: not this test's.
        earlier = len(listener.remarks())
        first = len(finals(listener))
        # 16 s of reasoning: speech over the agent only pauses it until the user's turn
        # ends, and the answer's text goes out as it streams (fS: the turn ended 8 s in)
        llm.route_model("recorded-model", Play(SHAPE, chunk_delay=pace(16.0)))
        pcm, rate = speak(spec.user)
        listener.ended = await listener.mic.say(pcm, rate) - PAD_S
        remark = await remark_playing(listener, earlier)
        # The turn the remark is for is the second question's (on a loaded machine the
        # recognizer may cut a question in two: two transcriptions, two turns).
        asked = [t.id for t in finals(listener)[first:]]
        spoke_wall = time.time()
        await listener.mic.say(interruption, irate, trailing_silence_s=0.5)
        # Long enough for the turn's next remark and its answer, had they come.
        await asyncio.sleep(max(0.0, listener.ended + 19.0 - time.monotonic()))
        for _ in range(300):  # and up to 30 s for the interruption's transcript (it lags)
            if len(finals(listener)) >= 3:
                break
            await asyncio.sleep(0.1)
        await listener.recorder.aclose()
    heard = [(t.id, t.text) for t in finals(listener)]
    assert len(heard) >= 3, heard  # the question twice, then the interruption
    assert remark.target_id in asked, (remark, heard)
    for target in asked:  # the question's turn (or both halves of it) said nothing more
        assert_turn_ended_unspoken(listener, target, spoke_wall)


async def test_a_stop_ends_a_remark_and_its_turn(
    livekit_server: LiveKitServer, llm: RecordedLLM, cue_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    room = f"progress-stop-{new_id('r')}"
    async with joined(livekit_server, room, "alice") as r:
        listener = Listener(r, room)
        await listener.ask(spec.user)
        remark = await remark_playing(listener)
        stopped_at, stopped_wall = time.monotonic(), time.time()
        await listener.client.send(
            ControlStop(conversation_id=room, target_id=remark.target_id, stop_type="all")
        )
        await asyncio.sleep(max(0.0, listener.ended + 11.0 - time.monotonic()))
        await listener.recorder.aclose()
    # The remark's sound ended at once (it had about a second to go), nothing followed.
    loud = listener.recorder.loud(after=stopped_at)
    assert not loud or loud[-1] - stopped_at < 0.8, loud
    assert_turn_ended_unspoken(listener, remark.target_id, stopped_wall)


async def test_after_a_tool_round_the_remark_names_the_tool(
    livekit_server: LiveKitServer, tmp_path: Path, workers: OneWorker
) -> None:
    """The model calls the calculator at once, then reasons 4 s over its result: the
    remark in front of the rescheduled answer is the tool's cue, heard before the answer."""
    await workers.stop()  # this test's worker, on its own recorded LLM, takes the room
    async with RecordedLLM(streams_dir=combined_streams(tmp_path)) as llm:
        followup = Play(
            "calculator_tool_followup",
            chunk_delay=pace(4.0, TOOL_STREAMS / "calculator_tool_followup.sse"),
        )
        llm.script(Play("calculator_tool_call", chunk_delay=0.0005), followup)
        spec = llm.spec("calculator_tool_call")
        room = f"progress-tool-{new_id('r')}"
        env = voice_env("cue")
        async with (
            running_worker(livekit_server, llm.base_url, env=env) as worker,
            joined(livekit_server, room, "alice") as r,
        ):
            listener = Listener(r, room)
            await listener.ask(spec.user)
            transcript = await listener.client.wait_for(Transcription, within=60.0)
            await listener.hear_answer()
            await listener.recorder.aclose()
            log = worker.log()
        assert len(llm.requests) == 2, llm.requests  # the call, then the tool's result
    remarks = listener.remarks()
    texts = [c.content for c in remarks]
    assert tool_cue("calculator") == "Checking the calculator."
    assert "Checking the calculator." in texts, (texts, log[-3000:])
    assert {c.target_id for c in remarks} == {transcript.id}
    # Announced, and heard, before the answer.
    order = [type(e.body).__name__ for e in listener.client.box]
    assert order.index("Commentary") < order.index("StartAnswer"), order
    assert listener.answer_seen_at is not None
    assert listener.recorder.loud(after=listener.ended)[0] < listener.answer_seen_at
