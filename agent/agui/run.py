"""AG-UI runs on the turn engine: one :class:`~alicia.agent.engine.turn.Turn` per run, the
same protocol session (storage, keys, ZDR) as a room, and the events for one caller.

:class:`Runs` owns what every run shares (the storage sink, the data keys, the model
client, the tools) and every run's task. :meth:`Runs.start` returns a :class:`RunStream`:
the run's AG-UI events, fed by the run's own task through a bounded queue. When the
caller goes away the stream is closed: the turn is stopped at once and still ends
properly (its answer stored, marked partial), so nothing is lost and nothing hangs. A
run that outlasts ``ALICIA_AGUI_RUN_TIMEOUT`` is stopped the same way and ends with
``RUN_ERROR`` (code ``run_timeout``) instead of ``RUN_FINISHED``; one whose turn does not
close within a grace period after that is cancelled.

Storage is the worker's: the run serves its turn through a
:class:`~alicia.agent.engine.session.ProtocolSession` for the thread (conversation id =
thread id) with no participants, so the projection stores exactly what a room stores
(the user message, steps, tool use, the answer; under ZDR steps only sealed with the
conversation's data key) and nothing is sent anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

import openai
from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent, RunFinishedEvent, RunStartedEvent
from ag_ui.core import UserMessage as Question

from alicia.agent.engine.keeper import Keeper
from alicia.agent.engine.participants import Participant, TurnRequest
from alicia.agent.engine.sealing import DataKeys
from alicia.agent.engine.session import ProtocolSession
from alicia.agent.engine.sink import META_FROM, StepSink, lookup_message
from alicia.agent.engine.tools import ToolBox
from alicia.agent.engine.transport import Incoming
from alicia.agent.engine.turn import Turn
from alicia.agent.settings import Settings
from alicia.agent.wiring import open_telemetry
from alicia.protocol import UserMessage, envelope, new_id
from alicia.protocol import ids as id_prefix

from .auth import Caller
from .history import RejectedInput, read_messages
from .limits import Slot
from .projection import AguiProjection

__all__ = ["RunStream", "Runs"]

_ASKED: Final = 4096
"""Question ids (with their thread and asker) a process remembers; storage knows the rest."""

logger = logging.getLogger("alicia.agui")

_QUEUE: Final = 512
"""Events a run may be ahead of its caller before it waits for the caller to read."""
_STOP_GRACE_S: Final = 10.0
"""Seconds a stopped run (caller gone) may take to close its turn before it is cancelled."""
_THREADS: Final = 10_000
"""Threads whose stanza marks one process remembers."""
_END: Final = object()


class RunStream:
    """One run's AG-UI events, in order (iterate once); :meth:`close` when done."""

    def __init__(self) -> None:
        """An empty stream; the run's task feeds it."""
        self._queue: asyncio.Queue[Any] = asyncio.Queue(_QUEUE)
        self._turn: Turn | None = None
        self.gone = False
        """The caller went away: events are dropped, the turn is stopped."""
        self.expired = False
        """The run's deadline passed: the turn is stopped, the run ends with RUN_ERROR."""
        self.ended = False
        """The run's last event (RUN_FINISHED or RUN_ERROR) was queued."""

    async def put(self, events: Sequence[BaseEvent]) -> None:
        """Queue ``events`` for the caller (waits while the caller is behind)."""
        for event in events:
            if self.gone or self.ended:
                return
            self.ended = isinstance(event, RunFinishedEvent | RunErrorEvent)
            await self._queue.put(event)

    def expire(self) -> None:
        """The run's deadline passed: stop its turn (the run then ends with RUN_ERROR)."""
        self.expired = True
        if self._turn is not None:
            self._turn.stop()

    def finish(self) -> None:
        """No more events."""
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_END)

    def close(self) -> None:
        """The caller is gone (or done): stop the turn, drop what is queued."""
        self.gone = True
        if self._turn is not None:
            self._turn.stop()
        while not self._queue.empty():
            self._queue.get_nowait()

    async def __aiter__(self) -> AsyncIterator[BaseEvent]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            yield item


class _Source:
    """The turn source of an AG-UI run's session: the run itself (nothing is queued)."""

    def __init__(self, tool_use: bool) -> None:
        self._tool_use = tool_use

    @property
    def tool_use(self) -> bool:
        return self._tool_use

    @property
    def speaks(self) -> bool:
        return False

    async def submit(self, p: Participant, request: TurnRequest) -> None:
        raise RuntimeError("an AG-UI run takes its turn from its request only")

    def queued_owner(self, user_id: str) -> str | None:
        return None

    def drop_queued(self, user_id: str) -> bool:
        return False

    def interrupt_speech(self, may_stop: Callable[[str | None], bool]) -> None:
        return None

    def forget(self, identity: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


class _Nowhere:
    """The transport of a session with no participants: nothing is ever sent."""

    async def send(self, data: bytes, *, to: Sequence[str] | None = None) -> None:
        return None

    async def __aiter__(self) -> AsyncIterator[Incoming]:
        return
        yield  # an empty async generator

    async def aclose(self) -> None:
        return None


class Runs:
    """Every AG-UI run of one process (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        sink: StepSink,
        llm: openai.AsyncOpenAI,
        keys: DataKeys | None = None,
        tools: ToolBox | None = None,
    ) -> None:
        """The shared parts; runs start with :meth:`start`."""
        self.settings = settings
        self.sink = sink
        self.llm = llm
        self.keys = keys
        self.tools = tools
        self.options = settings.turn_options()
        self.tasks: set[asyncio.Task[None]] = set()
        self._marks: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """thread -> (last client stanza, last server stanza) this process numbered."""
        self._asked: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """question id -> (thread, caller) of the runs this process served lately."""

    async def claim(self, caller: Caller, run: RunAgentInput) -> str | None:
        """Why ``caller`` may not ask under the run's question id (None: it may). An id is
        its first asker's, in its thread: another caller's (or another thread's, or an
        answer's) id is refused, whether this process saw it or storage holds it."""
        question = run.messages[-1] if run.messages else None
        if not isinstance(question, Question):
            return None  # the run itself says why (RUN_ERROR)
        mine = (run.thread_id, caller.identity)
        held = self._asked.get(question.id)
        if held is None:
            stored = await lookup_message(self.sink, question.id)
            if stored is not None:
                asker = stored.owner if stored.role == "user" else None
                held = (stored.conversation_id, asker or "")
        if held is not None and held != mine:
            return f"message id {question.id!r} belongs to another participant or thread"
        self._asked[question.id] = mine
        self._asked.move_to_end(question.id)
        while len(self._asked) > _ASKED:
            self._asked.popitem(last=False)
        return None

    def start(self, caller: Caller, run: RunAgentInput, slot: Slot) -> RunStream:
        """Start serving ``run`` for ``caller``; its events arrive on the returned stream.
        The run's task holds ``slot`` too, until its turn has closed."""
        stream = RunStream()
        task = asyncio.create_task(self._serve(stream, caller, run), name="alicia-agui-run")
        slot.hold()
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(lambda _: slot.release())
        return stream

    async def aclose(self) -> None:
        """Stop every run and wait (bounded) for their turns to close."""
        tasks = list(self.tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=_STOP_GRACE_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _serve(self, stream: RunStream, caller: Caller, run: RunAgentInput) -> None:
        limit = self.settings.agui_run_timeout_s
        deadline = asyncio.get_running_loop().call_later(limit, stream.expire)
        try:
            await stream.put([RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id)])
            try:
                async with asyncio.timeout(limit + _STOP_GRACE_S) as hard:
                    await self._turn(stream, caller, run)
            except TimeoutError:
                if not hard.expired():
                    raise
                logger.warning("agui run cancelled: its turn outlived the deadline")
            if stream.expired:  # unless its turn ended the run already
                await stream.put([_timed_out(limit)])
        except Exception:
            logger.exception("agui run failed", extra={"thread": run.thread_id})
            await stream.put([RunErrorEvent(message="the run failed inside the server")])
        finally:
            deadline.cancel()
            stream.finish()

    async def _turn(self, stream: RunStream, caller: Caller, run: RunAgentInput) -> None:
        cid = run.thread_id
        session = ProtocolSession(
            conversation_id=cid,
            options=self.settings.engine_options(),
            transport=_Nowhere(),
            sink=self.sink,
            keys=self.keys,
            llm=self.llm,
        )
        session.attach(_Source(self.tools is not None))
        session.outbox.store = None  # a run is one HTTP response: no room to take over
        session.telemetry = open_telemetry(self.settings)
        try:
            await session.load_data_key()
            sealer = session.sealer
            who = caller.identity
            answer_id = new_id(id_prefix.MESSAGE)
            keeper = Keeper()
            opener: Callable[..., str] | None = None
            if sealer is not None:
                # Values are bound to what they are for: the kind, the message or tool
                # call they ride on, and the caller they were issued to.
                opener = lambda value, **bind: sealer.open(value, cid, sub=who, **bind)  # noqa: E731
                keeper = Keeper(
                    lambda text: sealer.seal(cid, text, knd="passback", ref=answer_id, sub=who),
                    lambda value: sealer.open(value, cid, knd="passback", sub=who),
                )
            try:
                prompt = read_messages(
                    run.messages, requester=who, open_value=opener, keeper=keeper
                )
            except RejectedInput as exc:
                where = f" (message {exc.message_id!r})" if exc.message_id else ""
                logger.info("agui run rejected", extra={"thread": cid, "error": str(exc)})
                await stream.put([RunErrorEvent(message=f"{exc}{where}", code="rejected_input")])
                return
            session.history = prompt.history
            client_last, server_last = self._marks.get(cid, (0, 0))
            session.outbox.continue_after(server_last)
            previous = prompt.history[-1].answer_id if prompt.history else None
            question = UserMessage(
                id=prompt.user_id, conversation_id=cid, content=prompt.text, previous_id=previous
            )
            self.sink.submit(
                envelope(
                    question,
                    stanza_id=client_last + 1,
                    conversation_id=cid,
                    meta={META_FROM: who},
                )
            )
            turn = Turn(
                user_id=prompt.user_id,
                text=prompt.text,
                answer_id=answer_id,
                llm=self.llm,
                options=self.options,
                history=prompt.history,
                tools=self.tools,
                steps=session.steps,
                seed=self.sink.last_step_index,
                keeper=keeper,
            )
            stream._turn = turn
            if stream.gone or stream.expired:
                turn.stop()
            request = TurnRequest(prompt.user_id, prompt.text, caller.identity)
            projection = session.open_turn(request, answer_id, stop=turn.stop)
            view = AguiProjection(
                thread_id=cid,
                run_id=run.run_id,
                answer_id=answer_id,
                level=caller.level,
                seal=None
                if sealer is None
                else (lambda text, ref: sealer.seal(cid, text, knd="step", ref=ref, sub=who)),
            )
            try:
                async with contextlib.aclosing(turn.events()) as events:
                    async for event in events:
                        await projection.emit(event)
                        out = view.feed(event)
                        if stream.expired:  # the deadline stopped the turn: not finished
                            limit = self.settings.agui_run_timeout_s
                            out = [
                                _timed_out(limit) if isinstance(e, RunFinishedEvent) else e
                                for e in out
                            ]
                        await stream.put(out)
            finally:
                if not projection.ended:
                    session.close_turn(projection, None)
                self._mark(cid, client_last + 1, session.outbox.last)
        finally:
            await session.aclose()

    def _mark(self, thread: str, client: int, server: int) -> None:
        self._marks[thread] = (client, server)
        self._marks.move_to_end(thread)
        while len(self._marks) > _THREADS:
            self._marks.popitem(last=False)


def _timed_out(limit: float) -> RunErrorEvent:
    return RunErrorEvent(
        message=f"the run took longer than {limit:g} s (ALICIA_AGUI_RUN_TIMEOUT)",
        code="run_timeout",
    )
