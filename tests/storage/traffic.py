"""What the storage writer tests write and read: one conversation's envelopes (both stanza
counters), a script covering every stored type, writing it, and the tables read back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alicia.agent.storage.writer import StorageWriter, WriterOptions
from alicia.harness import free_port
from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Body,
    Configuration,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    UserMessage,
    envelope,
)
from tests.support.db import fetch

CID = "conv_storage_test_000001"
MODEL = "qwen3-30b-a3b-thinking"


def unreachable(url: str, tmp: Path) -> str:
    """A URL of the same backend that cannot be opened."""
    if url.startswith("sqlite"):
        return f"sqlite+aiosqlite:///{tmp / 'missing-dir' / 'x.db'}"
    return f"postgresql+asyncpg://alicia@127.0.0.1:{free_port()}/nowhere"


class Conv:
    """Envelopes of one conversation with both stanza counters."""

    def __init__(self, cid: str = CID) -> None:
        self.cid = cid
        self.server_n = 0
        self.client_n = 0

    def server(self, body: Body, meta: dict[str, Any] | None = None) -> Envelope[Any]:
        self.server_n -= 1
        return envelope(body, stanza_id=self.server_n, conversation_id=self.cid, meta=meta)

    def client(self, body: Body) -> Envelope[Any]:
        self.client_n += 1
        return envelope(body, stanza_id=self.client_n, conversation_id=self.cid)


def step(prev: str, index: int, text: str, *, total: int | None = None, sid: str = "") -> Body:
    return ReasoningStep(
        id=sid or f"rs_{prev}_{index}",
        conversation_id=CID,
        previous_id=prev,
        content=text,
        step_index=index,
        total_steps=total,
    )


def script(c: Conv) -> list[Envelope[Any]]:
    """Two turns covering every stored type: a typed one streamed with tools, a voice one."""
    return [
        c.client(
            Configuration(
                conversation_id=CID,
                last_sequence_seen=0,
                features=["streaming", "reasoning_step_display"],
                preferred_language="en-US",
                device="web",
            )
        ),
        c.server(Configuration(conversation_id=CID, features=["streaming", "reasoning_steps"])),
        c.client(UserMessage(id="msg_u1", conversation_id=CID, content="Italian food in NYC?")),
        c.server(step("msg_u1", 1, "The user wants Italian food in New York.", total=3)),
        c.server(step("msg_u1", 2, "Search for well rated places.", total=3)),
        c.server(
            ToolUseRequest(
                id="toolreq_1",
                tool_name="web_search",
                parameters={"query": "italian nyc", "limit": 3, "filters": {"open": True}},
                execution="server",
                conversation_id=CID,
                previous_id="msg_u1",
            )
        ),
        c.server(
            ToolUseResult(
                request_id="toolreq_1", success=True, result={"hits": ["Carbone", "Lilia"]}
            )
        ),
        c.server(
            ToolUseRequest(
                id="toolreq_2",
                tool_name="calculator",
                parameters={"expression": "1/0"},
                execution="server",
                conversation_id=CID,
                previous_id="msg_u1",
            )
        ),
        c.server(
            ToolUseResult(
                request_id="toolreq_2",
                success=False,
                error_code="execution_error",
                error_message="division by zero",
            )
        ),
        c.server(step("msg_u1", 3, "Carbone is the best match.", total=3)),
        c.server(
            StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID),
            meta={"model": MODEL},
        ),
        c.server(
            AssistantSentence(
                previous_id="msg_a1", conversation_id=CID, sequence=1, text="Try Carbone."
            )
        ),
        c.server(
            AssistantSentence(
                previous_id="msg_a1",
                conversation_id=CID,
                sequence=2,
                text="It is on Thompson Street.",
            )
        ),
        c.server(
            AssistantSentence(
                previous_id="msg_a1",
                conversation_id=CID,
                sequence=3,
                text="Book ahead.",
                is_final=True,
            )
        ),
        c.client(Acknowledgement(conversation_id=CID, last_seen_stanza_id=14)),
        c.server(Transcription(id="msg_t2", conversation_id=CID, text="what about", final=False)),
        c.server(
            Transcription(
                id="msg_t2",
                conversation_id=CID,
                text="what about pizza",
                previous_id="msg_a1",
                final=True,
            )
        ),
        c.server(step("msg_t2", 1, "Pizza: Joe's is a classic.")),
        c.server(
            AssistantMessage(
                id="msg_a2", conversation_id=CID, content="Try Joe's Pizza.", previous_id="msg_t2"
            ),
            meta={"model": MODEL},
        ),
    ]


async def write(url: str, options: WriterOptions, envs: Sequence[Envelope[Any]]) -> StorageWriter:
    async with StorageWriter(url, options) as w:
        for env in envs:
            w.submit(env)
        await w.flush(timeout=30)
    return w


async def table(url: str, name: str, order: str = "id") -> list[dict[str, Any]]:
    return await fetch(url, f"SELECT * FROM {name} ORDER BY {order}")


async def snapshot(url: str, *, times: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Every table, without ``updated_at`` (and without any timestamp unless ``times``)."""
    out = {}
    for name, order in [
        ("alicia_conversations", "id"),
        ("alicia_messages", "id"),
        ("alicia_sentences", "message_id, sentence_sequence_number"),
        ("alicia_reasoning_steps", "id"),
        ("alicia_tool_uses", "id"),
    ]:
        rows = await table(url, name, order)
        out[name] = [
            {k: v for k, v in r.items() if k != "updated_at" and (times or not k.endswith("_at"))}
            for r in rows
        ]
    return out
