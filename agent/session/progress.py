"""Spoken progress: while the model reasons, the agent says what it is working on.

livekit-agents plays one speech at a time from its queue: once the answer's speech holds
the floor (authorized, "thinking"), a ``say()`` waits behind the whole answer, so a remark
can never be heard while the model reasons. :class:`ProgressSpeaker` therefore puts a
*progress speech* in the queue just before the answer's speech is scheduled:

* a voice turn: right after the agent's ``on_user_turn_completed`` returns (livekit-agents
  interrupts the current speech before that hook, and schedules the answer, preemptive or
  not, right after it);
* typed input (a protocol UserMessage): right before ``generate_reply``;
* a tool reply: in ``function_tools_executed``, which livekit-agents emits from the
  answer's own task after the answer gave up the floor and before it schedules the tool
  reply again (the answer is that task's speech: ``current_speech`` is empty then).

The progress speech is an ordinary ``session.say(text, audio=..., add_to_chat_ctx=False)``:
the session's TTS, its audio output, interruptions and transcription apply; the chat
context never holds it. Its audio source waits for the answer it stands in front of:

* the first remark only ``delay`` after the user's end of speech, and only while the model
  still reasons (no answer text yet); the next after ``gap`` of quiet, as long as it goes on;
* the moment the answer's first text (or the round's end, or the answer's end) arrives,
  the progress speech ends: at once if a remark is playing (it is interrupted, which
  clears the audio buffer), and the answer, already synthesized behind it, follows;
* an answer whose speech is discarded (preemptive generation) never gets a remark: the
  speech waits for a *scheduled* answer;
* a progress speech interrupted by anyone else (the user speaking over it, a ControlStop)
  interrupts the answer too, as speaking during "thinking" does without remarks.

What is said comes from :class:`~alicia.agent.engine.remarks.RemarkWriter`, at the level
every listener in the room may hear (``listeners``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import numpy as np
from livekit import rtc
from livekit.agents import Agent, AgentSession, tts
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import (
    FunctionToolsExecutedEvent,
    SpeechCreatedEvent,
    UserStateChangedEvent,
)

from alicia.agent.engine.remarks import (
    CUES,
    ProgressPolicy,
    RemarkWriter,
    SpokenLevel,
    TopicSentences,
    speakable,
)
from alicia.agent.llm.sentences import sentence_ends
from alicia.agent.session.speeches import running_speech

__all__ = ["ProgressSpeaker", "Remark"]

logger = logging.getLogger("alicia.progress")

_BIND_TIMEOUT_S: Final = 1.0
"""How long a progress speech waits for the answer it stands in front of."""
_MIN_AFTER_TURN_S: Final = 0.7
"""However late the turn ended, the model gets this long before the first remark: a model
that answers by then is never preceded by one (a remark cut after a word or two, glued
to the answer, is worse than none: the demo's listener misheard the answer after one)."""
_REASONING_FOR_S: Final = 0.25
"""The first remark comes only once the model has been reasoning this long without
answering: a model that reasons briefly and answers is never preceded by one."""
_SILENT_FOR_S: Final = 1.0
"""A model that sends nothing this long after the turn is reasoning out of sight."""
_LEAD_S: Final = 0.4
"""A remark is chosen and synthesized this long before it is due."""
_STALE_END_S: Final = 10.0
"""An end of speech older than this is not the one the answer follows (typed input)."""
_PLAY_AHEAD_S: Final = 0.1
PLAY_OUT_MAX_S: Final = 3.0
"""Longest a summary remark's audio is taken to be still playing out after its last frame
was handed over (the room's output holds more than its 0.2 s source queue when the
process is loaded)."""
"""A remark's frames are handed to the audio output this far ahead of their playing time,
not all at once (its queue is unbounded), so a level that drops mid-remark stops it within
this, livekit's 200 ms audio source queue and the delivery."""
_EDGE_LEVEL: Final = 500
"""Samples quieter than this (of 32767) at the ends of a remark are not speech."""
_EDGE_KEEP_S: Final = 0.05
_FIRST_SENTENCE_CHARS: Final = 160
"""Answer text without a sentence end after which the answer counts as ready anyway."""
_MAX_TRACKED: Final = 64
"""Answers followed at once (older ones are forgotten)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Remark:
    """One remark as it starts playing: which answer it stands in front of, its text, and
    the level it was made at (``summary``: from the reasoning; ``cue``: not)."""

    answer: SpeechHandle
    text: str
    level: SpokenLevel = "cue"


@dataclasses.dataclass(slots=True, eq=False)
class _Answer:
    """What the speaker knows about one answer speech while its model reasons."""

    handle: SpeechHandle
    writer: RemarkWriter
    ready: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set when the current round's first answer sentence (or its end) arrived: no more
    remarks, and one that is playing ends."""
    answer_text: str = ""
    """The current round's answer text until its first sentence is complete."""
    reasoning_since: float | None = None
    """When the current round's first reasoning arrived (``time.monotonic()``)."""
    topics: TopicSentences = dataclasses.field(default_factory=TopicSentences)
    summary: str | None = None
    """The latest step summary (a paragraph's first sentence, or the provider's own)."""
    provider_summaries: bool = False
    said: set[str] = dataclasses.field(default_factory=set)
    """Summaries already offered to the writer (each is spoken once at most)."""
    tool: str | None = None
    fronted: str | None = None
    """The id of the progress speech in front of the current round, once bound."""
    quiet_since: float | None = None
    """When the last remark ended (``time.monotonic()``)."""


class ProgressSpeaker:
    """Speaks progress remarks in front of an AgentSession's answers (module docstring)."""

    def __init__(
        self,
        agent_session: AgentSession[Any],
        *,
        policy: ProgressPolicy,
        delay_s: float,
        gap_s: float,
        level: Callable[[], SpokenLevel],
        on_remark: Callable[[Remark], None],
    ) -> None:
        """``level`` is asked before each remark; ``on_remark`` hears each one as it starts."""
        self._session = agent_session
        self._policy: ProgressPolicy = policy
        self._delay_s = delay_s
        self._gap_s = gap_s
        self._level = level
        self._on_remark = on_remark
        self._answers: dict[str, _Answer] = {}
        self._remarks: set[str] = set()
        """Ids of our own progress speeches."""
        self._cutting: set[str] = set()
        """Progress speeches we end ourselves (not an interruption of the answer)."""
        self._saying = False
        self._user_ended_at: float | None = None
        self._wrapped: weakref.WeakKeyDictionary[Agent, Callable[..., Any]] = (
            weakref.WeakKeyDictionary()
        )
        """Agents whose ``on_user_turn_completed`` queues a progress speech: the hook."""
        self._kept: dict[str, list[rtc.AudioFrame]] = {}
        """Synthesized cues (a fixed, small set)."""
        self._warming: asyncio.Task[None] | None = None
        self._closed = False
        self._summary_handed_at: float | None = None
        """When (``time.monotonic``) the last frame of a summary remark was handed to the
        audio output (it ended, or stopped for a listener granted less): it plays out
        after that."""

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Follow the session (nothing is spoken under the ``off`` policy)."""
        if self._policy == "off":
            return
        s = self._session
        s.on("speech_created", self._on_speech_created)
        s.on("function_tools_executed", self._on_tools_executed)
        s.on("user_state_changed", self._on_user_state)
        with contextlib.suppress(RuntimeError):
            self._wrap(s.current_agent)
        self._warming = asyncio.create_task(self._warm(), name="alicia-progress-warm")

    async def aclose(self) -> None:
        """Stop following the session; progress speeches still playing are ended."""
        if self._closed or self._policy == "off":
            self._closed = True
            return
        self._closed = True
        s = self._session
        s.off("speech_created", self._on_speech_created)
        s.off("function_tools_executed", self._on_tools_executed)
        s.off("user_state_changed", self._on_user_state)
        for a in self._answers.values():
            a.ready.set()  # progress speeches end
        for agent, hook in list(self._wrapped.items()):
            if vars(agent).get("on_user_turn_completed") is hook:
                del agent.on_user_turn_completed  # the class's own again
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)

    def answer_of(self, remark: SpeechHandle) -> SpeechHandle | None:
        """The answer the progress speech ``remark`` stands in front of, once bound."""
        return next((a.handle for a in self._answers.values() if a.fronted == remark.id), None)

    def summary_playing_out(self) -> bool:
        """A summary remark may still be sounding: its audio handed to the room's output
        has not all played (a loaded process plays it out late). Looked at for
        :data:`PLAY_OUT_MAX_S` after its last frame (an unknown output: all that time)."""
        handed = self._summary_handed_at
        if handed is None or time.monotonic() - handed > PLAY_OUT_MAX_S:
            return False
        queued = queued_audio_s(self._session)
        return queued is None or queued > 0.0

    def is_remark(self, handle: SpeechHandle) -> bool:
        """``handle`` is one of our progress speeches (created by :meth:`front` or now)."""
        return self._saying or handle.id in self._remarks

    # -- what the answer does (told by the bridge) -----------------------------------

    def reasoning(self, handle: SpeechHandle, text: str) -> None:
        """Reasoning text of ``handle``'s model: a paragraph's first sentence is the
        latest summary (the extractive one), unless the provider writes its own."""
        a = self._answers.get(handle.id)
        if a is None:
            return
        if a.reasoning_since is None:
            a.reasoning_since = time.monotonic()
        if not a.provider_summaries:
            topic = a.topics.feed(text)
            if topic is not None:
                a.summary = topic

    def step(self, handle: SpeechHandle, summary: str) -> None:
        """A reasoning step of ``handle``'s model closed with the provider's own summary."""
        if (a := self._answers.get(handle.id)) is not None:
            a.summary = summary
            a.provider_summaries = True
            if a.reasoning_since is None:
                a.reasoning_since = time.monotonic()

    def answer(self, handle: SpeechHandle, text: str) -> None:
        """Answer text of ``handle``'s round: once its first sentence is complete (the
        part the TTS speaks first), the answer is ready and remarks end."""
        a = self._answers.get(handle.id)
        if a is None or a.ready.is_set():
            return
        a.answer_text += text
        if sentence_ends(a.answer_text) or len(a.answer_text) >= _FIRST_SENTENCE_CHARS:
            a.ready.set()

    def answered(self, handle: SpeechHandle) -> None:
        """``handle``'s round ended: no more remarks for it."""
        if (a := self._answers.get(handle.id)) is not None:
            a.ready.set()

    # -- putting progress speeches in the queue --------------------------------------

    def front(self) -> None:
        """Put a progress speech in the queue now, in front of the answer scheduled next."""
        if self._closed or self._policy == "off":
            return
        with contextlib.suppress(RuntimeError):
            self._wrap(self._session.current_agent)  # after a handoff: the new agent
        texts: asyncio.Queue[str | None] = asyncio.Queue(maxsize=64)
        box = _Box()
        self._saying = True
        try:
            handle = self._session.say(
                _texts(texts),
                audio=self._frames(texts, box),
                add_to_chat_ctx=False,
                allow_interruptions=True,
            )
        except RuntimeError:  # closing, or no TTS
            logger.debug("no progress speech", exc_info=True)
            return
        finally:
            self._saying = False
        box.handle = handle
        self._remarks.add(handle.id)
        handle.add_done_callback(self._on_remark_done)

    def _wrap(self, agent: Agent | None) -> None:
        """Make ``agent``'s ``on_user_turn_completed`` put a progress speech in the queue
        after it returns (right before livekit-agents schedules the answer)."""
        if agent is None or agent in self._wrapped:
            return
        original = agent.on_user_turn_completed
        speaker = self

        async def on_user_turn_completed(turn_ctx: Any, new_message: Any) -> None:
            await original(turn_ctx, new_message=new_message)
            speaker.front()  # no await between here and livekit scheduling the answer

        agent.on_user_turn_completed = on_user_turn_completed  # type: ignore[method-assign]
        self._wrapped[agent] = on_user_turn_completed

    # -- session events -------------------------------------------------------------

    def _on_speech_created(self, ev: SpeechCreatedEvent) -> None:
        handle = ev.speech_handle
        if self.is_remark(handle) or ev.source != "generate_reply":
            return
        while len(self._answers) >= _MAX_TRACKED:
            self._answers.pop(next(iter(self._answers)))
        self._answers[handle.id] = _Answer(handle, RemarkWriter(self._policy))
        handle.add_done_callback(self._on_answer_done)

    def _on_answer_done(self, handle: SpeechHandle) -> None:
        a = self._answers.pop(handle.id, None)
        if a is not None:
            a.ready.set()

    def _on_tools_executed(self, ev: FunctionToolsExecutedEvent) -> None:
        if not ev.has_tool_reply:
            return
        handle = running_speech(self._session)  # current_speech is empty while tools run
        a = self._answers.get(handle.id) if handle is not None else None
        if a is None or a.handle.interrupted:
            return
        a.tool = ev.function_calls[0].name if ev.function_calls else None
        a.fronted = None
        a.ready = asyncio.Event()
        a.answer_text = ""
        a.reasoning_since = None
        self.front()  # livekit reschedules the answer right after this event

    def _user_spoke_since(self, since: float) -> float | None:
        """When the user last spoke, if after ``since`` (now, if still speaking)."""
        if self._session.user_state == "speaking":
            return time.monotonic()
        ended = self._user_ended_at
        return ended if ended is not None and ended > since else None

    def _on_user_state(self, ev: UserStateChangedEvent) -> None:
        if ev.old_state == "speaking" and ev.new_state != "speaking":
            # The VAD reports the end of speech after its silence window: date it back.
            self._user_ended_at = time.monotonic() - _vad_silence(self._session)

    def _on_remark_done(self, handle: SpeechHandle) -> None:
        self._remarks.discard(handle.id)
        cut = handle.id in self._cutting
        self._cutting.discard(handle.id)
        if not handle.interrupted or cut:
            return
        # Interrupted by the user speaking over it or a stop: the answer it stood in front
        # of goes too, as speaking while the agent thinks interrupts the answer.
        for a in list(self._answers.values()):
            if a.fronted == handle.id and not a.handle.done():
                with contextlib.suppress(RuntimeError):
                    a.handle.interrupt()

    # -- the progress speech's audio --------------------------------------------------

    async def _bind(self, box: _Box) -> _Answer | None:
        """The scheduled answer this progress speech stands in front of."""
        deadline = time.monotonic() + _BIND_TIMEOUT_S
        while time.monotonic() < deadline and not self._closed and box.handle is not None:
            for a in reversed(list(self._answers.values())):
                h = a.handle
                if h.scheduled and not h.done() and a.fronted is None:
                    a.fronted = box.handle.id
                    return a
            await asyncio.sleep(0.02)
        return None

    async def _frames(
        self, texts: asyncio.Queue[str | None], box: _Box
    ) -> AsyncIterator[rtc.AudioFrame]:
        """The progress speech's audio: remarks while the answer's model reasons."""
        try:
            a = await self._bind(box)
            if a is None:
                return
            now = time.monotonic()
            ended = self._user_ended_at
            if ended is None or now - ended > _STALE_END_S:  # typed input, or long ago
                ended = now
            due = (
                max(ended + self._delay_s, box.at + min(self._delay_s, _MIN_AFTER_TURN_S), now)
                if a.quiet_since is None
                else a.quiet_since + self._gap_s
            )
            logger.debug(
                "progress speech bound",
                extra={
                    "since_user_end_s": round(now - ended, 3),
                    "since_turn_end_s": round(now - box.at, 3),
                    "due_in_s": round(due - now, 3),
                },
            )
            # Each remark is chosen and synthesized a little before it is due, so that
            # it starts on time.
            while await _until(a.ready, due - _LEAD_S):
                if (spoke := self._user_spoke_since(box.at)) is not None:
                    # The user spoke over this progress speech (a pause or an interruption
                    # is being decided): quiet is counted again from the end of it.
                    due = max(spoke, time.monotonic()) + self._gap_s
                    continue
                first = a.quiet_since is None  # the first remark acknowledges: a cue
                summary = a.summary if a.summary not in a.said and not first else None
                text = a.writer.next(summary=summary, tool=a.tool, level=self._level())
                made: SpokenLevel = (
                    "summary" if summary is not None and text == speakable(summary) else "cue"
                )
                if summary is not None:
                    a.said.add(summary)
                a.tool = None
                if text is None:
                    return
                frames = await self._audio(text, a.ready)
                if frames is None or not await _until(a.ready, due):
                    return
                if first and not await _still_reasoning(a, box.at):
                    return
                if made == "summary" and self._level() != "summary":
                    continue  # someone granted less joined meanwhile: a cue instead
                started = time.monotonic()
                if made == "cue":  # lk.transcription reaches all in the room, granted or not
                    texts.put_nowait(text)
                self._on_remark(Remark(a.handle, text, made))
                stopped = False
                played = 0.0
                for frame in frames:
                    ahead = started + played - _PLAY_AHEAD_S - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                    if a.ready.is_set():
                        break
                    if made == "summary" and self._level() != "summary":
                        stopped = True  # someone granted less joined: not a word more
                        break
                    yield frame
                    if made == "summary":
                        self._summary_handed_at = time.monotonic()
                    played += frame.duration
                if a.ready.is_set():
                    self._cut(box.handle)
                    return
                if stopped:
                    logger.info("summary remark stopped: a listener granted less joined")
                    a.quiet_since = time.monotonic()  # cues take over, after the usual gap
                    due = a.quiet_since + self._gap_s
                    continue
                duration = sum(f.duration for f in frames)
                a.quiet_since = started + duration
                due = a.quiet_since + self._gap_s
            if a.quiet_since is not None and a.quiet_since > time.monotonic():
                self._cut(box.handle)  # a remark still playing: end it now
        finally:
            texts.put_nowait(None)

    async def _audio(self, text: str, ready: asyncio.Event) -> list[rtc.AudioFrame] | None:
        """``text`` spoken by the session's TTS (cues are synthesized once and kept)."""
        if (kept := self._kept.get(text)) is not None:
            return kept
        frames = await _synthesize(self._session.tts, text, ready)
        if frames is not None and text in CUES:
            self._kept[text] = frames
        return frames

    async def _warm(self) -> None:
        """Synthesize the first cue before anyone needs it (it is the first remark)."""
        with contextlib.suppress(Exception):
            await self._audio(CUES[0], asyncio.Event())

    def _cut(self, handle: SpeechHandle | None) -> None:
        """End our progress speech ``handle`` at once (the answer is ready)."""
        if handle is None or handle.id not in self._remarks or handle.done():
            return
        self._cutting.add(handle.id)
        with contextlib.suppress(RuntimeError):
            handle.interrupt(force=True)


@dataclasses.dataclass(slots=True)
class _Box:
    """The progress speech's handle, once ``say()`` returned it."""

    handle: SpeechHandle | None = None
    at: float = dataclasses.field(default_factory=time.monotonic)
    """When the progress speech was queued (the user's turn ended)."""


async def _texts(queue: asyncio.Queue[str | None]) -> AsyncIterator[str]:
    """The transcript of a progress speech: each remark as it starts."""
    while (text := await queue.get()) is not None:
        yield text + " "


async def _still_reasoning(a: _Answer, turn_end: float) -> bool:
    """Wait until ``a``'s model has reasoned for :data:`_REASONING_FOR_S` without
    answering (or sent nothing for :data:`_SILENT_FOR_S` after ``turn_end``); False
    once it answers instead."""
    while not a.answer_text and not a.ready.is_set():
        now = time.monotonic()
        since = a.reasoning_since
        if since is None and now >= turn_end + _SILENT_FOR_S:
            return True
        if since is not None and now >= since + _REASONING_FOR_S:
            return True
        await _until(a.ready, now + 0.02)
    return False


async def _until(ready: asyncio.Event, due: float) -> bool:
    """Wait until ``due``; False if ``ready`` was set first (or is set)."""
    if ready.is_set():
        return False
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, due - time.monotonic())):
            await ready.wait()
    return not ready.is_set()


async def _synthesize(
    engine: tts.TTS[Any] | None, text: str, ready: asyncio.Event
) -> list[rtc.AudioFrame] | None:
    """``text`` synthesized by the session's TTS (None if the answer got ready first)."""
    if engine is None:
        return None

    async def run() -> list[rtc.AudioFrame]:
        assert engine is not None
        async with engine.synthesize(text) as stream:
            return [ev.frame async for ev in stream]

    job = asyncio.ensure_future(run())
    waiter = asyncio.ensure_future(ready.wait())
    try:
        await asyncio.wait({job, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not job.done():
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
        return None
    try:
        return _trimmed(job.result())
    except Exception:
        logger.warning("remark not synthesized", exc_info=True)
        return None


def _trimmed(frames: list[rtc.AudioFrame]) -> list[rtc.AudioFrame]:
    """The speech in ``frames`` without the near-silence a TTS leaves around it (so the
    gap between remarks is the gap heard), in 20 ms frames."""
    if not frames:
        return frames
    rate, channels = frames[0].sample_rate, frames[0].num_channels
    pcm = np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > _EDGE_LEVEL)
    if len(loud) == 0:
        return []
    keep = int(_EDGE_KEEP_S * rate) * channels
    pcm = pcm[max(0, loud[0] - keep) : loud[-1] + keep]
    step = rate // 50 * channels
    return [
        rtc.AudioFrame(chunk.tobytes(), rate, channels, len(chunk) // channels)
        for chunk in (pcm[i : i + step] for i in range(0, len(pcm), step))
    ]


def _vad_silence(session: AgentSession[Any]) -> float:
    """The silence (seconds) the session's VAD waits for before it reports an end of
    speech, when it says (Silero's ``min_silence_duration``); else 0."""
    options = getattr(session.vad, "_opts", None)
    value = getattr(options, "min_silence_duration", 0.0)
    return float(value) if isinstance(value, int | float) and 0 <= value < 5 else 0.0


def queued_audio_s(session: AgentSession[Any]) -> float | None:
    """Seconds of audio handed to ``session``'s room output and not yet played (its
    frames waiting to reach the source, and the source's queue); None when the output is
    not livekit-agents' room output (the attributes read are its own, version-pinned)."""
    output: Any = session.output.audio
    while output is not None and getattr(output, "_audio_source", None) is None:
        output = getattr(output, "next_in_chain", None)
    if output is None:
        return None
    waiting = getattr(output, "_audio_buf", None)
    frames = waiting.qsize() if waiting is not None and hasattr(waiting, "qsize") else 0
    queued: float = output._audio_source.queued_duration
    return queued + 0.05 * frames  # the output's frames are 50 ms
