"""Encrypted reasoning values: JWE dir + A256GCM, bound to the conversation, rotation,
and typed refusals for anything changed (the AG-UI endpoint will receive them back)."""

from __future__ import annotations

import asyncio
import base64
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alicia.agent.engine.sealing import KeyConfigError, ReasoningSealer, SealError, parse_keys
from alicia.agent.settings import Settings, SettingsError
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ReasoningStep, encode, envelope

K1, K2 = bytes(range(32)), bytes(range(32, 64))
CONV = "conv_a"
TEXT = "The user asks for Italian food near the station; check opening hours first."


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def header(value: str) -> dict[str, str]:
    head = value.split(".")[0]
    decoded: dict[str, str] = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    return decoded


def test_a_sealed_step_is_compact_jwe_dir_a256gcm_with_kid_and_conversation() -> None:
    sealer = ReasoningSealer([("k1", K1)])
    value = sealer.seal(CONV, TEXT)
    assert value.count(".") == 4 and TEXT not in value
    assert header(value) == {"alg": "dir", "enc": "A256GCM", "kid": "k1", "cid": CONV}
    assert sealer.open(value, CONV) == TEXT
    assert sealer.seal(CONV, TEXT) != value  # a fresh IV each time


def test_rotation_the_first_key_seals_and_every_key_opens() -> None:
    old = ReasoningSealer([("k1", K1)]).seal(CONV, TEXT)
    rotated = ReasoningSealer([("k2", K2), ("k1", K1)])
    assert rotated.open(old, CONV) == TEXT
    assert header(rotated.seal(CONV, TEXT))["kid"] == "k2"
    with pytest.raises(SealError, match="unknown key id 'k2'"):
        ReasoningSealer([("k1", K1)]).open(rotated.seal(CONV, TEXT), CONV)


def test_another_conversations_value_is_refused() -> None:
    sealer = ReasoningSealer([("k1", K1)])
    with pytest.raises(SealError, match="another conversation"):
        sealer.open(sealer.seal("conv_other", TEXT), CONV)


def test_a_header_rewritten_to_this_conversation_fails_authentication() -> None:
    sealer = ReasoningSealer([("k1", K1)])
    value = sealer.seal("conv_other", TEXT)
    forged = dict(header(value), cid=CONV)
    head = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    with pytest.raises(SealError, match="not a valid encrypted value"):
        sealer.open(".".join([head, *value.split(".")[1:]]), CONV)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_changed_character_is_refused_never_a_crash(data: st.DataObject) -> None:
    sealer = ReasoningSealer([("k1", K1)])
    value = sealer.seal(CONV, TEXT)
    i = data.draw(st.integers(0, len(value) - 1))
    c = data.draw(st.sampled_from("AB-_.x0=/"))
    changed = value[:i] + c + value[i + 1 :]
    if changed == value:
        return
    try:
        opened = sealer.open(changed, CONV)
    except SealError:
        return
    # base64url padding bits can change without changing the bytes: then it is the same
    assert opened == TEXT


@pytest.mark.parametrize("value", ["", "abc", "a.b.c.d.e", "....", "eyJ9.x.y.z.w", "\x00" * 9])
def test_garbage_is_a_seal_error(value: str) -> None:
    with pytest.raises(SealError):
        ReasoningSealer([("k1", K1)]).open(value, CONV)


def test_keys_parse_and_errors_name_the_item_never_the_key() -> None:
    assert parse_keys(f"k1={b64(K1)}, k2={b64(K2)}") == [("k1", K1), ("k2", K2)]
    assert parse_keys("") == []
    for spec, message in [
        ("k1", "kid=base64"),
        (f"k1={b64(K1)[:-4]}", "must be 32 bytes"),
        ("k1=!!!", "not base64|32 bytes"),
        (f"k1={b64(K1)},k1={b64(K2)}", "twice"),
    ]:
        with pytest.raises(KeyConfigError, match=message) as info:
            parse_keys(spec)
        assert b64(K1) not in str(info.value)
    base = {
        "LIVEKIT_URL": "ws://x",
        "LIVEKIT_API_KEY": "k",
        "LIVEKIT_API_SECRET": "s",
        "LLM_BASE_URL": "http://x/v1",
        "LLM_MODEL": "m",
    }
    s = Settings.from_env({**base, "ALICIA_REASONING_KEYS": f"k1={b64(K1)}"})
    assert s.reasoning_keys == (("k1", K1),) and b64(K1) not in repr(s)
    with pytest.raises(SettingsError, match="ALICIA_REASONING_KEYS"):
        Settings.from_env({**base, "ALICIA_REASONING_KEYS": "k1=short"})


class OlderReasoningStep(
    msgspec.Struct, kw_only=True, frozen=True, rename="camel", omit_defaults=True
):
    """ReasoningStep as decoders before ``encryptedValue`` knew it (unknown keys ignored)."""

    id: str
    conversation_id: str
    previous_id: str
    content: str
    step_index: int
    total_steps: int | None = None


def test_an_older_decoder_that_ignores_unknown_keys_still_reads_the_step() -> None:
    value = ReasoningSealer([("k1", K1)]).seal(CONV, TEXT)
    step = ReasoningStep(
        id="rs_1",
        conversation_id=CONV,
        previous_id="msg_1",
        content="A summary.",
        step_index=3,
        encrypted_value=value,
    )
    wire = msgspec.msgpack.decode(encode(envelope(step, stanza_id=-4, conversation_id=CONV)))
    assert wire["body"]["encryptedValue"] == value  # camelCase key on the wire
    old = msgspec.convert(wire["body"], OlderReasoningStep)
    assert (old.id, old.content, old.step_index) == ("rs_1", "A summary.", 3)


class _FlakyKeyStore:
    """A key store that is down for its first call (a hiccup), then answers."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.calls = 0

    async def data_key(self, conversation_id: str) -> bytes | None:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("key store unreachable")
        return self.key


async def test_a_value_sealed_during_a_key_store_hiccup_opens_in_the_next_run() -> None:
    """A run that could not load the data key seals with the master key; the next run,
    with its data key, still opens that value (and seals with the data key)."""
    from alicia.agent.engine.session import ProtocolSession
    from alicia.agent.engine.sink import NullSink
    from tests.support.fakes import MemoryTransport

    env = {
        "LIVEKIT_URL": "ws://unused",
        "LIVEKIT_API_KEY": "k",
        "LIVEKIT_API_SECRET": "s",
        "LLM_BASE_URL": "http://unused",
        "LLM_MODEL": "m",
        "ALICIA_REASONING_KEYS": f"m1={b64(bytes(range(32)))}",
    }
    keys = _FlakyKeyStore(bytes(range(1, 33)))
    values = []
    for _ in range(2):
        session = ProtocolSession(
            conversation_id="conv_x",
            options=Settings.from_env(env).engine_options(),
            transport=MemoryTransport(),
            sink=NullSink(),
            keys=keys,
        )
        await session.load_data_key()
        assert session.sealer is not None
        values.append(session.sealer.seal("conv_x", "a step", knd="step", ref="rs_1"))
        opener = session.sealer
    assert [header(v)["kid"] for v in values] == ["m1", "data:conv_x"]
    assert [opener.open(v, "conv_x", knd="step", ref="rs_1") for v in values] == ["a step"] * 2


async def test_under_zdr_a_key_store_down_as_the_room_starts_is_tried_again(
    llm: RecordedLLM,
) -> None:
    """The data key could not be had as the conversation started: it is fetched again in
    the background, and the next turn's steps are stored, sealed with it."""
    from tests.engine.room import CONV as ROOM
    from tests.engine.room import final_sentence, handshake, room, user_message
    from tests.support.fakes import RecordingSink

    keys = _FlakyKeyStore(bytes(range(1, 33)))
    sink = RecordingSink()
    spec = llm.spec("deepseek_reasoning_content")
    master = tuple(parse_keys(f"m1={b64(bytes(range(32)))}"))
    async with room(llm, sink, keys, zdr=True, reasoning_keys=master) as r:
        alice = r.client("alice")
        await handshake(alice)
        for _ in range(100):  # the first try failed; the next comes 0.5 s later
            if keys.calls >= 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
        llm.script("deepseek_reasoning_content")
        alice.send(user_message(spec.user))
        await alice.wait_for(final_sentence)
    stored = [e.body for e in sink.envelopes if isinstance(e.body, ReasoningStep)]
    assert len(stored) == len(spec.steps) and all(s.content == "" for s in stored)
    opener = ReasoningSealer([("data:" + ROOM, keys.key)])
    opened = [opener.open(s.encrypted_value, ROOM, knd="step", ref=s.id) for s in stored]
    assert opened == list(spec.steps)


async def test_a_data_key_that_cannot_be_opened_is_not_tried_again() -> None:
    """A key store whose stored key cannot be opened (``KeyErased``: the master key that
    wrapped it is gone) fails for good: no retry every 15 s for the room's life."""
    from alicia.agent.engine.data_key import DataKeyLoader

    class _Unopenable:
        calls = 0

        async def data_key(self, conversation_id: str) -> bytes | None:
            self.calls += 1
            raise SealError("unknown key")

    keys, got = _Unopenable(), []

    async def take(key: bytes) -> None:
        got.append(key)

    loader = DataKeyLoader(keys, "conv_x", take)
    assert await loader.load() and loader.done and await loader.load()
    assert keys.calls == 1 and got == []


def test_a_value_is_bound_to_its_use_message_and_caller() -> None:
    sealer = ReasoningSealer([("k1", bytes(32))])
    value = sealer.seal("conv", "text", knd="step", ref="rs_1", sub="alice")
    assert sealer.open(value, "conv", knd="step", ref="rs_1", sub="alice") == "text"
    for bind, what in (
        ({"knd": "passback"}, "use"),
        ({"ref": "rs_2"}, "message"),
        ({"sub": "mallory"}, "caller"),
    ):
        with pytest.raises(SealError, match=f"this {what}"):
            sealer.open(value, "conv", **bind)
    unbound = sealer.seal("conv", "text")
    with pytest.raises(SealError):
        sealer.open(unbound, "conv", ref="rs_1")


async def test_under_zdr_steps_made_before_the_data_key_came_are_stored_once_it_does(
    llm: RecordedLLM,
) -> None:
    """The key store is away for the whole first turn (its migrations still running as
    a loaded machine's first room starts): that turn's steps wait in memory and are
    stored, sealed with the data key, when it comes; never stored in plaintext."""
    from tests.engine.room import CONV as ROOM
    from tests.engine.room import final_sentence, handshake, room, user_message
    from tests.support.fakes import RecordingSink

    gate = asyncio.Event()

    class _LateKeyStore(_FlakyKeyStore):
        async def data_key(self, conversation_id: str) -> bytes | None:
            self.calls += 1
            if not gate.is_set():
                raise ConnectionError("key store still migrating")
            return self.key

    keys = _LateKeyStore(bytes(range(1, 33)))
    sink = RecordingSink()
    spec = llm.spec("deepseek_reasoning_content")
    master = tuple(parse_keys(f"m1={b64(bytes(range(32)))}"))
    async with room(llm, sink, keys, zdr=True, reasoning_keys=master) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("deepseek_reasoning_content")
        alice.send(user_message(spec.user))
        await alice.wait_for(final_sentence)
        assert not [e for e in sink.envelopes if isinstance(e.body, ReasoningStep)]
        gate.set()
        for _ in range(100):  # the next try comes within 0.5 + 1 s
            if any(isinstance(e.body, ReasoningStep) for e in sink.envelopes):
                break
            await asyncio.sleep(0.05)
    stored = [e.body for e in sink.envelopes if isinstance(e.body, ReasoningStep)]
    assert len(stored) == len(spec.steps) and all(s.content == "" for s in stored)
    assert [s.step_index for s in stored] == list(range(1, len(spec.steps) + 1))
    opener = ReasoningSealer([("data:" + ROOM, keys.key)])
    opened = [opener.open(s.encrypted_value, ROOM, knd="step", ref=s.id) for s in stored]
    assert opened == list(spec.steps)
