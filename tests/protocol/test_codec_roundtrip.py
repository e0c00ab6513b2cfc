"""Property-based round trip of every body type: decode(encode(x)) == x."""

from __future__ import annotations

from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alicia.protocol import (
    BODY_TYPES,
    MAX_PACKET_BYTES,
    Body,
    Envelope,
    MessageType,
    UnknownBody,
    decode,
    encode,
    envelope,
)
from tests.protocol import strategies
from tests.protocol.strategies import BODY_STRATEGIES, bodies, envelopes, unknown_envelopes
from tests.support.samples import every_type

pytestmark = pytest.mark.filterwarnings("error")

ROUNDTRIP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _roundtrip(env: Envelope[Any]) -> Envelope[Any]:
    data = encode(env)
    assert len(data) <= MAX_PACKET_BYTES
    return decode(data)


class TestCoverage:
    def test_every_type_code_has_a_body_class(self) -> None:
        assert set(BODY_TYPES) == set(MessageType)
        assert [int(c) for c in BODY_TYPES] == list(range(1, 17))

    def test_strategy_table_covers_every_body_type(self) -> None:
        # A type added later without a strategy (or with a field type the deriver does
        # not know, which raises TypeError at import) fails here.
        assert set(BODY_STRATEGIES) == set(BODY_TYPES)

    @pytest.mark.parametrize("code", list(BODY_TYPES), ids=lambda c: c.name)
    def test_strategy_draws_instances_of_its_class(self, code: MessageType) -> None:
        @given(BODY_STRATEGIES[code])
        @settings(max_examples=5, deadline=None)
        def check(body: Body) -> None:
            assert type(body) is BODY_TYPES[code]

        check()

    def test_unknown_field_type_has_no_strategy(self) -> None:
        with pytest.raises(TypeError, match="no strategy"):
            strategies.field_values(msgspec.inspect.DateTimeType())

    def test_samples_cover_every_type(self) -> None:
        assert [type(b) for b in every_type()] == list(BODY_TYPES.values())


class TestRoundTrip:
    @pytest.mark.parametrize("mode", ["random", "all", "none"])
    @pytest.mark.parametrize("code", list(BODY_TYPES), ids=lambda c: c.name)
    def test_body_round_trips(self, code: MessageType, mode: strategies.Optional) -> None:
        @given(envelopes(bodies(BODY_TYPES[code], mode)))
        @ROUNDTRIP
        def check(env: Envelope[Any]) -> None:
            back = _roundtrip(env)
            assert back == env
            assert type(back.body) is type(env.body)

        check()

    @given(envelopes())
    @settings(max_examples=200, deadline=None)
    def test_any_envelope_round_trips(self, env: Envelope[Any]) -> None:
        assert _roundtrip(env) == env

    @given(unknown_envelopes())
    @settings(max_examples=100, deadline=None)
    def test_unknown_type_round_trips(self, env: Envelope[Any]) -> None:
        back = _roundtrip(env)
        assert isinstance(back.body, UnknownBody)
        assert back == env

    @pytest.mark.parametrize("body", every_type(), ids=lambda b: type(b).__name__)
    def test_samples_round_trip(self, body: Body) -> None:
        env = envelope(body, stanza_id=-3, conversation_id="conv_x", meta={"model": "m"})
        assert _roundtrip(env) == env

    @given(envelopes())
    @settings(max_examples=100, deadline=None)
    def test_wire_is_plain_msgpack_with_primary_keys(self, env: Envelope[Any]) -> None:
        raw = msgpack.unpackb(encode(env), raw=False, strict_map_key=False)
        assert raw["stanzaId"] == env.stanza_id
        assert raw["type"] == env.type
        assert raw["conversationId"] == env.conversation_id
        assert ("meta" in raw) == (env.meta is not None)
        info = msgspec.inspect.type_info(type(env.body))
        assert isinstance(info, msgspec.inspect.StructType)
        expected = {
            f.encode_name
            for f in info.fields
            if f.required or getattr(env.body, f.name) is not None
        }
        assert set(raw["body"]) == expected

    @given(st.data())
    @settings(max_examples=30, deadline=None)
    def test_int32_edges_round_trip(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from([strategies.INT32_MIN, strategies.INT32_MAX, 0]))
        body = data.draw(bodies(BODY_TYPES[MessageType.REASONING_STEP], "all"))
        env = envelope(body, stanza_id=sid, conversation_id="c")
        assert _roundtrip(env) == env
