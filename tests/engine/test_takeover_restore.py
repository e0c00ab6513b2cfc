"""A takeover reads the stored conversation again when a read fails.

On a loaded machine a new worker's first reads can fail (a connection the server ended,
a query past its deadline) while the database is there. Before, one failed read made the
new agent serve as if the conversation were new: its numbering started again at 1, so a
client that had seen stanza 7 got "server message 7 was never sent here", and the turn
the old agent left unfinished was never closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alicia.agent.engine.outbox import Outbox
from alicia.agent.engine.sink import SentRecord, StoredConversation, StoredTurn
from alicia.agent.engine.takeover import restore
from alicia.agent.engine.turn import Exchange
from alicia.protocol import ErrorMessage
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
    assert [-e.stanza_id for e in sent] == list(range(8, 8 + len(sent)))  # after 7
    errors = [e.body for e in sent if isinstance(e.body, ErrorMessage)]
    assert [(b.code, b.originating_id) for b in errors] == [(503, "msg_asked")]
    assert {"msg_asked"} <= host.used
