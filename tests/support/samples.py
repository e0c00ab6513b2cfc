"""One realistic body of each of the 16 types, for tests that need every type."""

from __future__ import annotations

from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    AudioChunk,
    Body,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    ErrorMessage,
    MemoryTrace,
    ReasoningStep,
    Severity,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    UserMessage,
)

CONV = "conv_V1StGXR8_Z5jdHi6B-myT"
USER_MSG = "msg_u1A2B3C4D5E6F7G8H9I0J"
ANSWER = "msg_a1A2B3C4D5E6F7G8H9I0J"


def every_type() -> list[Body]:
    """One body per type code, 1..16, in code order."""
    return [
        ErrorMessage(
            id="err_1",
            conversation_id=CONV,
            code=101,
            message="malformed data",
            severity=Severity.WARNING,
            recoverable=True,
            originating_id="7",
        ),
        UserMessage(id=USER_MSG, conversation_id=CONV, content="Italian food in NYC?"),
        AssistantMessage(
            id=ANSWER, conversation_id=CONV, content="Try Carbone.", previous_id=USER_MSG
        ),
        AudioChunk(
            conversation_id=CONV, track_sid="TR_abc", format="audio/opus 48kHz", seq=1, is_last=True
        ),
        ReasoningStep(
            id="rs_1",
            conversation_id=CONV,
            previous_id=USER_MSG,
            content="The user asks for Italian restaurants; search the database.",
            step_index=1,
        ),
        ToolUseRequest(
            id="toolreq_1",
            conversation_id=CONV,
            tool_name="web_search",
            parameters={"query": "italian nyc", "limit": 3, "filters": {"open": True}},
            execution="server",
            timeout_ms=30000,
        ),
        ToolUseResult(request_id="toolreq_1", success=True, result={"hits": ["Carbone", "Lilia"]}),
        Acknowledgement(conversation_id=CONV, acknowledged_stanza_id=3),
        Transcription(
            id="msg_t1", conversation_id=CONV, text="italian food", final=True, confidence=0.93
        ),
        ControlStop(conversation_id=CONV, target_id=ANSWER, stop_type="generation"),
        ControlVariation(conversation_id=CONV, target_id=USER_MSG, mode="regenerate"),
        Configuration(
            conversation_id=CONV,
            last_sequence_seen=0,
            features=["streaming", "reasoning_step_display"],
            device="desktop",
        ),
        StartAnswer(id=ANSWER, previous_id=USER_MSG, conversation_id=CONV, answer_type="text"),
        MemoryTrace(
            id="memtr_1",
            conversation_id=CONV,
            previous_id=USER_MSG,
            memory_id="mem_1",
            action="retrieved",
            content="Likes pasta",
            confidence=0.8,
        ),
        Commentary(
            id="cmt_1",
            conversation_id=CONV,
            target_id=None,
            author_role="user",
            content="great",
            rating=5,
        ),
        AssistantSentence(
            previous_id=ANSWER, conversation_id=CONV, sequence=1, text="Try Carbone.", is_final=True
        ),
    ]
