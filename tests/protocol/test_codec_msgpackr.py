"""Interop with msgpackr, the MessagePack encoder of the original Alicia web front end.

The bytes come from the real package (``node_modules/msgpackr``, its plain ``pack`` and
``unpack``) run by Node: ``tests/protocol/msgpackr.mjs``. Its client builds envelopes as a
JS client does: unset optional fields are ``undefined`` (msgpackr writes ext 0 with the
byte ``00``: ``d4 00 00``) and timestamps are ``Date.now()`` (msgpackr writes integers
>= 2**32 as float64). We read them as nil (absent) and as ints (DECISIONS.md rows 23-25).
The other direction: what we encode, plain ``unpack`` reads with the values we sent.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Final, TypeAlias

import msgspec
import pytest

from alicia.protocol import (
    AudioChunk,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    Envelope,
    ErrorMessage,
    MemoryTrace,
    MessageType,
    Severity,
    ToolUseResult,
    Transcription,
    UserMessage,
    decode,
    encode,
    envelope,
)
from tests.paths import ROOT
from tests.support.samples import CONV, USER_MSG, every_type

pytestmark = pytest.mark.filterwarnings("error")

SCRIPT: Final = ROOT / "tests" / "protocol" / "msgpackr.mjs"

CLIENT_TO_SERVER: Final = {
    MessageType.ERROR_MESSAGE,
    MessageType.USER_MESSAGE,
    MessageType.AUDIO_CHUNK,
    MessageType.TOOL_USE_RESULT,
    MessageType.ACKNOWLEDGEMENT,
    MessageType.CONTROL_STOP,
    MessageType.CONTROL_VARIATION,
    MessageType.CONFIGURATION,
    MessageType.COMMENTARY,
}
"""PROTOCOL.md §2: C→S, "both" and "C→S allowed" types."""

CASES: Final = [
    "Configuration/new",
    "Configuration/resume",
    "UserMessage/first",
    "UserMessage/next",
    "ControlStop",
    "ControlVariation/regenerate",
    "ControlVariation/edit",
    "Commentary",
    "Acknowledgement",
    "AudioChunk",
    "ErrorMessage",
    "ToolUseResult",
]
"""The envelopes msgpackr.mjs packs, in order."""

UNDEFINED: Final = b"\xd4\x00\x00"


def node_binary() -> str:
    """``node`` from PATH, else the one scripts/setup may have put next to the venv's python."""
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    node = shutil.which("node", path=path)
    if node is None:
        pytest.fail("node not found: run ./scripts/setup")
    return node


def run_node(mode: str, stdin: str = "") -> Any:
    proc = subprocess.run(
        [node_binary(), str(SCRIPT), mode],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def untag(value: Any) -> Any:
    """A JSON value from msgpackr.mjs as Python reads it: undefined is None."""
    if isinstance(value, dict):
        if value == {"$undefined": True}:
            return None
        return {k: untag(v) for k, v in value.items()}
    if isinstance(value, list):
        return [untag(v) for v in value]
    return value


def is_undefined(value: Any) -> bool:
    return isinstance(value, dict) and value == {"$undefined": True}


@pytest.fixture(scope="module")
def packed() -> dict[str, Any]:
    """msgpackr's encoding of the client's traffic: name -> {hex, envelope}, plus ``now``."""
    out = run_node("pack")
    cases = {c["name"]: c for c in out["cases"]}
    assert list(cases) == CASES
    return {"now": out["now"], **cases}


def _data(packed: dict[str, Any], name: str) -> bytes:
    return bytes.fromhex(packed[name]["hex"])


def _decoded(packed: dict[str, Any], name: str) -> Envelope[Any]:
    return decode(_data(packed, name))


class TestMsgpackrWritesWhatTheIssueSays:
    def test_every_client_to_server_type_is_covered(self, packed: dict[str, Any]) -> None:
        assert {packed[name]["envelope"]["type"] for name in CASES} == CLIENT_TO_SERVER

    def test_undefined_is_ext_0_and_date_now_is_float64(self, packed: dict[str, Any]) -> None:
        data = _data(packed, "UserMessage/first")
        assert b"\xaapreviousId" + UNDEFINED in data
        stamp = packed["UserMessage/first"]["envelope"]["body"]["timestamp"]
        assert stamp >= packed["now"] > 2**32
        assert b"\xa9timestamp\xcb" + struct.pack(">d", stamp) in data

    @pytest.mark.parametrize("name", CASES)
    def test_every_unset_field_is_written_as_undefined(
        self, packed: dict[str, Any], name: str
    ) -> None:
        env = packed[name]["envelope"]
        unset = [k for k, v in {**env, **env["body"]}.items() if is_undefined(v)]
        assert _data(packed, name).count(UNDEFINED) >= len(unset)


class TestWeReadMsgpackr:
    @pytest.mark.parametrize("name", CASES)
    def test_decodes_to_what_was_sent(self, packed: dict[str, Any], name: str) -> None:
        sent = packed[name]["envelope"]
        env = _decoded(packed, name)
        assert env.stanza_id == sent["stanzaId"]
        assert env.type == sent["type"]
        assert env.conversation_id == (untag(sent["conversationId"]) or "")
        assert env.meta == untag(sent["meta"])
        expected = {k: untag(v) for k, v in sent["body"].items() if not is_undefined(v)}
        if isinstance(env.body, Commentary):
            expected.setdefault("targetId", None)  # required, nil = whole conversation
        assert msgspec.to_builtins(env.body) == expected
        for key, value in sent["body"].items():
            if is_undefined(value):
                attr = next(f for f in env.body.__struct_fields__ if _camel(f) == key)
                assert getattr(env.body, attr) is None, key

    @pytest.mark.parametrize("name", CASES)
    def test_what_we_read_we_can_send_again(self, packed: dict[str, Any], name: str) -> None:
        env = _decoded(packed, name)
        assert decode(encode(env)) == env

    def test_first_configuration(self, packed: dict[str, Any]) -> None:
        env = _decoded(packed, "Configuration/new")
        assert (env.conversation_id, env.meta) == ("", None)
        assert env.body == Configuration(
            client_version="alicia-msgpackr/0.1.0",
            device="web",
            features=["streaming", "reasoning_step_display"],
        )
        assert env.body.last_sequence_seen is None
        resume = _decoded(packed, "Configuration/resume").body
        assert isinstance(resume, Configuration)
        assert (resume.conversation_id, resume.last_sequence_seen) == (CONV, 42)

    def test_first_user_message(self, packed: dict[str, Any]) -> None:
        env = _decoded(packed, "UserMessage/first")
        body = env.body
        assert isinstance(body, UserMessage)
        assert body.previous_id is None
        assert type(body.timestamp) is int
        assert body.timestamp == packed["UserMessage/first"]["envelope"]["body"]["timestamp"]
        assert body.timestamp >= packed["now"]
        assert env.meta is not None
        assert env.meta["messaging.trace_id"] is None  # undefined in a map: None
        # meta is free-form (row 18): its values are kept as sent, a float stays a float.
        assert type(env.meta["timestamp"]) is float
        assert env.meta["timestamp"] == packed["UserMessage/first"]["envelope"]["meta"]["timestamp"]
        next_turn = _decoded(packed, "UserMessage/next").body
        assert isinstance(next_turn, UserMessage)
        assert next_turn.previous_id is not None and type(next_turn.timestamp) is int

    def test_controls(self, packed: dict[str, Any]) -> None:
        stop = _decoded(packed, "ControlStop").body
        assert stop == ControlStop(conversation_id=CONV, reason="user_clicked_stop")
        assert stop.target_id is None and stop.stop_type is None
        again = _decoded(packed, "ControlVariation/regenerate").body
        assert again == ControlVariation(
            conversation_id=CONV, target_id=USER_MSG, mode="regenerate"
        )
        assert again.new_content is None
        edit = _decoded(packed, "ControlVariation/edit").body
        assert isinstance(edit, ControlVariation)
        assert edit.new_content == "Italian food in Brooklyn?"

    def test_commentary_without_target_is_about_the_conversation(
        self, packed: dict[str, Any]
    ) -> None:
        body = _decoded(packed, "Commentary").body
        assert isinstance(body, Commentary)
        assert body.target_id is None
        assert (body.rating, type(body.timestamp)) == (5, int)

    def test_acknowledgement_audio_chunk_error_and_tool_result(
        self, packed: dict[str, Any]
    ) -> None:
        ack = _decoded(packed, "Acknowledgement").body
        assert (ack.acknowledged_stanza_id, ack.last_seen_stanza_id, ack.success) == (
            -3,
            None,
            True,
        )
        chunk = _decoded(packed, "AudioChunk").body
        assert isinstance(chunk, AudioChunk)
        assert type(chunk.timestamp) is int and chunk.timestamp >= packed["now"]
        assert (chunk.duration, chunk.seq, chunk.is_last) == (20, 1, None)
        error = _decoded(packed, "ErrorMessage").body
        assert isinstance(error, ErrorMessage)
        assert (error.severity, error.originating_id) == (Severity.WARNING, None)
        result = _decoded(packed, "ToolUseResult").body
        assert isinstance(result, ToolUseResult)
        assert (result.error_code, result.error_message) == (None, None)
        # result is Any: undefined inside it is None, and its numbers are kept as sent.
        assert result.result["unit"] is None
        assert result.result["temperature"] == 21.5
        assert type(result.result["observedAt"]) is float


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# --- the other direction: what we encode, msgpackr reads -------------------------------

NOW: Final = 1_767_225_600_123
"""2026-01-01T00:00:00.123Z in epoch ms: beyond uint32, so it travels as uint64 (0xcf)."""


def _our_traffic() -> list[Envelope[Any]]:
    bodies: list[Any] = list(every_type())
    bodies += [
        UserMessage(id=USER_MSG, conversation_id=CONV, content="x", timestamp=NOW),
        AudioChunk(conversation_id=CONV, track_sid="TR_1", format="f", timestamp=NOW, seq=2),
        Commentary(
            id="cmt_1",
            conversation_id=CONV,
            target_id=None,
            author_role="user",
            content="ok",
            timestamp=NOW,
        ),
        Transcription(id="msg_t2", conversation_id=CONV, text="hm", confidence=0.123456789),
        MemoryTrace(
            id="memtr_2",
            conversation_id=CONV,
            previous_id=USER_MSG,
            memory_id="mem_1",
            action="retrieved",
            content="x",
            confidence=1.0,
        ),
    ]
    return [
        envelope(
            b, stanza_id=-(i + 1), conversation_id=CONV, meta={"timestamp": NOW} if i else None
        )
        for i, b in enumerate(bodies)
    ]


def _as_msgpackr_reads(value: Any, *, auto: bool) -> Any:
    """What msgpackr.mjs reports for a value we encoded (int64 as bigint unless ``auto``)."""
    if isinstance(value, dict):
        return {
            k: (_float32(v) if k == "confidence" else _as_msgpackr_reads(v, auto=auto))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_as_msgpackr_reads(v, auto=auto) for v in value]
    if isinstance(value, bytes):
        return {"$bin": value.hex()}
    int64 = (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not -(2**31) <= value <= 2**32 - 1  # msgspec writes it as int64/uint64
    )
    if int64 and (not auto or abs(value) > 2**53):
        return {"$bigint": str(value)}
    return value


def _float32(value: Any) -> Any:
    """The float32 we write for ``confidence``, as a JS number (float64) holds it."""
    return value if value is None else struct.unpack(">f", struct.pack(">f", value))[0]


Read: TypeAlias = list[tuple[Envelope[Any], Any, Any]]


@pytest.fixture(scope="module")
def read() -> Read:
    """Our traffic, encoded and read by msgpackr: (envelope, plain unpack, int64 "auto")."""
    traffic = _our_traffic()
    out = run_node("unpack", json.dumps([encode(e).hex() for e in traffic]))
    return [(env, plain, auto) for env, (plain, auto) in zip(traffic, out, strict=True)]


class TestMsgpackrReadsUs:
    def test_every_type_reads_back_with_our_values(self, read: Read) -> None:
        assert {int(env.type) for env, _, _ in read} == set(range(1, 17))
        for env, plain, auto in read:
            ours = msgspec.to_builtins(env, builtin_types=(bytes,))
            assert plain == _as_msgpackr_reads(ours, auto=False), type(env.body).__name__
            assert auto == _as_msgpackr_reads(ours, auto=True), type(env.body).__name__

    def test_timestamps_are_int64_for_msgpackr(self, read: Read) -> None:
        """Plain ``unpack`` reads uint64 as a BigInt; ``int64AsType: "auto"`` as a number."""
        stamped = [(p, a) for env, p, a in read if getattr(env.body, "timestamp", None)]
        assert len(stamped) == 3
        for plain, auto in stamped:
            assert plain["body"]["timestamp"] == {"$bigint": str(NOW)}
            assert plain["meta"]["timestamp"] == {"$bigint": str(NOW)}
            assert auto["body"]["timestamp"] == NOW

    def test_confidence_reads_as_its_float32(self, read: Read) -> None:
        got = {
            type(env.body).__name__ + str(env.body.confidence): plain["body"]["confidence"]
            for env, plain, _ in read
            if isinstance(env.body, Transcription | MemoryTrace)
        }
        assert got == {
            "Transcription0.93": struct.unpack(">f", struct.pack(">f", 0.93))[0],
            "MemoryTrace0.8": struct.unpack(">f", struct.pack(">f", 0.8))[0],
            "Transcription0.12345679": struct.unpack(">f", struct.pack(">f", 0.123456789))[0],
            "MemoryTrace1.0": 1,
        }


# --- the original front end's other variation modes: continue and retry ----------------

VARIATIONS_JS: Final = """
import { pack } from "msgpackr";
const conversationId = %s;
const cases = [];
let stanza = 7;
for (const [name, targetId, mode] of %s) {
  const body = { conversationId, targetId, mode, newContent: undefined };
  const env = { stanzaId: ++stanza, conversationId, type: 11, meta: undefined, body };
  cases.push({ name, hex: Buffer.from(pack(env)).toString("hex") });
}
process.stdout.write(JSON.stringify(cases));
"""
ANSWER: Final = "msg_a1A2B3C4D5E6F7G8H9I0J"
"""An answer id, as msgpackr.mjs names it: the original front end's targetId for continue."""


@pytest.fixture(scope="module")
def variations() -> dict[str, bytes]:
    """msgpackr's plain ``pack`` of ControlVariation continue/retry as the front end sends
    them (unset ``newContent`` and ``meta`` undefined); the one kind it sent that we refused."""
    cases = [
        ["continue/answer", ANSWER, "continue"],
        ["continue/user", USER_MSG, "continue"],
        ["retry", USER_MSG, "retry"],
    ]
    script = VARIATIONS_JS % (json.dumps(CONV), json.dumps(cases))
    proc = subprocess.run(
        [node_binary(), "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=SCRIPT.parents[2],  # msgpackr resolves from the repository's node_modules
    )
    assert proc.returncode == 0, proc.stderr
    return {c["name"]: bytes.fromhex(c["hex"]) for c in json.loads(proc.stdout)}


class TestContinueAndRetry:
    def test_msgpackr_writes_undefined_in_them(self, variations: dict[str, bytes]) -> None:
        assert all(UNDEFINED in data for data in variations.values())

    @pytest.mark.parametrize(
        ("name", "target", "mode"),
        [
            ("continue/answer", ANSWER, "continue"),
            ("continue/user", USER_MSG, "continue"),
            ("retry", USER_MSG, "retry"),
        ],
    )
    def test_both_modes_decode(
        self, variations: dict[str, bytes], name: str, target: str, mode: str
    ) -> None:
        env = decode(variations[name])
        assert (env.type, env.meta, env.conversation_id) == (
            MessageType.CONTROL_VARIATION,
            None,
            CONV,
        )
        assert env.body == ControlVariation(conversation_id=CONV, target_id=target, mode=mode)  # type: ignore[arg-type]
        assert env.body.new_content is None
        assert decode(encode(env)) == env
