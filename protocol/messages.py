"""The 16 body types of the Alicia protocol v1 as typed, immutable declarations.

Python attributes are snake_case; wire keys are the camelCase names of PROTOCOL.md §3
(``rename="camel"``). Optional fields default to ``None`` and are omitted on the wire
when unset (``omit_defaults``). Range constraints (int32, uint16, …) are checked when
decoding. Aliases and nil-as-absent are handled by :mod:`alicia.protocol.codec`, not here.
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec

from .errors import Severity

__all__ = [
    "BODY_TYPES",
    "Acknowledgement",
    "AssistantMessage",
    "AssistantSentence",
    "AudioChunk",
    "Body",
    "Commentary",
    "Configuration",
    "ControlStop",
    "ControlVariation",
    "ErrorMessage",
    "Feature",
    "Int32",
    "MemoryTrace",
    "MessageType",
    "ReasoningStep",
    "StartAnswer",
    "ToolUseRequest",
    "ToolUseResult",
    "Transcription",
    "UInt16",
    "UInt32",
    "UInt64",
    "UnknownBody",
    "UserMessage",
]

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
UInt16 = Annotated[int, msgspec.Meta(ge=0, le=2**16 - 1)]
UInt32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
UInt64 = Annotated[
    int, msgspec.Meta(ge=0)
]  # msgspec bounds stop at int64; uint64 max is implied by msgpack
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
"""0.0-1.0, a float32 quantity: written as MessagePack float32 (``0xca``) so that typed
clients declaring ``float32`` can read it; held as :func:`float32_value` (DECISIONS.md
row 27)."""


def float32_value(value: float) -> float:
    """The float32 nearest to ``value``, as the shortest decimal that reads back as it.

    ``0.93`` stays ``0.93`` (not 0.9300000071525574), ``0.123456789`` becomes
    ``0.12345679``. Idempotent. NaN, the infinities and finite values beyond float32's
    range are returned unchanged (range checks refuse them).
    """
    try:
        bits = struct.pack(">f", value)
        (single,) = struct.unpack(">f", bits)
        if not math.isfinite(single):
            return value
        for digits in range(1, 10):  # 9 significant digits name every float32
            short = float(f"{single:.{digits}g}")
            if struct.pack(">f", short) == bits:
                return short
    except OverflowError:
        pass
    return value


def _hold_confidence_as_float32(body: Transcription | MemoryTrace) -> None:
    """Store ``confidence`` as the float32 it travels as, so decode(encode(x)) == x."""
    value = body.confidence
    if type(value) is float:  # None, ints and wrong types are left to the checks
        msgspec.structs.force_setattr(body, "confidence", float32_value(value))


class MessageType(enum.IntEnum):
    """Body type codes (PROTOCOL.md §2)."""

    ERROR_MESSAGE = 1
    USER_MESSAGE = 2
    ASSISTANT_MESSAGE = 3
    AUDIO_CHUNK = 4
    REASONING_STEP = 5
    TOOL_USE_REQUEST = 6
    TOOL_USE_RESULT = 7
    ACKNOWLEDGEMENT = 8
    TRANSCRIPTION = 9
    CONTROL_STOP = 10
    CONTROL_VARIATION = 11
    CONFIGURATION = 12
    START_ANSWER = 13
    MEMORY_TRACE = 14
    COMMENTARY = 15
    ASSISTANT_SENTENCE = 16


class Feature(enum.StrEnum):
    """Configuration ``features`` values (§4.8); unknown strings are kept as-is."""

    STREAMING = "streaming"
    PARTIAL_RESPONSES = "partial_responses"
    AUDIO_OUTPUT = "audio_output"
    PARTIAL_TRANSCRIPTS = "partial_transcripts"
    REASONING_STEP_DISPLAY = "reasoning_step_display"
    REASONING_STEPS = "reasoning_steps"
    REASONING_SUMMARY = "reasoning_summary"
    REASONING_ENCRYPTED = "reasoning_encrypted"
    TOOL_USE = "tool_use"


class _Body(
    msgspec.Struct,
    kw_only=True,
    frozen=True,
    rename="camel",
    omit_defaults=True,
    forbid_unknown_fields=True,
):
    """Common base: keyword-only, immutable, camelCase on the wire."""

    # ``forbid_unknown_fields`` makes the codec's fast path bail out to the alias-aware
    # slow path whenever a body carries a key we do not know (alias or extension).


class ErrorMessage(_Body, frozen=True):
    """Type 1: failure report with code, severity and recoverability."""

    id: str
    conversation_id: str
    code: Int32
    message: str
    severity: Severity
    recoverable: bool
    originating_id: str | None = None


class UserMessage(_Body, frozen=True):
    """Type 2: a typed user turn (C→S)."""

    id: str
    conversation_id: str
    content: str
    previous_id: str | None = None
    timestamp: Int64 | None = None
    attachments: Any = None


class AssistantMessage(_Body, frozen=True):
    """Type 3: a whole answer in one message (non-streaming clients)."""

    id: str
    conversation_id: str
    content: str
    previous_id: str | None = None
    timestamp: Int64 | None = None
    state: str | None = None


class AudioChunk(_Body, frozen=True):
    """Type 4: metadata for a segment of an audio track; carries no audio."""

    conversation_id: str
    track_sid: str
    format: str
    duration: UInt32 | None = None
    seq: UInt32 | None = None
    is_last: bool | None = None
    timestamp: UInt64 | None = None


class ReasoningStep(_Body, frozen=True):
    """Type 5: one step of the assistant's reasoning about ``previous_id``."""

    id: str
    conversation_id: str
    previous_id: str
    content: str
    step_index: Int32
    total_steps: Int32 | None = None
    encrypted_value: str | None = None
    """The whole step as JWE compact serialisation, for clients granted only a summary or
    the encrypted value (extension: ``protocol/DECISIONS.md``). Opaque to clients."""


class ToolUseRequest(_Body, frozen=True):
    """Type 6: announce (``server``) or delegate (``client``/``either``) a tool call."""

    id: str
    tool_name: str
    parameters: dict[str, Any]
    execution: Literal["server", "client", "either"]
    conversation_id: str | None = None
    previous_id: str | None = None
    timeout_ms: Int32 | None = None


class ToolUseResult(_Body, frozen=True):
    """Type 7: outcome of a tool call, keyed by ``request_id``."""

    request_id: str
    success: bool
    result: Any = None
    error_code: str | None = None
    error_message: str | None = None
    id: str | None = None
    conversation_id: str | None = None


class Acknowledgement(_Body, frozen=True):
    """Type 8: confirms one message (by stanza or id) or everything up to a point."""

    conversation_id: str
    acknowledged_stanza_id: Int32 | None = None
    acknowledged_message_id: str | None = None
    last_seen_stanza_id: Int32 | None = None
    notes: str | None = None
    success: bool | None = None


class Transcription(_Body, frozen=True):
    """Type 9: speech-to-text, interim or ``final`` (the final one is the user turn)."""

    id: str
    conversation_id: str
    text: str
    previous_id: str | None = None
    final: bool | None = None
    confidence: Unit | None = None
    language: str | None = None

    def __post_init__(self) -> None:
        _hold_confidence_as_float32(self)


class ControlStop(_Body, frozen=True):
    """Type 10: stop generation and/or speech of ``target_id`` (default: latest)."""

    conversation_id: str
    target_id: str | None = None
    reason: str | None = None
    stop_type: Literal["generation", "speech", "all"] | None = None


class ControlVariation(_Body, frozen=True):
    """Type 11: edit a user message, regenerate (or ``retry``) its answer, or ``continue``
    a stopped or partial answer (``targetId`` the answer, or its user message)."""

    conversation_id: str
    target_id: str
    mode: Literal["edit", "regenerate", "continue", "retry"]
    new_content: str | None = None


class Configuration(_Body, frozen=True):
    """Type 12: handshake and mid-conversation settings update."""

    conversation_id: str | None = None
    last_sequence_seen: Int32 | None = None
    last_stanza_map: dict[str, Any] | None = None
    client_version: str | None = None
    preferred_language: str | None = None
    device: str | None = None
    features: list[str] | None = None
    enable_reordering: bool | None = None


class StartAnswer(_Body, frozen=True):
    """Type 13: opens a streamed answer and announces its id."""

    id: str
    previous_id: str
    conversation_id: str
    answer_type: Literal["text", "voice", "text+voice", "visual"] | None = None
    planned_sentence_count: Int32 | None = None
    additional_context: Any = None


class MemoryTrace(_Body, frozen=True):
    """Type 14: a memory item retrieved/stored/updated for this turn."""

    id: str
    conversation_id: str
    previous_id: str
    memory_id: str
    action: str
    content: str
    memory_type: str | None = None
    confidence: Unit | None = None
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _hold_confidence_as_float32(self)


class Commentary(_Body, frozen=True):
    """Type 15: feedback, rating or note on a message (or, with no target, the conversation)."""

    id: str
    conversation_id: str
    target_id: str | None
    author_role: Literal["user", "assistant", "moderator"]
    content: str
    rating: Int32 | None = None
    comment_type: str | None = None
    timestamp: Int64 | None = None


class AssistantSentence(_Body, frozen=True):
    """Type 16: ordered chunk of a streamed answer (``sequence`` 1..N, last ``is_final``)."""

    previous_id: str
    conversation_id: str
    sequence: Int32
    text: str
    id: str | None = None
    audio: bytes | None = None
    is_final: bool | None = None
    sentiment: Any = None
    tone: Any = None


class UnknownBody(msgspec.Struct, frozen=True):
    """Body of a type code this version does not know; receivers log and skip it."""

    type_code: int
    fields: Any


Body: TypeAlias = (
    ErrorMessage
    | UserMessage
    | AssistantMessage
    | AudioChunk
    | ReasoningStep
    | ToolUseRequest
    | ToolUseResult
    | Acknowledgement
    | Transcription
    | ControlStop
    | ControlVariation
    | Configuration
    | StartAnswer
    | MemoryTrace
    | Commentary
    | AssistantSentence
)

BODY_TYPES: Final[dict[MessageType, type[Body]]] = {
    MessageType.ERROR_MESSAGE: ErrorMessage,
    MessageType.USER_MESSAGE: UserMessage,
    MessageType.ASSISTANT_MESSAGE: AssistantMessage,
    MessageType.AUDIO_CHUNK: AudioChunk,
    MessageType.REASONING_STEP: ReasoningStep,
    MessageType.TOOL_USE_REQUEST: ToolUseRequest,
    MessageType.TOOL_USE_RESULT: ToolUseResult,
    MessageType.ACKNOWLEDGEMENT: Acknowledgement,
    MessageType.TRANSCRIPTION: Transcription,
    MessageType.CONTROL_STOP: ControlStop,
    MessageType.CONTROL_VARIATION: ControlVariation,
    MessageType.CONFIGURATION: Configuration,
    MessageType.START_ANSWER: StartAnswer,
    MessageType.MEMORY_TRACE: MemoryTrace,
    MessageType.COMMENTARY: Commentary,
    MessageType.ASSISTANT_SENTENCE: AssistantSentence,
}
"""Type code → body class."""
