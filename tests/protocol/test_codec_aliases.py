"""Alias keys of PROTOCOL.md §3: each decodes to its primary field; we write primary keys only."""

from __future__ import annotations

from typing import Any, Final

import msgpack
import pytest

from alicia.protocol import (
    Acknowledgement,
    AudioChunk,
    Commentary,
    ControlVariation,
    ErrorMessage,
    MemoryTrace,
    MessageType,
    ReasoningStep,
    Severity,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    ValidationError,
    decode,
    encode,
)
from alicia.protocol import codec as codec_module

pytestmark = pytest.mark.filterwarnings("error")

C = "conv_1"

# Minimal valid bodies with primary keys, per type code (the aliased key left out).
BASE: Final[dict[MessageType, dict[str, Any]]] = {
    MessageType.ERROR_MESSAGE: {
        "id": "err_1",
        "conversationId": C,
        "code": 101,
        "message": "bad",
        "severity": 1,
        "recoverable": True,
    },
    MessageType.AUDIO_CHUNK: {"conversationId": C, "trackSid": "TR_1", "format": "audio/opus"},
    MessageType.REASONING_STEP: {
        "id": "rs_1",
        "conversationId": C,
        "previousId": "msg_u",
        "content": "think",
        "stepIndex": 1,
    },
    MessageType.TOOL_USE_REQUEST: {
        "id": "toolreq_1",
        "conversationId": C,
        "toolName": "web_search",
        "parameters": {"q": "x"},
        "execution": "server",
    },
    MessageType.TOOL_USE_RESULT: {"requestId": "toolreq_1", "success": False},
    MessageType.TRANSCRIPTION: {"id": "msg_t", "conversationId": C, "text": "hi"},
    MessageType.MEMORY_TRACE: {
        "id": "memtr_1",
        "conversationId": C,
        "previousId": "msg_u",
        "memoryId": "mem_1",
        "action": "retrieved",
        "content": "likes pasta",
    },
    MessageType.COMMENTARY: {
        "id": "cmt_1",
        "conversationId": C,
        "targetId": "msg_a",
        "authorRole": "user",
        "content": "good",
    },
}

# (type, alias key, alias value, primary key it replaces, python attribute, expected value)
ALIAS_CASES: Final[list[tuple[MessageType, str, Any, str, str, Any]]] = [
    (MessageType.ERROR_MESSAGE, "content", "shown text", "message", "message", "shown text"),
    (MessageType.AUDIO_CHUNK, "sequence", 7, "seq", "seq", 7),
    (MessageType.AUDIO_CHUNK, "durationMs", 320, "duration", "duration", 320),
    (MessageType.REASONING_STEP, "messageId", "msg_a", "previousId", "previous_id", "msg_a"),
    # ``sequence`` is seen 0-based: 0 -> stepIndex 1 (DECISIONS.md).
    (MessageType.REASONING_STEP, "sequence", 0, "stepIndex", "step_index", 1),
    (MessageType.REASONING_STEP, "sequence", 4, "stepIndex", "step_index", 5),
    (MessageType.TOOL_USE_REQUEST, "messageId", "msg_u", "previousId", "previous_id", "msg_u"),
    (MessageType.TOOL_USE_RESULT, "data", {"rows": [1, 2]}, "result", "result", {"rows": [1, 2]}),
    (MessageType.TOOL_USE_RESULT, "error", "boom", "errorMessage", "error_message", "boom"),
    (MessageType.TRANSCRIPTION, "isFinal", True, "final", "final", True),
    (MessageType.MEMORY_TRACE, "messageId", "msg_a", "previousId", "previous_id", "msg_a"),
    (MessageType.MEMORY_TRACE, "relevance", 0.75, "confidence", "confidence", 0.75),
    (MessageType.MEMORY_TRACE, "usage", "injected", "action", "action", "injected"),
    (MessageType.COMMENTARY, "messageId", "msg_x", "targetId", "target_id", "msg_x"),
    (MessageType.COMMENTARY, "previousId", "msg_y", "targetId", "target_id", "msg_y"),
    (MessageType.COMMENTARY, "commentaryType", "note", "commentType", "comment_type", "note"),
]


def _packet(code: int, body: dict[str, Any], **envelope: Any) -> bytes:
    head = {"stanzaId": -1, "conversationId": C, "type": int(code), "body": body, **envelope}
    return msgpack.packb(head, use_bin_type=True)


def _wire_body(data: bytes) -> dict[str, Any]:
    raw: dict[str, Any] = msgpack.unpackb(data, raw=False)
    return raw["body"]  # type: ignore[no-any-return]


class TestAliases:
    def test_table_matches_the_codec_alias_table(self) -> None:
        # Every alias of PROTOCOL.md §3 the codec knows is tested here, and no more.
        tested = {(int(code), alias, primary) for code, alias, _, primary, _, _ in ALIAS_CASES}
        known = {
            (int(code), alias, primary)
            for code, aliases in codec_module._ALIASES.items()
            for alias, primary, _ in aliases
        }
        assert tested == known

    @pytest.mark.parametrize(
        ("code", "alias", "value", "primary", "attr", "expected"),
        ALIAS_CASES,
        ids=[f"{c.name}-{a}={v!r}" for c, a, v, *_ in ALIAS_CASES],
    )
    def test_alias_decodes_to_primary_and_encodes_primary(
        self, code: MessageType, alias: str, value: Any, primary: str, attr: str, expected: Any
    ) -> None:
        body = {k: v for k, v in BASE[code].items() if k != primary} | {alias: value}
        env = decode(_packet(code, body))
        assert getattr(env.body, attr) == expected
        wire = _wire_body(encode(env))
        assert wire[primary] == expected
        if alias not in type(env.body).__struct_encode_fields__:
            assert alias not in wire

    @pytest.mark.parametrize(
        ("code", "alias", "value", "primary", "attr", "expected"),
        ALIAS_CASES,
        ids=[f"{c.name}-{a}" for c, a, *_ in ALIAS_CASES],
    )
    def test_primary_key_wins_over_alias(
        self, code: MessageType, alias: str, value: Any, primary: str, attr: str, expected: Any
    ) -> None:
        body = dict(BASE[code])
        if primary not in body:
            return  # optional primary: covered by the previous test
        primary_value = body[primary]
        body[alias] = value
        env = decode(_packet(code, body))
        assert getattr(env.body, attr) == primary_value

    def test_reasoning_step_message_id_and_zero_based_sequence_together(self) -> None:
        body = {"id": "rs_9", "conversationId": C, "messageId": "msg_a", "content": "x"}
        env = decode(_packet(5, body | {"sequence": 2}))
        assert env.body == ReasoningStep(
            id="rs_9", conversation_id=C, previous_id="msg_a", content="x", step_index=3
        )

    def test_alias_value_out_of_range_names_the_primary_field(self) -> None:
        body = {k: v for k, v in BASE[MessageType.REASONING_STEP].items() if k != "stepIndex"}
        with pytest.raises(ValidationError, match=r"\$\.body\.stepIndex"):
            decode(_packet(5, body | {"sequence": 2**31 - 1}))


class TestValueAliases:
    """§6.19: severity as a string, ``content`` for ``message``; §3.1: stanzaId origin."""

    @pytest.mark.parametrize(
        ("wire", "expected"),
        [("info", 0), ("warning", 1), ("Error", 2), ("CRITICAL", 3), (2, 2)],
    )
    def test_severity_names(self, wire: Any, expected: int) -> None:
        body = BASE[MessageType.ERROR_MESSAGE] | {"severity": wire}
        env = decode(_packet(1, body))
        assert env.body.severity == Severity(expected)
        assert _wire_body(encode(env))["severity"] == expected

    def test_unknown_severity_name_is_a_validation_error(self) -> None:
        body = BASE[MessageType.ERROR_MESSAGE] | {"severity": "fatal"}
        with pytest.raises(ValidationError, match=r"\$\.body\.severity"):
            decode(_packet(1, body))

    def test_originating_stanza_id_as_int_becomes_decimal_string(self) -> None:
        body = BASE[MessageType.ERROR_MESSAGE] | {"originatingId": 42, "id": ""}
        env = decode(_packet(1, body))
        assert isinstance(env.body, ErrorMessage)
        assert env.body.originating_id == "42"
        assert env.body.id == ""

    def test_tool_error_codes_are_kept_verbatim(self) -> None:
        body = BASE[MessageType.TOOL_USE_RESULT] | {"errorCode": "EXECUTION_ERROR"}
        env = decode(_packet(7, body))
        assert isinstance(env.body, ToolUseResult)
        assert env.body.error_code == "EXECUTION_ERROR"


class TestIgnoredExtensions:
    """Keys other implementations send that we do not model are dropped, not errors."""

    def test_audio_chunk_data_bytes_are_dropped(self) -> None:
        body = BASE[MessageType.AUDIO_CHUNK] | {"data": b"\x00\x01", "sequence": 0}
        env = decode(_packet(4, body))
        assert env.body == AudioChunk(
            conversation_id=C, track_sid="TR_1", format="audio/opus", seq=0
        )
        assert "data" not in _wire_body(encode(env))

    def test_tool_request_needs_response_is_dropped(self) -> None:
        body = BASE[MessageType.TOOL_USE_REQUEST] | {"needsResponse": True}
        env = decode(_packet(6, body))
        assert isinstance(env.body, ToolUseRequest)
        assert set(_wire_body(encode(env))) == set(BASE[MessageType.TOOL_USE_REQUEST])

    def test_commentary_without_target_is_the_whole_conversation(self) -> None:
        body = {k: v for k, v in BASE[MessageType.COMMENTARY].items() if k != "targetId"}
        env = decode(_packet(15, body))
        assert isinstance(env.body, Commentary)
        assert env.body.target_id is None
        # targetId is required on the wire: we write it, as nil.
        assert _wire_body(encode(env))["targetId"] is None

    def test_memory_trace_primary_and_alias_mix(self) -> None:
        body = {k: v for k, v in BASE[MessageType.MEMORY_TRACE].items() if k != "previousId"}
        env = decode(_packet(14, body | {"messageId": "msg_a", "relevance": 1}))
        assert isinstance(env.body, MemoryTrace)
        assert (env.body.previous_id, env.body.confidence) == ("msg_a", 1.0)

    def test_transcription_is_final_false(self) -> None:
        env = decode(_packet(9, BASE[MessageType.TRANSCRIPTION] | {"isFinal": False}))
        assert isinstance(env.body, Transcription)
        assert env.body.final is False
        assert _wire_body(encode(env))["final"] is False

    def test_acknowledgement_success_false_is_a_negative_ack(self) -> None:
        env = decode(_packet(8, {"conversationId": C, "acknowledgedStanzaId": 3, "success": False}))
        assert env.body == Acknowledgement(
            conversation_id=C, acknowledged_stanza_id=3, success=False
        )

    def test_control_variation_new_content_is_kept(self) -> None:
        body = {"conversationId": C, "targetId": "msg_u", "mode": "edit", "newContent": "fixed"}
        env = decode(_packet(11, body))
        assert isinstance(env.body, ControlVariation)
        assert env.body.new_content == "fixed"

    @pytest.mark.parametrize("mode", ["resume", "Retry", ""])
    def test_control_variation_other_modes_are_rejected(self, mode: str) -> None:
        # PROTOCOL.md §3.11: anything but edit/regenerate/continue/retry => ErrorMessage
        # (DECISIONS.md #14).
        body = {"conversationId": C, "targetId": "msg_u", "mode": mode}
        with pytest.raises(ValidationError, match=r"\$\.body\.mode"):
            decode(_packet(11, body))
