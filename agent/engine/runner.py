"""The engine's own turn source: a queue per participant, one :class:`Turn` at a time.

:class:`TurnRunner` runs each participant's turns (UserMessages, variations, final
transcripts, typed input) in that participant's own task, one after another, from a
bounded queue (full: ErrorMessage 504). A ``continue`` turn is sent the conversation up
to the answer it continues (:func:`~alicia.agent.engine.variation.continuation`). Each
turn is a :class:`~alicia.agent.engine.turn.Turn` whose events go through the session's
projection (:meth:`ProtocolSession.open_turn`); a stop cancels the turn's LLM stream or
tool at once and the turn still ends properly.

Reasoning goes back to the LLM only where the provider's pass-back rule needs it
(:mod:`alicia.agent.llm.providers`), sealed with the conversation's data key while it waits
(:class:`~alicia.agent.engine.keeper.Keeper`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import openai

from alicia.protocol import ids as id_prefix
from alicia.protocol import new_id

from .keeper import Keeper
from .participants import Overloaded, Participant, TurnRequest
from .session import ProtocolSession
from .tools import ToolBox
from .turn import Exchange, Turn
from .variation import continuation

__all__ = ["TurnRunner", "session_keeper"]

logger = logging.getLogger("alicia.conversation")


class TurnRunner:
    """Runs a protocol session's turns with the engine's :class:`Turn` (a TurnSource)."""

    def __init__(
        self,
        session: ProtocolSession,
        *,
        llm: openai.AsyncOpenAI,
        tools: ToolBox | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Serve ``session``'s turns with ``llm``; attaches itself to the session."""
        self._session = session
        self._llm = llm
        self._tools = tools if session.options.tools_enabled else None
        self._options = session.options.turn
        self._clock = clock or session.clock
        self._runners: dict[str, asyncio.Task[None]] = {}
        self.draining = False
        """The worker is stopping: new turns are refused (recoverable 504), running ones end."""
        session.attach(self)

    # -- TurnSource -----------------------------------------------------------------

    @property
    def tool_use(self) -> bool:
        """Tools are offered to the model."""
        return self._tools is not None

    @property
    def speaks(self) -> bool:
        """Text only: voice rooms are served by an AgentSession and its bridge."""
        return False

    async def submit(self, p: Participant, request: TurnRequest) -> None:
        """Queue ``request`` on ``p``'s runner (504 if its queue is full or draining)."""
        if self.draining:
            raise Overloaded("the agent is moving to another worker: send it again shortly")
        try:
            p.queue.put_nowait(request)
        except asyncio.QueueFull:
            raise Overloaded(f"{p.queue.maxsize} turns already waiting") from None
        task = self._runners.get(p.identity)
        if task is None or task.done():
            task = asyncio.create_task(self._serve(p), name=f"alicia-turns-{p.identity}")
            self._runners[p.identity] = task

    def queued_owner(self, user_id: str) -> str | None:
        """Who asked the waiting turn of ``user_id``."""
        for p in self._session.participants.values():
            request = p.find_queued(user_id)
            if request is not None:
                return request.requester
        return None

    def drop_queued(self, user_id: str) -> bool:
        """Drop the waiting turn of ``user_id`` from whichever queue holds it."""
        return any(p.drop_queued(user_id) for p in self._session.participants.values())

    def interrupt_speech(self, may_stop: Callable[[str | None], bool]) -> None:
        """Nothing is spoken here."""

    def forget(self, identity: str) -> None:
        """``identity`` left: with no turn of its running, its runner ends now."""
        running = any(t.request.requester == identity for t in self._session.turns)
        task = self._runners.get(identity)
        if not running and task is not None:
            task.cancel()

    async def settle(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Refuse new turns and wait (at most ``timeout`` s) until no turn runs or waits;
        True if they all finished."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        session = self._session
        while session.turns or any(not p.queue.empty() for p in session.participants.values()):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def aclose(self) -> None:
        """Cancel every runner and wait for them."""
        tasks = [t for t in self._runners.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._runners.clear()

    # -- turns ----------------------------------------------------------------------

    async def _serve(self, p: Participant) -> None:
        """Run ``p``'s queued turns one after another while ``p`` is in the room."""
        s = self._session
        try:
            while s.participants.get(p.identity) is p:
                request = await p.queue.get()
                try:
                    await self._run(request)
                except Exception:  # keep serving this participant's next turns
                    logger.exception("turn runner failed", extra={"participant": p.identity})
        finally:
            if self._runners.get(p.identity) is asyncio.current_task():
                del self._runners[p.identity]

    async def _run(self, request: TurnRequest) -> None:
        s = self._session
        if request.replaces is not None:
            s.history[:] = _before(s.history, request.replaces)
        history, text = s.history, request.text
        if request.continues is not None:  # the conversation up to the answer continued
            context = await continuation(s, request)
            if context is None:
                return
            history, text = context
        turn = Turn(
            user_id=request.user_id,
            text=text,
            answer_id=new_id(id_prefix.MESSAGE),
            llm=self._llm,
            options=self._options,
            history=history,
            tools=self._tools,
            steps=s.steps,
            seed=s.sink.last_step_index,
            clock=self._clock,
            keeper=self._keeper(),
            deltas=False,  # the protocol sends whole steps and sentences
        )
        projection = s.open_turn(request, turn.answer_id, stop=turn.stop)
        try:
            async with contextlib.aclosing(turn.events()) as events:
                async for event in events:
                    await projection.emit(event)
        finally:
            if not projection.ended:  # cancelled or failed mid-turn: no exchange
                s.close_turn(projection, None)

    def _keeper(self) -> Keeper:
        return session_keeper(self._session)


def session_keeper(session: ProtocolSession) -> Keeper:
    """Pass-back reasoning sealed with the session's data key (or the master key); kept
    in memory only when the deployment has no reasoning keys."""
    sealer = session.sealer
    if sealer is None:
        return Keeper()
    cid = session.id
    return Keeper(
        lambda text: sealer.seal(cid, text, knd="passback"),
        lambda value: sealer.open(value, cid, knd="passback"),
    )


def _before(history: list[Exchange], user_id: str) -> list[Exchange]:
    """History up to (not including) the exchange of ``user_id``; unchanged if absent."""
    for i, ex in enumerate(history):
        if ex.user_id == user_id:
            return history[:i]
    return history
