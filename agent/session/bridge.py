"""The Alicia protocol inside anyone's AgentSession: reasoning to the room, never to TTS.

:func:`attach_reasoning` attaches a :class:`ReasoningBridge` to a running AgentSession and
its room: a :class:`~alicia.agent.engine.source.TurnSource` for the engine's
:class:`~alicia.agent.engine.session.ProtocolSession`. The AgentSession runs the turns (VAD,
endpointing, interruptions, STT, LLM, tools, TTS); the bridge reports each to the protocol
clients in the room, through the same projection and under the same rules (grants,
visibility levels, encrypted values, ZDR, storage, failover) as the worker's own turns:

* each final user transcript -> a Transcription (its id is the turn's user message);
* each speech of the agent, once scheduled -> one turn: ReasoningSteps from the LLM's
  reasoning (:class:`~alicia.agent.session.llm.AliciaLLM` reports it to the bridge; never
  in the chat chunks' content, so never TTS or the transcript), ToolUseRequest/Result from
  the session's tool calls, StartAnswer and AssistantSentences from what the agent says,
  and the end (``stopped`` if interrupted: the answer is what was spoken, as partial);
* a UserMessage from a protocol client, or (with :attr:`ReasoningBridge.chat_topic`, the
  session's RoomIO text input off) a whole ``lk.chat`` message read within the transport's
  bounds -> ``generate_reply(user_input=...)``; an authorised ControlStop -> interrupted.

Preemptive generation: a speech not yet scheduled is held (what its LLM reports waits,
bounded); one discarded before it is scheduled leaves nothing (``protocol/DECISIONS.md``).
It never changes what the session speaks. A turn's span nests under its ``llm_request``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from livekit import rtc
from livekit.agents import AgentSession, llm
from livekit.agents.voice import SpeechHandle
from livekit.agents.voice.events import (
    CloseEvent,
    FunctionToolsExecutedEvent,
    SpeechCreatedEvent,
    UserInputTranscribedEvent,
)
from opentelemetry import context as otel_context

from alicia.agent.engine.assembler import TurnAssembler
from alicia.agent.engine.events import StepReady, TurnEvent, TurnStatus, Usage
from alicia.agent.engine.participants import (
    InvalidState,
    LLMUnavailable,
    Overloaded,
    Participant,
    TurnRequest,
)
from alicia.agent.engine.projection import TurnProjection
from alicia.agent.engine.session import ProtocolSession
from alicia.agent.engine.sink import StepSink
from alicia.agent.engine.tools import Outcome, ToolError, parse_arguments
from alicia.agent.gate.transport import RoomTransport, announce
from alicia.agent.session.progress import ProgressSpeaker, Remark
from alicia.agent.session.speeches import running_speech, speech_failed, spoken_text
from alicia.agent.session.spoken import KnownListeners, announce_remark, listening_level
from alicia.agent.session.takeover import continue_history
from alicia.agent.session.tools import tool_result
from alicia.agent.settings import Settings
from alicia.agent.wiring import open_telemetry
from alicia.protocol import ids as id_prefix
from alicia.protocol import new_id

if TYPE_CHECKING:
    from alicia.agent.engine.outbox import Tenure
    from alicia.agent.engine.sealing import DataKeys

__all__ = ["ReasoningBridge"]

logger = logging.getLogger("alicia.bridge")

_MAX_PENDING: Final = 65_536
"""Observed pieces waiting to be sent (a turn's tokens); past it they are dropped."""
_MAX_HELD: Final = 65_536
"""Observed pieces a not yet scheduled speech holds; past it they are dropped."""
_SEED_TIMEOUT_S: Final = 1.0
_TOOL_TIMEOUT_MS: Final = 30_000
"""``timeoutMs`` announced for the session's tools (livekit-agents sets none)."""


@dataclasses.dataclass(slots=True, eq=False)
class _Turn:
    """One speech of the agent as a protocol turn."""

    handle: SpeechHandle
    request: TurnRequest | None = None
    assembler: TurnAssembler | None = None
    projection: TurnProjection | None = None
    tool_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    """The session's tool ``call_id`` -> the ToolUseRequest id sent for it."""
    failed: LLMUnavailable | None = None
    held: list[Callable[[], Any]] | None = None
    """While the speech is not scheduled (preemptive generation): what it reported, in
    order, to run once it is; ``None`` once the turn is open."""


class ReasoningBridge:
    """Reports an AgentSession's turns to the protocol clients of its room."""

    chat_topic: str | None = None  # typed input read on this topic, as UserMessages
    tenure: Tenure | None = None  # failover: the room's lease, checked before every send

    def __init__(
        self,
        agent_session: AgentSession[Any],
        room: rtc.Room,
        *,
        settings: Settings,
        sink: StepSink,
        keys: DataKeys | None = None,
        conversation_id: str | None = None,
    ) -> None:
        """Nothing runs until :meth:`start`."""
        self._agent_session = agent_session
        self._room = room
        self._settings = settings
        self._sink = sink
        self._keys = keys
        self._conversation_id = conversation_id or room.name
        self._transport: RoomTransport | None = None
        self.session: ProtocolSession | None = None
        self._pending: deque[Callable[[], Any]] = deque()
        self._wake = asyncio.Event()
        self._turns: dict[str, _Turn] = {}  # open turns by speech id
        self._requests: dict[str, TurnRequest] = {}
        """Protocol UserMessages by the id of the speech that answers them."""
        self._trace_parents: dict[str, object] = {}
        """Each speech's first LLM request's trace context: its turn's span nests there."""
        self._heard: list[tuple[str, str, str]] = []
        """Final transcripts not yet answered: (user message id, identity, text)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._held_tasks: set[asyncio.Task[None]] = set()  # per held speech, till scheduled
        self._unobserve: Callable[[], None] | None = None
        self._progress: ProgressSpeaker | None = None
        self._known: KnownListeners | None = None
        self._closing = False
        self.closed = asyncio.Event()  # set once aclose has finished (storage closed)

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Join the protocol topic of the room and follow the session's events."""
        self._transport = RoomTransport(self._room, chat_topic=self.chat_topic).start()
        self.session = ProtocolSession(
            conversation_id=self._conversation_id,
            options=self._settings.engine_options(),
            transport=self._transport,
            sink=self._sink,
            keys=self._keys,
        )
        self.session.telemetry = open_telemetry(self._settings)
        self.session.outbox.tenure = self.tenure
        self.session.attach(self)
        s = self._agent_session
        s.on("user_input_transcribed", self._on_transcribed)
        s.on("speech_created", self._on_speech_created)
        s.on("function_tools_executed", self._on_tools_executed)
        s.on("close", self._on_close)
        if callable(observe := getattr(s.llm, "observe", None)):
            self._unobserve = observe(self)
        else:
            logger.warning(
                "the session's LLM does not report reasoning: no ReasoningSteps are sent "
                "(use agent.session.AliciaLLM)"
            )
        if self.speaks and self._settings.spoken_progress != "off":
            self._progress = ProgressSpeaker(
                s,
                policy=self._settings.spoken_progress,
                delay_s=self._settings.progress_delay_s,
                gap_s=self._settings.progress_gap_s,
                level=lambda: listening_level(self._room, self._settings.reasoning_visibility),
                on_remark=lambda remark: self._later(lambda: self._remark(remark)),
            )
            self._progress.start()
            if self._settings.spoken_progress == "summary":
                played = self._progress.summary_playing_out
                known = KnownListeners(self._room, self._settings.reasoning_visibility, played)
                self._known = known.start()
        self._tasks = [
            asyncio.create_task(self.session.run(), name="alicia-bridge-session"),
            asyncio.create_task(self._pump(), name="alicia-bridge-pump"),
            asyncio.create_task(continue_history(s, self.session), name="alicia-bridge-history"),
        ]
        await announce(self._room)

    async def aclose(self) -> None:
        """Stop following the session, close the protocol session and storage (a second
        call returns at once: await :attr:`closed` to know the first has finished)."""
        if self._closing:
            return
        self._closing = True
        s = self._agent_session
        try:
            s.off("user_input_transcribed", self._on_transcribed)
            s.off("speech_created", self._on_speech_created)
            s.off("function_tools_executed", self._on_tools_executed)
            s.off("close", self._on_close)
            if self._unobserve is not None:
                self._unobserve()
            if self._known is not None:
                self._known.close()
            if self._progress is not None:
                await self._progress.aclose()
            tasks = [*self._tasks, *self._held_tasks]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.session is not None:
                await self.session.aclose()
            if self._transport is not None:
                await self._transport.aclose()
            await self._sink.aclose()
            if (close_keys := getattr(self._keys, "aclose", None)) is not None:
                await close_keys()
        finally:
            self.closed.set()

    def _on_close(self, _: CloseEvent) -> None:
        task = asyncio.ensure_future(self.aclose())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # -- TurnSource -----------------------------------------------------------------

    @property
    def tool_use(self) -> bool:
        """The session's tools run server-side."""
        return True

    @property
    def speaks(self) -> bool:
        """Answers are spoken when the session has a TTS."""
        return self._agent_session.tts is not None

    async def submit(self, p: Participant, request: TurnRequest) -> None:
        """A protocol client's UserMessage: the session answers it like typed input."""
        if request.replaces is not None:
            raise InvalidState("this agent cannot edit or regenerate earlier messages")
        if len(self._requests) >= self._settings.queue_size:
            raise Overloaded(f"{len(self._requests)} turns already waiting")
        if self._progress is not None:
            self._progress.front()  # in the queue before the answer
        handle = self._agent_session.generate_reply(user_input=request.text)
        self._requests[handle.id] = request

    def queued_owner(self, user_id: str) -> str | None:
        """Who asked the not yet answered UserMessage ``user_id``."""
        for request in self._requests.values():
            if request.user_id == user_id:
                return request.requester
        return None

    def drop_queued(self, user_id: str) -> bool:
        """A speech is never dropped before it starts; it is interrupted once it does."""
        return False

    def interrupt_speech(self, may_stop: Callable[[str | None], bool]) -> None:
        """Interrupt the speech now playing if ``may_stop`` allows it for its requester
        (a progress remark's is its answer's); the speeches queued after it play on."""
        playing = self._agent_session.current_speech
        if playing is None:
            return
        answer = self._progress.answer_of(playing) if self._progress is not None else None
        turn = self._turns.get((answer or playing).id)
        request = turn.request if turn is not None else self._requests.get((answer or playing).id)
        if may_stop(None if request is None else request.requester):
            self._interrupt(playing)

    def forget(self, identity: str) -> None:
        """Nothing waits per participant here."""

    # -- what the session does ------------------------------------------------------

    def _on_turn(self, handle: SpeechHandle, action: Callable[[_Turn], Any]) -> None:
        """Run ``action`` on ``handle``'s turn on the pump, after the speech's opening queued
        before it (what the LLM reports while the pump is busy must not find no turn)."""
        self._later(lambda: action(t) if (t := self._turns.get(handle.id)) is not None else None)

    def _later(self, action: Callable[[], Any]) -> None:
        """Run ``action`` (sync, or returning an awaitable) in order on the pump."""
        if len(self._pending) >= _MAX_PENDING:
            logger.warning("bridge queue full: an observed piece is dropped")
            return
        self._pending.append(action)
        self._wake.set()

    def _on_transcribed(self, ev: UserInputTranscribedEvent) -> None:
        if ev.is_final and ev.transcript.strip():
            identity = ev.speaker_id or self._speaker()
            self._later(lambda: self._transcribed(identity, ev.transcript))

    async def _transcribed(self, identity: str, text: str) -> None:
        assert self.session is not None
        user_id = await self.session.transcription(identity, text)
        if user_id is not None:
            self._heard.append((user_id, identity, text))

    def _on_speech_created(self, ev: SpeechCreatedEvent) -> None:
        handle = ev.speech_handle
        if self._progress is not None and self._progress.is_remark(handle):
            return  # a progress remark is not a turn
        self._later(lambda: self._open(handle))
        handle.add_done_callback(lambda h: self._later(lambda: self._close(h)))

    def _on_tools_executed(self, ev: FunctionToolsExecutedEvent) -> None:
        outputs = [(call.call_id, out.output, out.is_error) for call, out in ev.zipped()]
        self._later(lambda: self._tools_done(outputs))

    # -- what the LLM reports (agent.session.llm) -----------------------------------

    def round_started(self, round_id: str) -> None:
        """An LLM round of the current speech starts (in livekit-agents' LLM request
        span: the turn's span nests under the first one)."""
        handle = running_speech(self._agent_session)  # its LLM round runs in this task
        if handle is None:
            return
        turn = self._turns.get(handle.id)
        if handle.id not in self._trace_parents and len(self._trace_parents) < _MAX_PENDING:
            parent = self._trace_parents[handle.id] = otel_context.get_current()
            if turn is not None and turn.projection is not None:
                turn.projection.trace.within(parent)
        self._on_turn(handle, lambda t: self._piece(t, _new_round))

    def reasoning(self, round_id: str, text: str, *, summary: bool) -> None:
        """Reasoning text of the current speech's round, as it streams."""
        handle = running_speech(self._agent_session)  # its LLM round runs in this task
        if handle is None:
            return
        if self._progress is not None and not summary:
            self._progress.reasoning(handle, text)
        self._on_turn(
            handle, lambda t: self._piece(t, lambda a: a.reasoning(text, summary=summary))
        )

    def answer(self, round_id: str, text: str) -> None:
        """Answer text of the current speech's round, as it streams."""
        handle = running_speech(self._agent_session)  # its LLM round runs in this task
        if handle is None:
            return
        if self._progress is not None:
            self._progress.answer(handle, text)
        self._on_turn(handle, lambda t: self._piece(t, lambda a: a.answer_text(text)))

    def round_ended(
        self,
        round_id: str,
        *,
        tool_calls: Sequence[llm.FunctionToolCall],
        usage: Usage | None,
        error: BaseException | None,
    ) -> None:
        """The round is over: its tool calls (run next by the session), usage, error."""
        handle = running_speech(self._agent_session)  # its LLM round runs in this task
        if handle is None:
            return
        if self._progress is not None:
            self._progress.answered(handle)  # its remarks end now
        calls = list(tool_calls)
        self._on_turn(handle, lambda t: self._round_end(t, calls, usage, error))

    async def _remark(self, remark: Remark) -> None:
        """Announce a remark being spoken to the protocol clients."""
        assert self.session is not None
        turn = self._turns.get(remark.answer.id)
        target = turn.request.user_id if turn is not None and turn.request is not None else None
        await announce_remark(
            self.session, remark.text, target, zdr=self._settings.zdr, level=remark.level
        )

    # -- the pump -------------------------------------------------------------------

    async def _pump(self) -> None:
        """Apply observed actions in order (after a takeover's restore); cut due steps."""
        assert self.session is not None
        if self.session.outbox.store is not None:
            await self.session.restored.wait()
        while True:
            while self._pending:
                action = self._pending.popleft()
                try:
                    result = action()
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    logger.exception("bridge action failed")
            self._wake.clear()
            timeout = self._next_due()
            if timeout is None:
                await self._wake.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            for turn in list(self._turns.values()):
                if turn.held is None:
                    await self._piece(turn, lambda a: a.poll())

    def _next_due(self) -> float | None:
        dues = [
            due
            for t in self._turns.values()
            if t.assembler is not None and (due := t.assembler.due()) is not None
        ]
        return max(0.0, min(dues) - time.monotonic()) if dues else None

    async def _open(self, handle: SpeechHandle) -> None:
        assert self.session is not None
        if handle.id in self._turns or (handle.done() and not handle.chat_items):
            return
        turn = _Turn(handle)
        self._turns[handle.id] = turn
        wait = getattr(handle, "_wait_for_scheduled", None)
        if not handle.scheduled and not handle.done() and callable(wait):  # preemptive
            turn.held = []
            task = asyncio.create_task(self._when_scheduled(turn, wait), name="alicia-held")
            self._held_tasks.add(task)
            task.add_done_callback(self._held_tasks.discard)
            handle.add_done_callback(lambda _: _cancel(task))
            return
        await self._begin(turn)

    async def _when_scheduled(self, turn: _Turn, scheduled: Callable[[], Awaitable[Any]]) -> None:
        """Release ``turn`` once its speech is scheduled (cancelled when it is done)."""
        await scheduled()
        self._later(lambda: self._release(turn))

    async def _release(self, turn: _Turn) -> None:
        """Open a held turn and send what it held, in order."""
        held, turn.held = turn.held, None
        if held is None or self._turns.get(turn.handle.id) is not turn:
            return
        await self._begin(turn)
        for action in held:
            result = action()
            if asyncio.iscoroutine(result):
                await result

    def _hold(self, turn: _Turn, action: Callable[[], Any]) -> bool:
        """Keep ``action`` for later if ``turn`` is held (True), else False."""
        if turn.held is None:
            return False
        if len(turn.held) < _MAX_HELD:
            turn.held.append(action)
        return True

    async def _begin(self, turn: _Turn) -> None:
        """Open the protocol turn of a scheduled speech."""
        assert self.session is not None
        handle = turn.handle
        request = self._requests.pop(handle.id, None)
        if request is None:
            if self._heard:
                user_id = self._heard[-1][0]
                identity = self._heard[-1][1]
                text = " ".join(h[2] for h in self._heard)
            else:  # the agent speaks first (a greeting) or answers typed input
                user_id = new_id(id_prefix.MESSAGE)
                identity = self._speaker()
                text = ""
            request = TurnRequest(user_id, text, identity, voice=True)
        self._heard.clear()
        turn.request = request
        await self._seed(request.user_id)
        turn.assembler = TurnAssembler(
            request.user_id,
            self.session.steps,
            step_max_delay_s=self._settings.step_max_delay_s,
        )
        turn.projection = self.session.open_turn(
            request, new_id(id_prefix.MESSAGE), stop=lambda: self._interrupt(handle)
        )
        model = getattr(self._agent_session.llm, "model", None)
        if isinstance(model, str):
            turn.projection.model = model
        parent = self._trace_parents.get(handle.id)
        if parent is not None:
            turn.projection.trace.within(parent)

    async def _seed(self, user_id: str) -> None:
        """Continue a stored ``stepIndex`` chain (at most 1 s for storage to answer)."""
        assert self.session is not None
        steps = self.session.steps
        try:
            async with asyncio.timeout(_SEED_TIMEOUT_S):
                last = await self._sink.last_step_index(user_id)
        except Exception:
            logger.warning("stored step index unavailable", extra={"previous_id": user_id})
            last = 0
        steps.seed(user_id, max(last, steps.last_index(user_id)))

    def _interrupt(self, handle: SpeechHandle) -> None:
        with contextlib.suppress(RuntimeError):
            handle.interrupt(force=True)

    async def _piece(self, turn: _Turn, make: Callable[[TurnAssembler], list[TurnEvent]]) -> None:
        if self._hold(turn, lambda: self._piece(turn, make)):
            return
        if turn.assembler is None or turn.assembler.ended:
            return
        await self._emit(turn, make(turn.assembler))

    async def _emit(self, turn: _Turn, events: list[TurnEvent]) -> None:
        assert turn.projection is not None
        for event in events:
            if isinstance(event, StepReady) and event.summary and self._progress is not None:
                self._progress.step(turn.handle, event.summary)  # the provider's own
            await turn.projection.emit(event)

    async def _round_end(
        self,
        turn: _Turn,
        calls: list[llm.FunctionToolCall],
        usage: Usage | None,
        error: BaseException | None,
    ) -> None:
        if self._hold(turn, lambda: self._round_end(turn, calls, usage, error)):
            return
        a = turn.assembler
        if a is None or a.ended:
            return
        if usage is not None:
            a.add_usage(usage)
        if error is not None:
            turn.failed = LLMUnavailable(f"the language model failed: {type(error).__name__}")
        for call in calls:
            request_id = new_id(id_prefix.TOOL_USE)
            turn.tool_ids[call.call_id] = request_id
            try:
                parameters = parse_arguments(call.arguments)
            except ToolError:
                parameters = {"raw": call.arguments}
            await self._emit(
                turn, a.tool_requested(request_id, call.name, parameters, _TOOL_TIMEOUT_MS)
            )

    async def _tools_done(self, outputs: list[tuple[str, str, bool]]) -> None:
        for call_id, output, is_error in outputs:
            for turn in self._turns.values():
                request_id = turn.tool_ids.pop(call_id, None)
                if request_id is None or turn.assembler is None:
                    continue
                if is_error:
                    error = tool_result(output)
                    code, message = error.get("error"), error.get("message")
                    outcome = Outcome(
                        False,
                        error_code=code if isinstance(code, str) else "tool_error",
                        error_message=message if isinstance(message, str) else output,
                    )
                else:
                    outcome = Outcome(True, result=tool_result(output))
                await self._emit(turn, turn.assembler.tool_finished(request_id, outcome))

    async def _close(self, handle: SpeechHandle) -> None:
        self._trace_parents.pop(handle.id, None)
        turn = self._turns.get(handle.id)
        if turn is not None and turn.held is not None:
            if not handle.scheduled:  # discarded before it was scheduled: nothing shown
                self._turns.pop(handle.id, None)
                return
            await self._release(turn)  # scheduled, and done before its release ran
        turn = self._turns.pop(handle.id, None)
        if turn is None or turn.assembler is None:
            return
        a = turn.assembler
        spoken = spoken_text(handle)
        if not a.answer and spoken:  # said without an LLM round (session.say)
            await self._emit(turn, a.answer_text(spoken))
        status: TurnStatus = "complete"
        error = None
        if turn.failed is not None or speech_failed(handle):
            status, error = "failed", turn.failed or LLMUnavailable("the reply failed")
        elif handle.interrupted:
            status = "stopped"
        answer = spoken if handle.interrupted else None
        await self._emit(turn, a.end(status, answer=answer, error=error))

    def _speaker(self) -> str:
        """The identity of the participant the session listens to."""
        with contextlib.suppress(Exception):
            linked = self._agent_session.room_io.linked_participant
            if linked is not None:
                return linked.identity
        return self._room.local_participant.identity


def _new_round(a: TurnAssembler) -> list[TurnEvent]:
    a.round_started()
    return []


def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
