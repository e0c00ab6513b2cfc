"""What the decoder tolerates from other encoders, and what it still refuses.

DECISIONS.md rows 23-27: msgpackr's ``undefined`` (ext 0, payload ``00``) is nil; an
integral float in range is accepted in an int field; ``confidence`` travels as float32.
Every other extension, fractional/NaN/inf/out-of-range floats and floats in non-int
fields keep today's typed errors (ValidationError / DecodeError -> ErrorMessage 101).
"""

from __future__ import annotations

import math
import struct
from typing import Any, Final

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alicia.protocol import (
    BODY_TYPES,
    AudioChunk,
    Commentary,
    DecodeError,
    EncodeError,
    Envelope,
    ErrorCode,
    MemoryTrace,
    MessageType,
    ProtocolError,
    ReasoningStep,
    Severity,
    ToolUseRequest,
    Transcription,
    UnknownBody,
    UserMessage,
    ValidationError,
    decode,
    encode,
    encoding,
    envelope,
    error_body,
)
from alicia.protocol.messages import float32_value
from tests.protocol.strategies import envelopes
from tests.support.samples import every_type

pytestmark = pytest.mark.filterwarnings("error")

C: Final = "conv_1"
UNDEFINED: Final = b"\xd4\x00\x00"
"""msgpackr's ``undefined``: fixext 1, type 0, payload 00."""
UNDEFINED_EXT8: Final = b"\xc7\x01\x00\x00"
"""The same extension value written as ext 8 (another encoder's choice of width)."""
MARK: Final = "\x00MARK\x00"


def _packet(body: Any, *, type: float, **head: Any) -> bytes:
    env = {"stanzaId": 1, "conversationId": C, "type": type, "body": body} | head
    return msgpack.packb(env, use_bin_type=True)


def _with_raw(body: dict[str, Any], key: str, raw: bytes, *, type: int, **head: Any) -> bytes:
    """The packet of ``body`` with ``key``'s value replaced by the raw bytes ``raw``."""
    return _packet(body | {key: MARK}, type=type, **head).replace(msgpack.packb(MARK), raw, 1)


def _head_with_raw(key: str, raw: bytes, body: dict[str, Any], type: int) -> bytes:
    """An envelope whose ``key`` holds the raw bytes ``raw``."""
    env = {"stanzaId": 1, "conversationId": C, "type": type, "body": body, key: MARK}
    return msgpack.packb(env, use_bin_type=True).replace(msgpack.packb(MARK), raw, 1)


def _wire(body: Any) -> dict[str, Any]:
    wire: dict[str, Any] = msgspec.to_builtins(body, builtin_types=(bytes,))
    return wire


SAMPLES: Final = {MessageType(i): body for i, body in enumerate(every_type(), start=1)}


def _fields(code: MessageType) -> list[msgspec.inspect.Field]:
    info = msgspec.inspect.type_info(BODY_TYPES[code])
    assert isinstance(info, msgspec.inspect.StructType)
    return list(info.fields)


OPTIONAL: Final = [(c, f.encode_name) for c in BODY_TYPES for f in _fields(c) if not f.required]
REQUIRED: Final = [(c, f.encode_name) for c in BODY_TYPES for f in _fields(c) if f.required]


class TestUndefinedIsNil:
    @pytest.mark.parametrize("raw", [UNDEFINED, UNDEFINED_EXT8], ids=["fixext1", "ext8"])
    @pytest.mark.parametrize(("code", "key"), OPTIONAL, ids=lambda v: str(v))
    def test_undefined_optional_field_is_absent(
        self, code: MessageType, key: str, raw: bytes
    ) -> None:
        sample = SAMPLES[code]
        got = decode(_with_raw(_wire(sample), key, raw, type=code)).body
        attr = next(f.name for f in _fields(code) if f.encode_name == key)
        assert getattr(got, attr) is None
        assert got == msgspec.structs.replace(sample, **{attr: None})

    @pytest.mark.parametrize(("code", "key"), REQUIRED, ids=lambda v: str(v))
    def test_undefined_required_field_is_missing(self, code: MessageType, key: str) -> None:
        data = _with_raw(_wire(SAMPLES[code]), key, UNDEFINED, type=code)
        if (code, key) == (MessageType.COMMENTARY, "targetId"):  # required, nil allowed
            body = decode(data).body
            assert isinstance(body, Commentary) and body.target_id is None
            return
        with pytest.raises(ValidationError) as info:
            decode(data)
        note = "(it is undefined, which counts as absent)"
        assert str(info.value).endswith(f"missing required field `{key}` - at `$.body` {note}")
        assert error_body(info.value, id="e", conversation_id=C).code == ErrorCode.MALFORMED_DATA

    def test_nil_required_field_has_no_undefined_note(self) -> None:
        body = _wire(SAMPLES[MessageType.USER_MESSAGE]) | {"content": None}
        with pytest.raises(
            ValidationError, match=r"missing required field `content` - at `\$\.body`$"
        ):
            decode(_packet(body, type=2))

    def test_undefined_envelope_conversation_id_and_meta(self) -> None:
        body = _wire(SAMPLES[MessageType.CONFIGURATION])
        data = _head_with_raw("conversationId", UNDEFINED, body, 12)
        assert decode(data).conversation_id == ""
        data = _head_with_raw("meta", UNDEFINED, body, 12)
        assert decode(data).meta is None

    @pytest.mark.parametrize("key", ["stanzaId", "type", "body"])
    def test_undefined_required_envelope_key_is_refused(self, key: str) -> None:
        data = _head_with_raw(key, UNDEFINED, _wire(SAMPLES[MessageType.CONFIGURATION]), 12)
        with pytest.raises(ValidationError, match=rf"`\$(\.{key})?`"):
            decode(data)

    def test_undefined_inside_maps_is_none(self) -> None:
        head = {"meta": {"source": MARK}}
        data = _packet(_wire(SAMPLES[MessageType.USER_MESSAGE]), type=2, **head)
        env = decode(data.replace(msgpack.packb(MARK), UNDEFINED))
        assert env.meta == {"source": None}
        body = _wire(SAMPLES[MessageType.TOOL_USE_REQUEST]) | {"parameters": {"q": "x", "n": MARK}}
        got = decode(_packet(body, type=6).replace(msgpack.packb(MARK), UNDEFINED)).body
        assert isinstance(got, ToolUseRequest) and got.parameters == {"q": "x", "n": None}
        body = _wire(SAMPLES[MessageType.USER_MESSAGE]) | {"attachments": [1, MARK]}
        got = decode(_packet(body, type=2).replace(msgpack.packb(MARK), UNDEFINED)).body
        assert isinstance(got, UserMessage) and got.attachments == [1, None]

    def test_undefined_in_a_typed_list_is_refused(self) -> None:
        body = _wire(SAMPLES[MessageType.CONFIGURATION]) | {"features": ["streaming", MARK]}
        data = _packet(body, type=12).replace(msgpack.packb(MARK), UNDEFINED)
        with pytest.raises(ValidationError, match=r"`\$\.body\.features\[1\]`"):
            decode(data)

    def test_undefined_in_an_unknown_type_is_none(self) -> None:
        data = _packet({"a": MARK}, type=999).replace(msgpack.packb(MARK), UNDEFINED)
        assert decode(data).body == UnknownBody(999, {"a": None})


OTHER_EXTENSIONS: Final = [
    b"\xd4\x00\x01",  # ext 0, payload 01
    b"\xd4\x00\xff",
    b"\xd5\x00\x00\x00",  # ext 0, two bytes
    b"\xc7\x00\x00",  # ext 0, empty
    b"\xc7\x02\x00\x00\x00",
    b"\xd6\x00\x00\x00\x00\x00",
    b"\xd4\x01\x00",  # ext 1, payload 00
    b"\xd4\x05\x00",
    b"\xd4\x7f\x00",
    b"\xd4\x80\x00",  # ext -128
]


class TestOtherExtensionsStayRefused:
    @pytest.mark.parametrize("raw", OTHER_EXTENSIONS, ids=lambda b: b.hex())
    @pytest.mark.parametrize(
        ("code", "key"),
        [
            (MessageType.USER_MESSAGE, "previousId"),
            (MessageType.USER_MESSAGE, "content"),
            (MessageType.USER_MESSAGE, "timestamp"),
            (MessageType.CONFIGURATION, "lastSequenceSeen"),
            (MessageType.CONTROL_STOP, "targetId"),
            (MessageType.CONTROL_VARIATION, "newContent"),
            (MessageType.ACKNOWLEDGEMENT, "success"),
            (MessageType.TRANSCRIPTION, "confidence"),
        ],
        ids=lambda v: str(v),
    )
    def test_in_a_typed_field(self, code: MessageType, key: str, raw: bytes) -> None:
        with pytest.raises(ValidationError, match=rf"`\$\.body\.{key}`"):
            decode(_with_raw(_wire(SAMPLES[code]), key, raw, type=code))

    @pytest.mark.parametrize("raw", OTHER_EXTENSIONS, ids=lambda b: b.hex())
    @pytest.mark.parametrize("key", ["stanzaId", "type", "conversationId", "meta"])
    def test_in_the_envelope(self, key: str, raw: bytes) -> None:
        data = _head_with_raw(key, raw, _wire(SAMPLES[MessageType.CONFIGURATION]), 12)
        with pytest.raises(ValidationError, match=rf"`\$\.{key}`"):
            decode(data)

    @pytest.mark.parametrize("raw", OTHER_EXTENSIONS, ids=lambda b: b.hex())
    def test_in_an_any_field_they_keep_their_value(self, raw: bytes) -> None:
        """Any-typed values (meta, attachments, parameters …) take any MessagePack value
        (row 18); an extension there is kept as ``msgspec.msgpack.Ext`` and sent back."""
        body = _wire(SAMPLES[MessageType.USER_MESSAGE])
        env = decode(_with_raw(body, "attachments", raw, type=2))
        assert env.body.attachments == msgspec.msgpack.decode(raw)  # an Ext
        assert decode(encode(env)) == env

    def test_a_bad_timestamp_extension_is_a_decode_error(self) -> None:
        body = _wire(SAMPLES[MessageType.USER_MESSAGE])
        with pytest.raises(DecodeError):
            decode(_with_raw(body, "attachments", b"\xc7\x03\xff\x01\x02\x03", type=2))


def _float(value: float) -> bytes:
    return b"\xcb" + struct.pack(">d", value)


NOT_INTS: Final = [1.5, -0.5, 1e-300, math.nan, math.inf, -math.inf, 2.0**70, -(2.0**70)]

INT_FIELDS: Final = [
    # (type, key, largest accepted, smallest accepted)
    (MessageType.USER_MESSAGE, "timestamp", 2**63 - 1024, -(2**63)),
    (MessageType.COMMENTARY, "timestamp", 2**63 - 1024, -(2**63)),
    (MessageType.COMMENTARY, "rating", 2**31 - 1, -(2**31)),
    (MessageType.AUDIO_CHUNK, "timestamp", 2**64 - 2048, 0),
    (MessageType.AUDIO_CHUNK, "duration", 2**32 - 1, 0),
    (MessageType.AUDIO_CHUNK, "seq", 2**32 - 1, 0),
    (MessageType.CONFIGURATION, "lastSequenceSeen", 2**31 - 1, -(2**31)),
    (MessageType.ACKNOWLEDGEMENT, "acknowledgedStanzaId", 2**31 - 1, -(2**31)),
    (MessageType.ACKNOWLEDGEMENT, "lastSeenStanzaId", 2**31 - 1, -(2**31)),
    (MessageType.ERROR_MESSAGE, "code", 2**31 - 1, -(2**31)),
    (MessageType.REASONING_STEP, "stepIndex", 2**31 - 1, -(2**31)),
    (MessageType.ASSISTANT_SENTENCE, "sequence", 2**31 - 1, -(2**31)),
]
"""Float64 can hold the int64/uint64 edges only approximately: the largest float below."""


class TestIntegralFloatsInIntFields:
    @pytest.mark.parametrize(("code", "key", "hi", "lo"), INT_FIELDS, ids=lambda v: str(v))
    def test_accepted_within_range(self, code: MessageType, key: str, hi: int, lo: int) -> None:
        body = _wire(SAMPLES[code])
        attr = next(f.name for f in _fields(code) if f.encode_name == key)
        for value in (hi, lo, 3, 0, -0.0):
            if not lo <= value <= hi:
                continue
            got = decode(_with_raw(body, key, _float(value), type=code)).body
            assert type(getattr(got, attr)) is int
            assert getattr(got, attr) == int(value)
        for value in (float(hi) * 2, float(lo) * 2 - 2):  # out of range
            if value == 0:
                continue
            with pytest.raises(ValidationError, match=rf"`\$\.body\.{key}`"):
                decode(_with_raw(body, key, _float(value), type=code))

    @pytest.mark.parametrize("value", NOT_INTS, ids=repr)
    @pytest.mark.parametrize(("code", "key", "_hi", "_lo"), INT_FIELDS, ids=lambda v: str(v))
    def test_not_an_int_is_refused(
        self, code: MessageType, key: str, _hi: int, _lo: int, value: float
    ) -> None:
        body = _wire(SAMPLES[code])
        with pytest.raises(ValidationError, match=rf"got `float` - at `\$\.body\.{key}`"):
            decode(_with_raw(body, key, _float(value), type=code))

    def test_int32_edges(self) -> None:
        body = _wire(SAMPLES[MessageType.CONFIGURATION])
        for value, ok in [
            (2**31 - 1, True),
            (2**31, False),
            (-(2**31), True),
            (-(2**31) - 1, False),
        ]:
            data = _with_raw(body, "lastSequenceSeen", _float(value), type=12)
            if ok:
                assert decode(data).body.last_sequence_seen == value
            else:
                with pytest.raises(ValidationError, match=r"`\$\.body\.lastSequenceSeen`"):
                    decode(data)

    def test_float32_encoding_is_accepted_too(self) -> None:
        body = _wire(SAMPLES[MessageType.AUDIO_CHUNK])
        data = _with_raw(body, "seq", b"\xca" + struct.pack(">f", 7.0), type=4)
        assert decode(data).body == msgspec.structs.replace(SAMPLES[MessageType.AUDIO_CHUNK], seq=7)

    def test_int_enum_field(self) -> None:
        body = _wire(SAMPLES[MessageType.ERROR_MESSAGE])
        got = decode(_with_raw(body, "severity", _float(2.0), type=1)).body
        assert got.severity is Severity.ERROR
        for bad in (7.0, 1.5, math.nan):
            with pytest.raises(ValidationError, match=r"`\$\.body\.severity`"):
                decode(_with_raw(body, "severity", _float(bad), type=1))

    def test_alias_of_an_int_field(self) -> None:
        body = {"conversationId": C, "trackSid": "t", "format": "f", "sequence": 4.0}
        body["durationMs"] = 20.0
        got = decode(_packet(body, type=4)).body
        assert got == AudioChunk(conversation_id=C, track_sid="t", format="f", seq=4, duration=20)
        step = {"id": "rs", "conversationId": C, "messageId": "m", "content": "x", "sequence": 0.0}
        got_step = decode(_packet(step, type=5)).body
        assert isinstance(got_step, ReasoningStep) and got_step.step_index == 1

    @pytest.mark.parametrize(
        ("code", "key"),
        [
            (MessageType.USER_MESSAGE, "content"),
            (MessageType.USER_MESSAGE, "previousId"),
            (MessageType.USER_MESSAGE, "id"),
            (MessageType.CONTROL_VARIATION, "mode"),
            (MessageType.CONTROL_STOP, "stopType"),
            (MessageType.ACKNOWLEDGEMENT, "success"),
            (MessageType.ERROR_MESSAGE, "recoverable"),
            (MessageType.ERROR_MESSAGE, "originatingId"),
        ],
        ids=lambda v: str(v),
    )
    @pytest.mark.parametrize("value", [0.0, 1.0, 1.5, 1.7e12])
    def test_floats_in_non_int_fields_are_refused(
        self, code: MessageType, key: str, value: float
    ) -> None:
        with pytest.raises(ValidationError, match=rf"got `float` - at `\$\.body\.{key}`"):
            decode(_with_raw(_wire(SAMPLES[code]), key, _float(value), type=code))

    def test_bool_is_still_not_an_int(self) -> None:
        body = _wire(SAMPLES[MessageType.USER_MESSAGE]) | {"timestamp": True}
        with pytest.raises(ValidationError, match=r"`\$\.body\.timestamp`"):
            decode(_packet(body, type=2))

    def test_envelope_int_fields(self) -> None:
        body = _wire(SAMPLES[MessageType.CONFIGURATION])
        env = decode(_packet(body, type=12, stanzaId=5.0))
        assert (type(env.stanza_id), env.stanza_id) == (int, 5)
        env = decode(_packet(body, type=12.0))
        assert (type(env.type), env.type) == (int, 12)
        for key, value in [
            ("stanzaId", 1.5),
            ("stanzaId", 2.0**31),
            ("stanzaId", math.nan),
            ("type", 65536.0),
            ("type", -1.0),
            ("type", math.inf),
        ]:
            with pytest.raises(ValidationError, match=rf"got `float` - at `\$\.{key}`"):
                decode(_head_with_raw(key, _float(value), body, 12))
        with pytest.raises(ValidationError, match=r"`\$\.conversationId`"):
            decode(_packet(body, type=12, stanzaId=5.0, conversationId=1.0))

    def test_the_sender_stays_strict(self) -> None:
        body = UserMessage(id="m", conversation_id=C, content="x", timestamp=1.7e12)  # type: ignore[arg-type]
        with pytest.raises(EncodeError, match=r"`\$\.body\.timestamp`"):
            encode(envelope(body, stanza_id=1, conversation_id=C))


def _f32(value: float) -> float:
    result: float = struct.unpack(">f", struct.pack(">f", value))[0]
    return result


class TestConfidenceIsFloat32:
    @pytest.mark.parametrize("value", [0.93, 0.8, 0.0, 1.0, 0.5, 1 / 3, 0.123456789, 1e-40])
    def test_written_as_float32(self, value: float) -> None:
        for body in (
            Transcription(id="t", conversation_id=C, text="x", confidence=value),
            MemoryTrace(
                id="m",
                conversation_id=C,
                previous_id="u",
                memory_id="mem",
                action="retrieved",
                content="x",
                confidence=value,
            ),
        ):
            data = encode(envelope(body, stanza_id=-1, conversation_id=C))
            assert b"\xaaconfidence\xca" + struct.pack(">f", value) in data
            assert b"\xcb" not in data
            assert msgpack.unpackb(data)["body"]["confidence"] == _f32(value)
            back = decode(data).body
            assert back == body
            assert back.confidence == float32_value(value)

    def test_an_int_confidence_is_written_as_float32(self) -> None:
        body = Transcription(id="t", conversation_id=C, text="x", confidence=1)
        data = encode(envelope(body, stanza_id=-1, conversation_id=C))
        assert b"\xaaconfidence\xca" + struct.pack(">f", 1.0) in data

    def test_held_as_the_shortest_decimal_of_its_float32(self) -> None:
        assert (
            Transcription(id="t", conversation_id=C, text="x", confidence=0.93).confidence == 0.93
        )
        assert float32_value(0.9300000071525574) == 0.93
        assert float32_value(0.123456789) == 0.12345679
        assert float32_value(1e-50) == 0.0
        assert math.isnan(float32_value(math.nan))
        assert float32_value(math.inf) == math.inf
        assert float32_value(1e300) == 1e300  # beyond float32: left to the range check

    def test_float64_from_a_client_is_read(self) -> None:
        body = {"id": "t", "conversationId": C, "text": "x", "confidence": 0.93}
        got = decode(_packet(body, type=9)).body
        assert isinstance(got, Transcription) and got.confidence == 0.93

    def test_out_of_range_still_refused(self) -> None:
        for value in (1.0000001, -0.01, math.nan):
            body = Transcription(id="t", conversation_id=C, text="x", confidence=value)
            with pytest.raises(EncodeError, match=r"`\$\.body\.confidence`"):
                encode(envelope(body, stanza_id=-1, conversation_id=C))

    @given(st.floats(0.0, 1.0))
    @settings(max_examples=300, deadline=None)
    def test_float32_value_properties(self, value: float) -> None:
        held = float32_value(value)
        assert _f32(held) == _f32(value)  # the same float32
        assert float32_value(held) == held  # idempotent
        assert len(repr(held)) <= len(repr(_f32(value)))  # never longer than the raw float32
        body = Transcription(id="t", conversation_id=C, text="x", confidence=value)
        assert decode(encode(envelope(body, stanza_id=-1, conversation_id=C))).body == body


def test_every_failure_here_is_a_protocol_error() -> None:
    """Sanity: the refusals above map to ErrorMessage 101 like any decode error."""
    with pytest.raises(ProtocolError) as info:
        decode(_packet({"id": "m", "conversationId": C, "content": 1.5}, type=2))
    assert error_body(info.value, id="e", conversation_id=C).code == ErrorCode.MALFORMED_DATA


# --- any envelope, packed the way msgpackr packs it -------------------------------------

_UNDEFINED_EXT: Final = msgpack.ExtType(0, b"\x00")


def _as_msgpackr_packs(env: Envelope[Any]) -> bytes:
    """``env`` as a msgpackr client would send it: every absent optional field present
    as ``undefined``, and the integers of int fields that a float64 holds exactly, from
    2**32 up or below -2**31, as float64 (msgpackr packs any such JS number so)."""

    def number(value: Any) -> Any:
        big = type(value) is int and not -(2**31) <= value < 2**32
        return float(value) if big and int(float(value)) == value else value

    wire: dict[str, Any] = msgspec.to_builtins(env, builtin_types=(bytes,))
    body = wire["body"]
    if isinstance(env.body, UnknownBody):
        return msgpack.packb(wire, use_bin_type=True)
    ints = {rule[1] for rule in encoding.RULES[type(env.body)] if rule[3] is int}
    for field in _fields(MessageType(env.type)):
        key = field.encode_name
        if key not in body:
            body[key] = _UNDEFINED_EXT
        elif key in ints:
            body[key] = number(body[key])
    wire["stanzaId"] = number(wire["stanzaId"])
    wire.setdefault("meta", _UNDEFINED_EXT)
    if wire["conversationId"] == "":  # decodes to "" like nil and absent
        wire["conversationId"] = _UNDEFINED_EXT
    return msgpack.packb(wire, use_bin_type=True)


@given(envelopes())
@settings(max_examples=400, deadline=None)
def test_any_envelope_packed_as_msgpackr_packs_it_reads_the_same(env: Envelope[Any]) -> None:
    data = _as_msgpackr_packs(env)
    if not isinstance(env.body, UnknownBody) and any(
        getattr(env.body, f.name) is None and not f.required for f in _fields(MessageType(env.type))
    ):
        assert b"\xd4\x00\x00" in data
    assert decode(data) == env
