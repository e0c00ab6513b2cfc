"""StepTracker: stepIndex 1..N per previousId, concurrency, eviction, seeding, totalSteps."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from alicia.protocol import StepLimitError, StepTracker

pytestmark = pytest.mark.filterwarnings("error")


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestIndexes:
    def test_each_chain_counts_from_one(self) -> None:
        t = StepTracker()
        assert [t.next_index("msg_a") for _ in range(3)] == [1, 2, 3]
        assert t.last_index("msg_a") == 3

    def test_chains_are_independent(self) -> None:
        t = StepTracker()
        got = [t.next_index(p) for p in ["a", "b", "a", "c", "b", "a"]]
        assert got == [1, 1, 2, 1, 2, 3]
        assert (t.last_index("a"), t.last_index("b"), t.last_index("c")) == (3, 2, 1)

    def test_unknown_chain_has_last_index_zero(self) -> None:
        assert StepTracker().last_index("nope") == 0


class TestTotalSteps:
    def test_cap_is_enforced(self) -> None:
        t = StepTracker()
        assert [t.next_index("a", total_steps=3) for _ in range(3)] == [1, 2, 3]
        with pytest.raises(StepLimitError, match="3 planned steps"):
            t.next_index("a")
        assert t.last_index("a") == 3  # the refused call did not advance the chain

    def test_plan_can_be_raised_later(self) -> None:
        t = StepTracker()
        t.next_index("a", total_steps=1)
        with pytest.raises(StepLimitError):
            t.next_index("a")
        assert t.next_index("a", total_steps=5) == 2

    def test_cap_applies_per_chain(self) -> None:
        t = StepTracker()
        t.next_index("a", total_steps=1)
        assert t.next_index("b") == 1
        assert t.next_index("b") == 2


class TestSeeding:
    def test_seed_continues_a_chain(self) -> None:
        t = StepTracker()
        t.seed("msg_a", 7)
        assert t.next_index("msg_a") == 8
        assert t.next_index("msg_a") == 9

    def test_seed_never_moves_a_chain_back(self) -> None:
        t = StepTracker()
        for _ in range(5):
            t.next_index("a")
        t.seed("a", 2)
        assert t.next_index("a") == 6

    def test_seed_zero_is_a_fresh_chain(self) -> None:
        t = StepTracker()
        t.seed("a", 0)
        assert "a" in t
        assert t.next_index("a") == 1

    def test_negative_seed_is_refused(self) -> None:
        with pytest.raises(ValueError, match=">= 0"):
            StepTracker().seed("a", -1)

    def test_restart_continues_from_the_seed(self) -> None:
        # A worker restarts: a new tracker is seeded from storage's last index.
        before = StepTracker()
        for _ in range(4):
            before.next_index("msg_a")
        after = StepTracker()
        after.seed("msg_a", before.last_index("msg_a"))
        assert after.next_index("msg_a") == 5


class TestEviction:
    def test_finish_drops_the_chain(self) -> None:
        t = StepTracker()
        t.next_index("a")
        t.next_index("b")
        t.finish("a")
        assert "a" not in t and "b" in t and len(t) == 1
        assert t.next_index("a") == 1  # a finished chain restarts unless seeded
        t.finish("never-seen")  # no error

    def test_idle_chains_expire(self) -> None:
        clock = FakeClock()
        t = StepTracker(idle_seconds=60, clock=clock)
        t.next_index("old")
        clock.now += 30
        t.next_index("fresh")
        clock.now += 31  # "old" idle 61 s, "fresh" 31 s
        t.next_index("other")
        assert "old" not in t
        assert "fresh" in t and "other" in t
        clock.now += 60
        t.next_index("late")
        assert "fresh" not in t and "other" not in t
        assert "late" in t and len(t) == 1

    def test_advancing_keeps_a_chain_alive(self) -> None:
        clock = FakeClock()
        t = StepTracker(idle_seconds=60, clock=clock)
        for i in range(1, 11):
            assert t.next_index("busy") == i
            clock.now += 59
            t.next_index(f"noise{i}")
        assert "busy" in t

    def test_exactly_idle_seconds_is_expired(self) -> None:
        clock = FakeClock()
        t = StepTracker(idle_seconds=60, clock=clock)
        t.next_index("a")
        clock.now += 60
        t.seed("b", 1)
        assert "a" not in t

    def test_lru_cap(self) -> None:
        t = StepTracker(max_chains=3)
        for p in ["a", "b", "c"]:
            t.next_index(p)
        t.next_index("a")  # a is now the most recently advanced
        t.next_index("d")  # over the cap: b (least recently advanced) goes
        assert [p for p in "abcd" if p in t] == ["a", "c", "d"]
        t.seed("e", 3)  # seeding counts as use too
        assert [p for p in "abcde" if p in t] == ["a", "d", "e"]
        assert len(t) == 3

    def test_memory_stays_bounded_under_many_chains(self) -> None:
        t = StepTracker(max_chains=100)
        for i in range(10_000):
            t.next_index(f"msg_{i}")
        assert len(t) == 100
        assert "msg_9999" in t and "msg_9899" not in t

    @pytest.mark.parametrize("bad", [0, -1])
    def test_cap_must_be_positive(self, bad: int) -> None:
        with pytest.raises(ValueError, match="max_chains"):
            StepTracker(max_chains=bad)


class TestConcurrency:
    def test_one_chain_from_many_threads_gets_unique_contiguous_indexes(self) -> None:
        t = StepTracker()
        results: list[list[int]] = [[] for _ in range(8)]
        start = threading.Barrier(len(results))

        def work(out: list[int]) -> None:
            start.wait()
            for _ in range(1000):
                out.append(t.next_index("msg_shared"))

        threads = [threading.Thread(target=work, args=(r,)) for r in results]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        everything = sorted(i for r in results for i in r)
        assert everything == list(range(1, 8001))
        assert all(r == sorted(r) for r in results)  # each thread saw its indexes rise

    def test_many_chains_from_many_threads(self) -> None:
        t = StepTracker()
        got: dict[str, list[int]] = defaultdict(list)
        lock = threading.Lock()
        start = threading.Barrier(6)

        def work(n: int) -> None:
            start.wait()
            for i in range(600):
                chain = f"msg_{(i + n) % 10}"
                index = t.next_index(chain)
                with lock:
                    got[chain].append(index)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(got) == 10
        for chain, indexes in got.items():
            assert sorted(indexes) == list(range(1, len(indexes) + 1)), chain
            assert t.last_index(chain) == len(indexes)
        assert sum(len(v) for v in got.values()) == 3600
