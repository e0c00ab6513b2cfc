"""segment() and StepSegmenter: paragraphs, the packet bound, any split, the time rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alicia import protocol
from alicia.agent.llm.segmenter import STEP_MAX_BYTES, StepSegmenter, segment
from tests.support.recorded import MANIFEST

pytestmark = pytest.mark.filterwarnings("error")


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stream(text: str, cuts: set[int], *, max_bytes: int = STEP_MAX_BYTES) -> list[str]:
    segmenter = StepSegmenter(max_bytes=max_bytes)
    steps: list[str] = []
    points = sorted(c for c in cuts if 0 < c < len(text))
    for a, b in zip([0, *points], [*points, len(text)], strict=True):
        steps += segmenter.push(text[a:b])
    return steps + segmenter.close()


def visible(text: str) -> str:
    return "".join(text.split())


# -- the pure function -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("", []),
        ("  \n\n \t\n", []),
        ("One thought.", ["One thought."]),
        ("First.\n\nSecond.", ["First.", "Second."]),
        ("First.\n \t\nSecond.", ["First.", "Second."]),
        ("First.\r\n\r\nSecond.", ["First.", "Second."]),
        ("First.\n\n\n\n\nSecond.\n\n", ["First.", "Second."]),
        ("A list:\n- one\n- two\n\nDone.", ["A list:\n- one\n- two", "Done."]),
        ("\n\n  Indented start.  \n\n", ["Indented start."]),
    ],
)
def test_segment_cuts_at_blank_lines(text: str, steps: list[str]) -> None:
    assert segment(text) == steps


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_segment_of_recorded_reasoning_is_its_paragraphs(name: str) -> None:
    assert segment(shown(name)) == list(MANIFEST[name].steps)


def test_long_paragraph_is_cut_at_sentence_ends() -> None:
    text = "Alpha beta gamma. Delta epsilon! Zeta eta theta? Iota kappa."
    assert segment(text, max_bytes=36) == [
        "Alpha beta gamma. Delta epsilon!",
        "Zeta eta theta? Iota kappa.",
    ]


def test_sentence_end_needs_following_whitespace() -> None:
    # "3.14" and "e.g." inside words are not sentence ends: cut at a word boundary.
    assert segment("pi is 3.14159 roughly and e.g.this", max_bytes=20) == [
        "pi is 3.14159",
        "roughly and e.g.this",
    ]


def test_closing_quote_stays_with_its_sentence() -> None:
    assert segment('He said "stop." Then left quickly.', max_bytes=20) == [
        'He said "stop."',
        "Then left quickly.",
    ]


def test_without_sentence_end_the_cut_is_at_a_word_boundary() -> None:
    assert segment("one two three four five six", max_bytes=10) == [
        "one two",
        "three four",
        "five six",
    ]


def test_one_huge_word_is_cut_between_characters() -> None:
    text = "日本語" * 10  # 3 bytes per character
    steps = segment(text, max_bytes=10)
    assert steps == ["日本語", "日本語", "日本語", "日本語", "日本語"] * 2
    assert all(len(s.encode()) <= 10 for s in steps)


def test_cjk_full_stop_is_a_sentence_end() -> None:
    bang = "\uff01"  # full-width exclamation mark
    assert segment(f"你好。世界{bang}好的", max_bytes=16) == ["你好。", f"世界{bang}好的"]
    assert segment(f"你好。世界{bang}好的", max_bytes=12) == ["你好。", f"世界{bang}", "好的"]


def test_default_step_fits_one_reasoning_step_packet() -> None:
    # Worst case: 4-byte characters, no whitespace, ids at full length.
    text = "\U0001f914" * (STEP_MAX_BYTES // 4 + 100)
    steps = segment(text)
    assert len(steps) == 2
    for index, content in enumerate(steps, start=1):
        assert len(content.encode()) <= STEP_MAX_BYTES
        body = protocol.ReasoningStep(
            id=protocol.new_id("rs"),
            conversation_id=protocol.new_id("conv"),
            previous_id=protocol.new_id("msg"),
            content=content,
            step_index=index,
            total_steps=2,
        )
        env = protocol.envelope(
            body, stanza_id=-2_000_000_000, conversation_id=body.conversation_id
        )
        assert len(protocol.encode(env)) <= protocol.MAX_PACKET_BYTES


def test_max_bytes_below_one_character_is_rejected() -> None:
    with pytest.raises(ValueError):
        segment("x", max_bytes=3)
    with pytest.raises(ValueError):
        StepSegmenter(max_bytes=3)
    with pytest.raises(ValueError):
        StepSegmenter(max_delay=0)


_ALPHABET = st.sampled_from(
    [
        "a",
        "b",
        "word",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r",
        ".",
        "!",
        "?",
        '"',
        "é",
        "日",
        "。",
        "…",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    text=st.lists(_ALPHABET, max_size=80).map("".join),
    max_bytes=st.integers(4, 40),
)
def test_segment_invariants(text: str, max_bytes: int) -> None:
    steps = segment(text, max_bytes=max_bytes)
    for step in steps:
        assert step
        assert step == step.strip()
        assert len(step.encode()) <= max_bytes
    assert visible("".join(steps)) == visible(text)  # no text lost, none invented


# -- streaming: any split equals the pure function -------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    text=st.lists(_ALPHABET, max_size=80).map("".join),
    cuts=st.sets(st.integers(1, 300), max_size=80),
    max_bytes=st.integers(4, 40),
)
def test_any_split_through_push_equals_segment(text: str, cuts: set[int], max_bytes: int) -> None:
    assert stream(text, cuts, max_bytes=max_bytes) == segment(text, max_bytes=max_bytes)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(MANIFEST)),
    max_bytes=st.sampled_from([STEP_MAX_BYTES, 120, 40]),
    data=st.data(),
)
def test_recorded_reasoning_any_split_gives_the_same_steps(
    name: str, max_bytes: int, data: st.DataObject
) -> None:
    text = MANIFEST[name].reasoning
    cuts = data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=300))
    assert stream(text, cuts, max_bytes=max_bytes) == segment(text, max_bytes=max_bytes)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_recorded_reasoning_one_character_at_a_time(name: str) -> None:
    text = shown(name)
    assert stream(text, set(range(len(text)))) == list(MANIFEST[name].steps)


def shown(name: str) -> str:
    """The stream's reasoning, or its provider summaries when it streams only those."""
    spec = MANIFEST[name]
    return spec.reasoning or "\n\n".join(spec.summaries)


def test_push_returns_a_step_as_soon_as_its_blank_line_arrives() -> None:
    segmenter = StepSegmenter()
    assert segmenter.push("First thought.") == []
    assert segmenter.push("\n") == []
    assert segmenter.push("\nSecond") == ["First thought."]
    assert segmenter.pending == "Second"
    assert segmenter.close() == ["Second"]
    assert segmenter.close() == []


def test_push_cuts_as_soon_as_the_size_bound_is_passed() -> None:
    segmenter = StepSegmenter(max_bytes=12)
    assert segmenter.push("Short one. And") == ["Short one."]
    assert segmenter.pending == "And"


# -- the time rule -----------------------------------------------------------------------


def test_due_is_none_when_nothing_is_open() -> None:
    segmenter = StepSegmenter(clock=FakeClock())
    assert segmenter.due() is None
    segmenter.push("  \n ")
    assert segmenter.due() is None
    assert segmenter.poll() == []


def test_sentence_end_is_cut_after_max_delay() -> None:
    clock = FakeClock()
    segmenter = StepSegmenter(max_delay=1.0, clock=clock)
    segmenter.push("One sentence. And")
    assert segmenter.due() == 1.0
    clock.now = 0.99
    assert segmenter.poll() == []
    clock.now = 1.0
    assert segmenter.poll() == ["One sentence."]
    # The rest arrived at t=0 and has no sentence end: due at 2 * max_delay.
    assert segmenter.pending == "And"
    assert segmenter.due() == 2.0


def test_without_sentence_end_cut_at_last_word_after_twice_max_delay() -> None:
    clock = FakeClock()
    segmenter = StepSegmenter(max_delay=0.5, clock=clock)
    segmenter.push("an endless clause")
    clock.now = 0.9
    segmenter.push(" without any full st")
    assert segmenter.due() == 1.0
    clock.now = 0.99
    assert segmenter.poll() == []
    clock.now = 1.0
    assert segmenter.poll() == ["an endless clause without any full"]
    # The rest ("st") arrived at 0.9: its own deadline.
    assert segmenter.pending == "st"
    assert segmenter.due() == 0.9 + 1.0
    clock.now = 1.2
    segmenter.push("op. Then more")
    assert segmenter.due() == 0.9 + 0.5  # now it holds a sentence end
    assert segmenter.poll() == []
    clock.now = 1.4
    assert segmenter.poll() == ["stop."]
    assert segmenter.pending == "Then more"
    assert segmenter.due() == 1.2 + 1.0


def test_an_old_partial_word_is_emitted_when_its_own_deadline_passed() -> None:
    clock = FakeClock()
    segmenter = StepSegmenter(max_delay=0.5, clock=clock)
    segmenter.push("the model stalls mid-wo")
    clock.now = 1.0
    assert segmenter.poll() == ["the model stalls"]
    assert segmenter.due() == 1.0  # "mid-wo" arrived at 0: due already
    assert segmenter.poll() == ["mid-wo"]
    assert segmenter.due() is None


def test_a_step_without_whitespace_is_emitted_whole() -> None:
    clock = FakeClock()
    segmenter = StepSegmenter(max_delay=1.0, clock=clock)
    segmenter.push("日本語のテキスト")
    clock.now = 2.0
    assert segmenter.poll() == ["日本語のテキスト"]
    assert segmenter.due() is None


def test_blank_line_still_closes_before_the_deadline() -> None:
    clock = FakeClock()
    segmenter = StepSegmenter(max_delay=1.0, clock=clock)
    assert segmenter.push("Quick thought.\n\nNext") == ["Quick thought."]
    clock.now = 0.5
    assert segmenter.due() == 2.0  # "Next" arrived at 0 in the same push, no sentence end


@settings(max_examples=200, deadline=None)
@given(
    pushes=st.lists(
        st.tuples(st.floats(0.0, 0.7), st.lists(_ALPHABET, min_size=1, max_size=6).map("".join)),
        max_size=40,
    ),
    max_delay=st.sampled_from([0.25, 1.0]),
    max_bytes=st.sampled_from([STEP_MAX_BYTES, 24]),
)
def test_every_character_is_emitted_within_twice_max_delay(
    pushes: list[tuple[float, str]], max_delay: float, max_bytes: int
) -> None:
    clock = FakeClock()
    segmenter = StepSegmenter(max_bytes=max_bytes, max_delay=max_delay, clock=clock)
    arrivals: list[float] = []  # push time of each visible character, in order
    emitted: list[tuple[float, str]] = []

    def run_until(t: float) -> None:
        # What a worker loop does: sleep until due(), poll, repeat, until the next push.
        while (due := segmenter.due()) is not None and due <= t:
            clock.now = max(clock.now, due)
            emitted.extend((clock.now, s) for s in segmenter.poll())
        clock.now = t

    for gap, text in pushes:
        run_until(clock.now + gap)
        arrivals += [clock.now] * len(visible(text))
        emitted.extend((clock.now, s) for s in segmenter.push(text))
    run_until(clock.now + 10 * max_delay)
    assert segmenter.due() is None

    times = [t for t, step in emitted for _ in visible(step)]
    assert visible("".join(s for _, s in emitted)) == visible("".join(t for _, t in pushes))
    assert all(s and s == s.strip() and len(s.encode()) <= max_bytes for _, s in emitted)
    for arrived, sent in zip(arrivals, times, strict=True):
        assert sent - arrived <= 2 * max_delay + 1e-9


def _fresh_due(segmenter: StepSegmenter) -> float | None:
    """``due()`` computed from the open step as it is now (the segmenter keeps its own)."""
    clone = StepSegmenter(max_bytes=24, max_delay=1.0, clock=lambda: 0.0)
    clone._buf, clone._base = segmenter._buf, segmenter._base
    clone._pushes = segmenter._pushes.copy()
    clone._last_end, clone._due_known = -1, False
    return clone.due()


@settings(max_examples=300, deadline=None)
@given(
    pushes=st.lists(
        st.tuples(st.floats(0.0, 0.7), st.lists(_ALPHABET, min_size=1, max_size=6).map("".join)),
        max_size=40,
    )
)
def test_due_is_always_what_the_open_step_says(pushes: list[tuple[float, str]]) -> None:
    """The deadline kept between tokens is the one the open step gives when asked afresh,
    after every push, poll and close."""
    clock = FakeClock()
    segmenter = StepSegmenter(max_bytes=24, max_delay=1.0, clock=clock)
    for gap, text in pushes:
        clock.now += gap
        segmenter.poll()
        assert segmenter.due() == _fresh_due(segmenter)
        segmenter.push(text)
        assert segmenter.due() == _fresh_due(segmenter)
    segmenter.close()
    assert segmenter.due() is None
