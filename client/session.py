"""A protocol client session over a real LiveKit room (used by the CLI, tests and benches).

Errors: :mod:`alicia.client.errors` (``ClientError`` and its subclasses, re-exported here).

Lifecycle: ``connect()`` → ``wait_for_agent()`` → ``handshake()`` → ``ask()`` /
``wait_turn()`` / ``set_show_reasoning()`` … → ``aclose()``. The session is an async
context manager; using it after ``aclose()`` raises ``RuntimeError``.

Methods take a ``timeout`` (``# noqa: ASYNC109``) because expiry becomes one of the
typed errors above with a message for the user, not a bare ``TimeoutError``.

Trust (:mod:`alicia.client.trust`): the session accepts envelopes only from the agent
participant: kind AGENT (and, with ``agent_name``, the ``lk.agent_name`` livekit-server
sets at dispatch), checked again for every packet, so a participant of another kind
never gains trust, even under the agent's identity. Until an agent is trusted every
packet is dropped (counted in :attr:`untrusted`), and nothing is sent: the session never
broadcasts.

Takeover (:mod:`alicia.client.following`): when the trusted agent leaves, the session
waits (bounded) for another agent, moves its trust there and resumes (PROTOCOL.md §4.9);
listeners of :meth:`ClientSession.on_agent` hear each change
(:data:`~alicia.client.agent_events.AgentEvent`). A question is repeated until the agent
shows it has it (:mod:`alicia.client.questions`): one lost while a link was rebuilt would
leave a turn nobody starts.

Incoming packets are decoded in the room's data callback, checked for order
(:mod:`alicia.client.sequence`: a new agent continues the server's sequence, so the ids
accepted serve every agent and what a replay sends again is dropped as a duplicate), folded
into turns by :class:`~alicia.client.assembly.TurnAssembler` and passed to the listeners
synchronously: there is no unbounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Literal

from livekit import rtc

from alicia.agent.gate.ffi_routing import stop_capturing_native_logs
from alicia.protocol import (
    DATA_TOPIC,
    Acknowledgement,
    Configuration,
    Envelope,
    ErrorMessage,
    ProtocolError,
    StanzaCounter,
    UserMessage,
    decode,
    encode,
    envelope,
)
from alicia.protocol.ids import MESSAGE, new_id

from .assembly import (
    AnswerDone,
    ConfigurationReceived,
    ErrorReceived,
    Event,
    Turn,
    TurnAssembler,
)
from .errors import (
    AgentMissingError,
    ClientError,
    ConnectError,
    HandshakeError,
    TurnTimeoutError,
    features_for,
)
from .following import AgentFollowing
from .questions import REPEAT_INTERVAL_S, UnheardQuestions
from .sequence import ServerSequence
from .trust import AgentTrust

__all__ = [
    "CLIENT_VERSION",
    "AgentMissingError",
    "ClientError",
    "ClientSession",
    "ConnectError",
    "HandshakeError",
    "TurnTimeoutError",
    "features_for",
]

logger = logging.getLogger(__name__)

CLIENT_VERSION: Final = "alicia-client/0.1.0"
RESEND_INTERVAL: Final = 1.0
"""Seconds between repeats of an unanswered Configuration."""

EnvelopeListener = Callable[[Envelope[Any]], None]
EventListener = Callable[[Event], None]


class ClientSession(AgentFollowing):
    """One client of the Alicia protocol in one room (see the module docstring)."""

    def __init__(
        self,
        *,
        show_reasoning: bool = True,
        device: str = "cli",
        client_version: str = CLIENT_VERSION,
        agent_identity: str | None = None,
        agent_name: str | None = None,
        max_turns: int = 256,
        agent_rejoin_timeout: float = 30.0,
        resume_timeout: float = 15.0,
    ) -> None:
        """``agent_identity`` / ``agent_name``: trust only that agent (explicit dispatch).

        ``agent_rejoin_timeout``: seconds to wait for another agent when the trusted one
        leaves; ``resume_timeout``: seconds a new agent has to answer the resume.
        """
        self.room = rtc.Room()
        self.device = device
        self.client_version = client_version
        self.conversation_id: str | None = None
        self.server_config: Configuration | None = None
        self.trust = AgentTrust(agent_name=agent_name, expected_identity=agent_identity)
        self.agent_rejoin_timeout = agent_rejoin_timeout
        self.resume_timeout = resume_timeout
        self.assembler = TurnAssembler(show_reasoning=show_reasoning, max_turns=max_turns)
        self.decode_errors = 0
        self.duplicates = 0
        self.untrusted = 0
        """Packets dropped because they did not come from the trusted agent."""
        self._counter = StanzaCounter("client")
        self.sequence = ServerSequence()
        """Server stanza order and high mark, across agents."""
        self._envelope_listeners: list[EnvelopeListener] = []
        self._event_listeners: list[EventListener] = []
        self._config_lock = asyncio.Lock()
        self._config_waiter: asyncio.Future[Configuration] | None = None
        self._turn_done: dict[str, asyncio.Event] = {}
        self._resent: set[str] = set()
        self._questions = UnheardQuestions()
        self._repeater: asyncio.Task[None] | None = None
        self._state: Literal["new", "connected", "closed"] = "new"
        self._init_following()
        self.room.on("data_received", self._on_data)
        self.room.on("participant_connected", self._on_participant)
        self.room.on("participant_attributes_changed", self._on_attributes)
        self.room.on("participant_disconnected", self._on_participant_left)
        self.room.on("reconnecting", self._on_reconnecting)
        self.room.on("reconnected", self._on_reconnected)

    # --- listeners ------------------------------------------------------------------

    @property
    def show_reasoning(self) -> bool:
        """Whether reasoning steps are currently displayed."""
        return self.assembler.show_reasoning

    @property
    def agent_identity(self) -> str | None:
        """The trusted agent's identity (``None`` while no agent is trusted)."""
        return self.trust.identity

    @property
    def agent_name(self) -> str | None:
        """The agent name this session requires (``lk.agent_name``), if any."""
        return self.trust.agent_name

    @property
    def last_sequence_seen(self) -> int:
        """The highest server |stanzaId| received (a resume tells the agent the highest
        received before the link or the agent was lost: ``sequence.resume_from``)."""
        return self.sequence.last_seen

    def on_envelope(self, listener: EnvelopeListener) -> None:
        """Call ``listener`` with every envelope sent or accepted (sign of stanzaId = side)."""
        self._envelope_listeners.append(listener)

    def on_event(self, listener: EventListener) -> None:
        """Call ``listener`` with every turn event, in arrival order."""
        self._event_listeners.append(listener)

    # --- lifecycle ------------------------------------------------------------------

    async def connect(self, url: str, token: str, *, timeout: float = 15.0) -> None:  # noqa: ASYNC109
        """Join the room at ``url`` with ``token``; :class:`ConnectError` on failure.

        The native library's log records stay native (stderr, ``RUST_LOG``): captured into
        Python, a record still in flight when the interpreter exits makes a native thread
        take the GIL during finalisation, which aborts the process (SIGABRT).
        """
        if self._state != "new":
            raise RuntimeError(f"ClientSession cannot connect when {self._state}")
        stop_capturing_native_logs()
        try:
            async with asyncio.timeout(timeout):
                await self.room.connect(url, token)
        except TimeoutError as exc:
            raise ConnectError(f"could not join a room at {url} within {timeout:g}s") from exc
        except rtc.ConnectError as exc:
            raise ConnectError(f"could not join a room at {url}: {exc.message}") from exc
        self._state = "connected"
        for p in self.room.remote_participants.values():
            self._on_participant(p)

    async def wait_for_agent(self, timeout: float = 30.0) -> str:  # noqa: ASYNC109
        """Wait until an agent participant is in the room; its identity."""
        self._require_connected()
        try:
            async with asyncio.timeout(timeout):
                while self.trust.identity is None:
                    await self._agent_seen.wait()
        except TimeoutError as exc:
            raise AgentMissingError(
                f"no agent joined room {self.room.name!r} within {timeout:g}s "
                "(is the worker running against this livekit-server?)"
            ) from exc
        return self.trust.identity

    async def handshake(
        self,
        *,
        timeout: float = 15.0,  # noqa: ASYNC109
        conversation_id: str | None = None,
    ) -> Configuration:
        """Send the opening Configuration and wait for the server's (§4.1)."""
        self._require_connected()
        body = Configuration(
            conversation_id=conversation_id,
            last_sequence_seen=0,
            client_version=self.client_version,
            device=self.device,
            features=features_for(self.show_reasoning),
        )
        reply = await self._configure(body, timeout)
        self.conversation_id = reply.conversation_id or conversation_id or self.room.name
        self._ready.set()
        return reply

    async def set_show_reasoning(self, show: bool, *, timeout: float = 10.0) -> Configuration:  # noqa: ASYNC109
        """Toggle reasoning display: send a Configuration update and wait for the reply."""
        self._require_conversation()
        self.assembler.show_reasoning = show
        await self._until_ready()
        body = Configuration(
            conversation_id=self.conversation_id,
            client_version=self.client_version,
            device=self.device,
            features=features_for(show),
        )
        return await self._configure(body, timeout)

    async def ask(self, text: str) -> Turn:
        """Send a UserMessage and return its (open) turn.

        While the agent is being replaced this waits (at most ``agent_rejoin_timeout``
        plus the resume) until the new agent has resumed; :class:`AgentMissingError` or
        :class:`HandshakeError` when none did.
        """
        conversation_id = self._require_conversation()
        await self._until_ready()
        previous = next(
            (t.answer_id for t in reversed(self.assembler.turns) if t.answer_id is not None),
            None,
        )
        message = UserMessage(
            id=new_id(MESSAGE),
            conversation_id=conversation_id,
            content=text,
            previous_id=previous,
            timestamp=int(time.time() * 1000),
        )
        turn = self.assembler.start(message)
        self._turn_done[message.id] = asyncio.Event()
        env = await self._send(message)
        self._questions.sent(message.id, env)
        if self._repeater is None or self._repeater.done():
            self._repeater = asyncio.get_running_loop().create_task(self._repeat_questions())
        return turn

    async def wait_turn(self, turn: Turn, *, timeout: float = 60.0) -> Turn:  # noqa: ASYNC109
        """Wait until ``turn`` is finished (answer complete or ended by an error).

        :class:`AgentMissingError` when the agent left and none took over in time.
        """
        done = self._turn_done.get(turn.user_message_id)
        if done is None or turn.finished:
            return turn
        try:
            async with asyncio.timeout(timeout):
                await done.wait()
        except TimeoutError as exc:
            raise TurnTimeoutError(
                f"no complete answer to {turn.user_message_id} within {timeout:g}s"
            ) from exc
        finally:
            self._turn_done.pop(turn.user_message_id, None)
        if not turn.finished and self._lost is not None:
            raise self._lost
        return turn

    async def aclose(self) -> None:
        """Leave the room (idempotent)."""
        if self._state == "closed":
            return
        was_connected = self._state == "connected"
        self._state = "closed"
        self.room.off("data_received", self._on_data)
        self.room.off("participant_connected", self._on_participant)
        self.room.off("participant_attributes_changed", self._on_attributes)
        self.room.off("participant_disconnected", self._on_participant_left)
        self.room.off("reconnecting", self._on_reconnecting)
        self.room.off("reconnected", self._on_reconnected)
        if self._config_waiter is not None and not self._config_waiter.done():
            self._config_waiter.cancel()
        if self._repeater is not None:
            self._repeater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._repeater
        await self._stop_following()
        if was_connected:
            await self.room.disconnect()

    async def __aenter__(self) -> ClientSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- internals ------------------------------------------------------------------

    def _require_connected(self) -> None:
        if self._state != "connected":
            raise RuntimeError(f"ClientSession is {self._state}, not connected")

    def _require_conversation(self) -> str:
        self._require_connected()
        if self.conversation_id is None:
            raise RuntimeError("handshake() first")
        return self.conversation_id

    async def _configure(self, body: Configuration, timeout: float) -> Configuration:  # noqa: ASYNC109
        async with self._config_lock:  # one Configuration waits for its reply at a time
            waiter: asyncio.Future[Configuration] = asyncio.get_running_loop().create_future()
            self._config_waiter = waiter
            env = await self._send(body)
            try:
                async with asyncio.timeout(timeout):
                    while True:
                        done, _ = await asyncio.wait({waiter}, timeout=RESEND_INTERVAL)
                        if done:
                            break
                        # Right after joining, the agent may not know us yet and drops what
                        # we send, or its reply may go into a link not up yet: repeat the
                        # same envelope (same stanzaId: the agent answers it again if its
                        # answer went out before the repeat came) until the reply comes. A
                        # new agent that took over meanwhile gets the repeats.
                        self._resent.add(str(env.stanza_id))
                        await self._publish(env)
                    reply = waiter.result()
            except TimeoutError as exc:
                raise HandshakeError(
                    f"the agent did not answer our Configuration within {timeout:g}s"
                ) from exc
            finally:
                self._config_waiter = None
            self.server_config = reply
            return reply

    async def _repeat_questions(self) -> None:
        """Send again each question the agent has not been heard to receive
        (:mod:`alicia.client.questions`), while any is left."""
        while self._questions and self._state == "connected":
            await asyncio.sleep(REPEAT_INTERVAL_S)
            if not self._ready.is_set() or self._lost is not None:
                continue  # a resume under way: its turn comes after it
            for repeat in self._questions.due(self._heard_of):
                logger.debug("question repeated", extra={"message": repeat.message_id})
                try:
                    if repeat.verbatim(self._counter.last):
                        await self._publish(repeat.envelope)
                    else:
                        env = self._numbered(repeat.envelope.body)
                        # noted before it goes: the agent's refusal (204, noise) can come
                        # back while the send is still being confirmed (fK, fM: a turn
                        # ended on it as an error)
                        self._questions.sent(repeat.message_id, env)
                        await self._publish(env)
                except Exception:  # the room went away: aclose() or the turn's timeout says
                    logger.debug("repeating a question failed", exc_info=True)
                    return

    def _heard_of(self, message_id: str) -> bool:
        turn = self.assembler.turn(message_id)
        return turn is None or turn.heard

    async def _send(self, body: Any) -> Envelope[Any]:
        env = self._numbered(body)
        await self._publish(env)
        return env

    def _numbered(self, body: Any) -> Envelope[Any]:
        env = envelope(
            body, stanza_id=self._counter.next(), conversation_id=self.conversation_id or ""
        )
        for listener in self._envelope_listeners:
            listener(env)
        return env

    async def _publish(self, env: Envelope[Any]) -> None:
        # Only ever to the trusted agent, still in the room and still an agent: never to
        # the whole room, nor to whoever now holds a departed agent's identity.
        agent = self.trust.current(self.room.remote_participants)
        if agent is None:
            logger.debug("no agent to send to", extra={"stanza": env.stanza_id})
            return
        await self.room.local_participant.publish_data(
            encode(env), reliable=True, destination_identities=[agent.identity], topic=DATA_TOPIC
        )

    def is_our_agent(self, participant: rtc.RemoteParticipant) -> bool:
        """An AGENT-kind participant that matches ``agent_identity``/``agent_name`` if set."""
        return self.trust.matches(participant)

    # --- receiving ------------------------------------------------------------------

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC:
            return
        sender = packet.participant
        if sender is None or not self.trust.trusts(sender):
            if sender is not None and sender.identity == self.trust.identity:
                self._check_agent()  # someone else holds the agent's identity now
            elif sender is None:
                self._unknown_sender(packet.data)
            self.untrusted += 1
            return
        try:
            env = decode(packet.data)
        except ProtocolError:
            self.decode_errors += 1
            logger.warning("undecodable packet from the agent", extra={"sender": sender.identity})
            return
        if env.stanza_id >= 0:
            return  # a client-side number: not a server envelope
        if not self.sequence.accept(sender.identity, env.stanza_id):
            self.duplicates += 1
            return
        body = env.body
        if isinstance(body, ErrorMessage) and (
            body.originating_id in self._resent or self._questions.is_noise(body)
        ):
            # The server already had the original: its complaint about our repeat is noise.
            self._resent.discard(body.originating_id or "")
            self.duplicates += 1
            return
        if isinstance(body, Acknowledgement):
            self._questions.heard(body.acknowledged_message_id)
        for listener in self._envelope_listeners:
            listener(env)
        for event in self.assembler.feed(env):
            self._dispatch(event)

    def _dispatch(self, event: Event) -> None:
        waiter = self._config_waiter
        if isinstance(event, ConfigurationReceived):
            if waiter is not None and not waiter.done():
                waiter.set_result(event.config)
        elif isinstance(event, ErrorReceived) and event.turn is None:
            if waiter is not None and not waiter.done():
                waiter.set_exception(HandshakeError(_describe(event.error)))
        elif isinstance(event, AnswerDone):
            done = self._turn_done.get(event.turn.user_message_id)
            if done is not None:
                done.set()
        for listener in self._event_listeners:
            listener(event)


def _describe(error: ErrorMessage) -> str:
    return f"agent error {error.code}: {error.message}"
