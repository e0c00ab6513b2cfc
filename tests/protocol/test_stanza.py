"""Stanza counters (client 1,2,3…; server -1,-2,-3…) and the receiver's order check."""

from __future__ import annotations

import threading

import pytest

from alicia.protocol import (
    ErrorCode,
    OrderingError,
    Severity,
    StanzaCounter,
    StanzaOrder,
    error_body,
)

pytestmark = pytest.mark.filterwarnings("error")


class TestStanzaCounter:
    def test_client_counts_up_from_one(self) -> None:
        c = StanzaCounter("client")
        assert c.last == 0
        assert [c.next() for _ in range(3)] == [1, 2, 3]
        assert c.last == 3

    def test_server_counts_down_from_minus_one(self) -> None:
        s = StanzaCounter("server")
        assert [s.next() for _ in range(3)] == [-1, -2, -3]
        assert s.last == -3

    def test_sides_are_independent(self) -> None:
        c, s = StanzaCounter("client"), StanzaCounter("server")
        assert [c.next(), s.next(), c.next(), s.next()] == [1, -1, 2, -2]

    def test_seeded_from_stored_marks_continues(self) -> None:
        assert StanzaCounter("client", last=41).next() == 42
        assert StanzaCounter("server", last=-7).next() == -8
        assert StanzaCounter("server", last=0).next() == -1

    @pytest.mark.parametrize(("side", "last"), [("client", -1), ("server", 5)])
    def test_seed_with_the_wrong_sign_is_refused(self, side: str, last: int) -> None:
        with pytest.raises(ValueError, match="cannot be"):
            StanzaCounter(side, last=last)  # type: ignore[arg-type]

    def test_concurrent_next_gives_unique_contiguous_ids(self) -> None:
        s = StanzaCounter("server")
        got: list[list[int]] = [[] for _ in range(8)]
        start = threading.Barrier(8)

        def work(out: list[int]) -> None:
            start.wait()
            out.extend(s.next() for _ in range(2000))

        threads = [threading.Thread(target=work, args=(g,)) for g in got]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = [i for g in got for i in g]
        assert sorted(ids, reverse=True) == list(range(-1, -16001, -1))
        assert all(g == sorted(g, reverse=True) for g in got)  # each thread saw them fall


class TestStanzaOrder:
    def test_rising_client_ids_are_accepted_with_gaps(self) -> None:
        o = StanzaOrder("client")
        for sid in (1, 2, 5, 6, 100):
            o.check(sid)
        assert o.last == 100

    def test_falling_server_ids_are_accepted(self) -> None:
        o = StanzaOrder("server")
        for sid in (-1, -2, -3):
            o.check(sid)
        assert o.last == -3

    @pytest.mark.parametrize(
        ("side", "seen", "bad"),
        [
            ("client", [1, 2, 3], 3),  # repeat
            ("client", [1, 2, 3], 2),  # going back
            ("client", [1], 0),  # zero
            ("client", [1], -2),  # wrong sign
            ("server", [-1, -2], -2),
            ("server", [-1, -2], -1),
            ("server", [], 1),  # a client id from the server side
            ("server", [], 0),
        ],
    )
    def test_violation_raises_ordering_error(self, side: str, seen: list[int], bad: int) -> None:
        o = StanzaOrder(side)  # type: ignore[arg-type]
        for sid in seen:
            o.check(sid)
        with pytest.raises(OrderingError) as info:
            o.check(bad)
        assert (info.value.stanza_id, info.value.last) == (bad, o.last)
        assert o.last == (seen[-1] if seen else 0)  # a rejected id does not move the mark

    def test_ordering_error_is_a_recoverable_202_warning(self) -> None:
        exc = OrderingError(2, 3)
        assert (exc.code, exc.severity, exc.recoverable) == (
            ErrorCode.INVALID_STATE,
            Severity.WARNING,
            True,
        )
        body = error_body(exc, id="err_1", conversation_id="c", originating_id="2")
        assert (body.code, body.severity, body.recoverable) == (202, Severity.WARNING, True)
        assert "stanzaId 2" in body.message

    def test_seeded_order_rejects_replays_and_reports_them_as_seen(self) -> None:
        o = StanzaOrder("server", last=-10)
        assert o.seen(-3) and o.seen(-10)
        assert not o.seen(-11) and not o.seen(3) and not o.seen(0)
        with pytest.raises(OrderingError):
            o.check(-10)
        o.check(-11)
        assert o.last == -11

    @pytest.mark.parametrize(("side", "last"), [("client", -1), ("server", 5)])
    def test_seed_with_the_wrong_sign_is_refused(self, side: str, last: int) -> None:
        with pytest.raises(ValueError, match="cannot be"):
            StanzaOrder(side, last=last)  # type: ignore[arg-type]

    def test_counter_output_passes_the_receivers_check(self) -> None:
        sender, receiver = StanzaCounter("server"), StanzaOrder("server")
        for _ in range(100):
            receiver.check(sender.next())
        assert receiver.last == sender.last == -100

    def test_concurrent_checks_accept_each_id_once(self) -> None:
        o = StanzaOrder("client")
        accepted: list[int] = []
        lock = threading.Lock()

        def work() -> None:
            for sid in range(1, 3001):
                try:
                    o.check(sid)
                except OrderingError:
                    continue
                with lock:
                    accepted.append(sid)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(accepted) == list(range(1, 3001))
