"""A takeover reads the stored conversation again when a read fails.

On a loaded machine a new worker's first reads can fail (a connection the server ended,
a query past its deadline) while the database is there. Before, one failed read made the
new agent serve as if the conversation were new: its numbering started again at 1, so a
client that had seen stanza 7 got "server message 7 was never sent here", and the turn
the old agent left unfinished was never closed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

import pytest

from alicia.agent.engine import outbox as outbox_module
from alicia.agent.engine.outbox import UNLOGGED_MAX, Outbox
from alicia.agent.engine.participants import TurnCut
from alicia.agent.engine.sink import SentRecord, StoredConversation, StoredTurn
from alicia.agent.engine.takeover import restore
from alicia.agent.engine.turn import Exchange
from alicia.protocol import AssistantMessage, ErrorMessage, decode, encode, envelope, error_body
from tests.support.fakes import MemoryTransport, RecordingSink

CONV = "conv_restore"


class FlakyStore(RecordingSink):
    """A conversation store whose first ``failures`` reads fail."""

    def __init__(self, failures: int, stored: StoredConversation) -> None:
        super().__init__()
        self.failures = failures
        self.stored = stored
        self.reads = 0

    async def durable(self) -> None:
        return None

    async def load_conversation(self, conversation_id: str, *, limit: int) -> StoredConversation:
        self.reads += 1
        if self.reads <= self.failures:
            raise ConnectionResetError("the server ended the connection")
        return self.stored

    async def sent_after(self, conversation_id: str, after: int, *, limit: int) -> list[SentRecord]:
        return []


@dataclass
class Host:
    """The takeover port, over a real outbox."""

    id: str
    outbox: Outbox
    history: list[Exchange] = field(default_factory=list)
    data_sealer: None = None
    used: set[str] = field(default_factory=set)

    def remember(self, message_id: str) -> None:
        self.used.add(message_id)


STORED = StoredConversation(
    last_stanza=7,
    turns=(
        StoredTurn(
            user_id="msg_asked",
            user_text="How long for a jammy egg?",
            answer_id=None,
            answer_text="",
            state="missing",
            sentences=0,
            requester="alice",
        ),
    ),
)


async def test_a_failed_read_is_tried_again_and_the_numbering_goes_on() -> None:
    store = FlakyStore(2, STORED)
    outbox = Outbox(CONV, transport=MemoryTransport(), sink=store, keep=16)
    outbox.store = store
    host = Host(CONV, outbox)
    await restore(host)
    assert store.reads == 3
    sent = [e for e in store.envelopes if e.stanza_id < 0]
    first = 7 + UNLOGGED_MAX + 1  # past what the last agent may have sent unlogged
    assert [-e.stanza_id for e in sent] == list(range(first, first + len(sent)))
    errors = [e.body for e in sent if isinstance(e.body, ErrorMessage)]
    assert [(b.code, b.originating_id) for b in errors] == [(503, "msg_asked")]
    assert {"msg_asked"} <= host.used


class FencedAt:
    """A tenure that another agent takes at the ``at``-th check (the envelope being sent
    then is refused by storage, as a fenced agent's writes are)."""

    def __init__(self, at: int, store: RecordingSink) -> None:
        self.at = at
        self.store = store
        self.checks = 0
        self.durable: int | None = None
        """How many envelopes were stored before the fence (None: never fenced)."""

    async def held(self) -> bool:
        self.checks += 1
        if self.checks >= self.at:
            if self.durable is None:
                self.durable = len(self.store.envelopes) - 1
            return False
        return True

    @property
    def taken(self) -> bool:
        return self.checks >= self.at

    def lose(self) -> None:
        self.checks = max(self.checks, self.at)


STREAMING = dataclasses.replace(
    STORED,
    turns=(
        dataclasses.replace(
            STORED.turns[0],
            answer_id="msg_answer",
            answer_text="Six and a half",
            state="streaming",
            sentences=1,
        ),
    ),
)
"""The same turn, its answer begun and cut."""


@pytest.mark.parametrize("stored", [STREAMING, STORED], ids=["streamed", "never_began"])
@pytest.mark.parametrize("fenced_at", [1, 2, 3, 4])
async def test_a_cut_turn_is_never_stored_closed_without_its_error_message(
    stored: StoredConversation, fenced_at: int
) -> None:
    """Whichever envelope of the close the agent is fenced at, what storage holds either
    still shows the turn cut (the next agent closes it again) or holds its ErrorMessage
    too: the client that resumes with the next agent is told to regenerate."""
    store = FlakyStore(0, stored)
    outbox = Outbox(CONV, transport=MemoryTransport(), sink=store, keep=16)
    outbox.store = store
    tenure = FencedAt(fenced_at, store)
    outbox.tenure = tenure
    await restore(Host(CONV, outbox))
    durable = store.envelopes if tenure.durable is None else store.envelopes[: tenure.durable]
    bodies = [e.body for e in durable]
    closed = any(isinstance(b, AssistantMessage) and b.previous_id == "msg_asked" for b in bodies)
    told = any(isinstance(b, ErrorMessage) and b.originating_id == "msg_asked" for b in bodies)
    assert told or not closed, [type(b).__name__ for b in bodies]
    if tenure.durable is None:  # not fenced: all of it, in that order
        kinds = [type(b).__name__ for b in bodies]
        streamed = stored is STREAMING
        assert kinds == ["AssistantSentence"] * streamed + ["ErrorMessage", "AssistantMessage"]


class LoggedStore(FlakyStore):
    """A store whose sent log ends with ``records``."""

    def __init__(self, stored: StoredConversation, records: list[SentRecord]) -> None:
        super().__init__(0, stored)
        self.records = records

    async def sent_after(self, conversation_id: str, after: int, *, limit: int) -> list[SentRecord]:
        return [r for r in self.records if r.stanza > after][:limit]


@pytest.mark.parametrize("stored", [STREAMING, STORED], ids=["streamed", "never_began"])
async def test_an_earlier_agent_s_notice_is_not_sent_again(stored: StoredConversation) -> None:
    """The agent before was fenced after it logged the turn's ErrorMessage, before its mark:
    this one stores the mark and sends no second notice (nor a second final sentence)."""
    notice = error_body(
        TurnCut("replaced"), id="err_before", conversation_id=CONV, originating_id="msg_asked"
    )
    logged = encode(envelope(notice, stanza_id=-8, conversation_id=CONV))
    store = LoggedStore(
        dataclasses.replace(stored, last_stanza=8), [SentRecord(8, None, None, logged)]
    )
    outbox = Outbox(CONV, transport=MemoryTransport(), sink=store, keep=16)
    outbox.store = store
    await restore(Host(CONV, outbox))
    kinds = [type(e.body).__name__ for e in store.envelopes]
    assert kinds == ["AssistantMessage"]


class StalledStore(FlakyStore):
    """A conversation store whose writes do not complete (a loaded or stopped database):
    :meth:`durable` never returns, however long it is waited for."""

    def __init__(self) -> None:
        super().__init__(0, STORED)
        self.stalled = True

    async def durable(self) -> None:
        while self.stalled:
            await asyncio.sleep(0.01)


async def test_a_successor_numbers_past_what_its_predecessor_sent_unlogged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 in a fresh-clone run: the killed agent had sent stanza 9 before storage had
    it (logged to 8), its successor gave 9 to the cut turn's ErrorMessage, and the client,
    which had seen 9, dropped it as a duplicate: it never learnt that its turn was cut.

    An agent sends at most ``UNLOGGED_MAX`` envelopes that storage does not have yet
    (then it holds the next until storage catches up), and its successor numbers on past
    the last logged stanza plus that many."""
    monkeypatch.setattr(outbox_module, "DURABLE_TIMEOUT_S", 0.05)
    transport = MemoryTransport()
    store = StalledStore()
    old = Outbox(CONV, transport=transport, sink=store, keep=256)
    old.store = store
    old.continue_after(STORED.last_stanza)
    body = AssistantMessage(id="msg_a", previous_id="msg_asked", conversation_id=CONV, content="x")
    for _ in range(UNLOGGED_MAX):
        await old.send(body, ["alice"])
    sent_by_old = [-decode(s.data).stanza_id for s in transport.sent]
    assert len(sent_by_old) == UNLOGGED_MAX  # the conversation went on without storage
    held = asyncio.create_task(old.send(body, ["alice"]))
    await asyncio.sleep(0.5)
    assert not held.done()  # one more would be more than a successor numbers past
    store.stalled = False
    await asyncio.wait_for(held, 5)
    assert len(transport.sent) == UNLOGGED_MAX + 1 and old.unlogged == 0
    # Killed now, with storage at 7: its successor's cut-turn notice is numbered past
    # every stanza it sent unlogged.
    logged = FlakyStore(0, STORED)
    new = Outbox(CONV, transport=MemoryTransport(), sink=logged, keep=16)
    new.store = logged
    await restore(Host(CONV, new))
    successor = [-e.stanza_id for e in logged.envelopes if e.stanza_id < 0]
    assert successor and min(successor) > max(sent_by_old)
