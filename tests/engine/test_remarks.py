"""Progress remarks: summaries made speakable, tool cues, cue rotation, who may hear what."""

from __future__ import annotations

import pytest

from alicia.agent.engine.participants import Visibility
from alicia.agent.engine.remarks import (
    MAX_WORDS,
    PROGRESS_POLICIES,
    RemarkWriter,
    speakable,
    spoken_level,
    tool_cue,
)

CUES = ["Let me work that out.", "Still working on it.", "Thinking it through.", "Almost there."]

SPEAKABLE = {
    "I'm recalling the common guidance for adults, which is about seven to nine hours of "
    "sleep per night.": "I'm recalling the common guidance for adults.",
    "Checking the boiling times for 3 eggs at 100 °C.": (
        "Checking the boiling times for three eggs at one hundred degrees Celsius."
    ),
    "**Plan**: compute 2.5% of 1,200 (see https://x.y)": (
        "Compute two point five percent of one thousand two hundred."
    ),
    "Looking up the historical average rainfall in the northern coastal regions of Portugal "
    "during the winter months": (
        "Looking up the historical average rainfall in the northern coastal regions."
    ),
    "Most adults need 7-9 hours; children need more.": "Most adults need seven to nine hours.",
    "Weighing 5\u201310% growth against inflation": (
        "Weighing five to ten percent growth against inflation."
    ),
    "Okay, let me check the 21st entry in the table.": (
        "Let me check the twenty-first entry in the table."
    ),
    "Ranking the 1st 2nd 3rd 4th 12th and 20th items": (
        "Ranking the first second third fourth twelfth and twentieth items."
    ),
    "- Convert 98.6 °F to `celsius(x)` quickly": (
        "Convert ninety-eight point six degrees Fahrenheit to quickly."
    ),
    "## Searching the web\n\nI need the latest news about the election.": "Searching the web.",
    "Checking [the docs](https://example.com) 🔥 for _the_ answer": (
        "Checking the docs for the answer."
    ),
    "Comparing Python 3.11.2 with the old release because it matters": (
        "Comparing Python with the old release."
    ),
    "I'm thinking it over while the user waits": "I'm thinking it over.",
    "Summing 1,234,567 and 123 for the total": (
        "Summing one million two hundred thirty-four thousand five hundred sixty-seven."
    ),
}


@pytest.mark.parametrize("summary", sorted(SPEAKABLE))
def test_a_summary_is_rewritten_for_speech(summary: str) -> None:
    assert speakable(summary) == SPEAKABLE[summary]


@pytest.mark.parametrize("summary", ["", "   ", "Hmm.", "**Plan**", "`x = 1` (see https://x.y)"])
def test_nothing_speakable_is_none(summary: str) -> None:
    assert speakable(summary) is None


def test_a_cut_drops_trailing_function_words_and_never_splits_a_number() -> None:
    long = "Checking the forecast for the coast and the hills"
    assert speakable(long, max_words=5) == "Checking the forecast."
    assert speakable(long, max_words=6) == "Checking the forecast for the coast."
    assert speakable("Adding 1,200 apples", max_words=4) is None
    assert speakable("Adding up 1,200 apples", max_words=4) == "Adding up."
    assert speakable("Now 21 of them", max_words=2) == "Now twenty-one."


def test_every_spoken_summary_is_short_and_ends_once() -> None:
    for summary in SPEAKABLE:
        spoken = speakable(summary)
        assert spoken is not None
        assert len(spoken.split()) <= MAX_WORDS
        assert spoken.endswith(".") and not spoken.endswith("..")
        assert spoken[0].isupper()
        assert not any(c.isdigit() for c in spoken)


@pytest.mark.parametrize(
    ("name", "cue"),
    [
        ("calculator", "Checking the calculator."),
        ("get_weather", "Checking the weather."),
        ("getWeather", "Checking the weather."),
        ("fetch_weather", "Checking the weather."),
        ("lookup_weather", "Checking the weather."),
        ("look_up_weather", "Checking the weather."),
        ("lookUpStockPrice", "Checking the stock price."),
        ("search_web", "Checking the web."),
        ("get", "Checking a tool."),
        ("", "Checking a tool."),
    ],
)
def test_tool_cues_name_the_tool(name: str, cue: str) -> None:
    assert tool_cue(name) == cue


def test_cues_rotate_from_the_first_and_skip_it_after_the_last() -> None:
    writer = RemarkWriter("cue")
    assert [writer.next() for _ in range(7)] == [*CUES, *CUES[1:]]
    assert writer.spoken == [*CUES, *CUES[1:]]


def test_policy_off_says_nothing() -> None:
    writer = RemarkWriter("off")
    assert writer.policy == "off"
    assert writer.next() is None
    assert writer.next(summary="Checking the weather in Paris.", level="summary") is None
    assert writer.next(tool="get_weather") is None
    assert writer.spoken == []


def test_tool_cues_come_under_cue_and_summary_and_never_twice_in_a_row() -> None:
    for policy in ("cue", "summary"):
        writer = RemarkWriter(policy)
        remarks = [writer.next(tool="get_weather") for _ in range(3)]
        assert remarks == ["Checking the weather.", CUES[0], "Checking the weather."]


def test_summaries_are_spoken_only_under_summary_policy_and_level() -> None:
    summary = "Checking the boiling times for 3 eggs, then timing them."
    spoken = "Checking the boiling times for three eggs."
    assert RemarkWriter("summary").next(summary=summary, level="summary") == spoken
    assert RemarkWriter("summary").next(summary=summary, level="cue") == CUES[0]
    assert RemarkWriter("summary").next(summary=summary) == CUES[0]
    assert RemarkWriter("cue").next(summary=summary, level="summary") == CUES[0]


def test_a_repeated_or_unspeakable_summary_falls_back_to_a_cue() -> None:
    writer = RemarkWriter("summary")
    summary = "Checking the weather in Paris."
    assert writer.next(summary=summary, level="summary") == summary
    assert writer.next(summary=summary, level="summary") == CUES[0]
    assert writer.next(summary=summary, level="summary") == summary
    assert writer.next(summary="Hmm.", level="summary") == CUES[1]
    assert writer.next(tool="get_weather", level="summary") == "Checking the weather."
    assert writer.spoken == [summary, CUES[0], summary, CUES[1], "Checking the weather."]


def test_a_cue_equal_to_the_last_remark_is_skipped() -> None:
    writer = RemarkWriter("summary")
    assert writer.next(summary="Let me work that out", level="summary") == CUES[0]
    assert writer.next() == CUES[1]
    assert writer.spoken == CUES[:2]


def test_an_unknown_policy_is_refused() -> None:
    assert PROGRESS_POLICIES == ("off", "cue", "summary")
    with pytest.raises(ValueError, match="progress policy"):
        RemarkWriter("loud")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("levels", "level"),
    [
        (["full", "summary"], "summary"),
        (["summary"], "summary"),
        (["full"], "summary"),
        (["full", "none"], "cue"),
        (["encrypted"], "cue"),
        (["summary", None], "cue"),
        ([None], "cue"),
        ([], "cue"),
    ],
)
def test_summaries_are_spoken_only_when_every_listener_may_see_them(
    levels: list[Visibility | None], level: str
) -> None:
    assert spoken_level(levels) == level
    assert spoken_level(iter(levels)) == level
