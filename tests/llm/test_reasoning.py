"""ReasoningExtractor and strip_reasoning: every provider shape, any chunk cut."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alicia.agent.llm.reasoning import (
    OPEN_MARKERS,
    Answer,
    Part,
    Reasoning,
    ReasoningExtractor,
    Summary,
    strip_reasoning,
)
from tests.support.recorded import MANIFEST, answer_of, deltas_of, reasoning_of, summary_of

pytestmark = pytest.mark.filterwarnings("error")

Delta = Mapping[str, Any]


def run(deltas: Iterable[Delta], *, open_at_start: bool = False) -> list[Part]:
    extractor = ReasoningExtractor(open_at_start=open_at_start)
    parts: list[Part] = []
    for delta in deltas:
        parts += extractor.feed(delta)
    return parts + extractor.flush()


def contents(*pieces: str) -> list[Delta]:
    return [{"content": p} for p in pieces]


# -- the recorded streams ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_recorded_stream_yields_manifest_reasoning_and_answer(name: str) -> None:
    spec = MANIFEST[name]
    parts = run(deltas_of(name), open_at_start=spec.open_at_start)
    assert reasoning_of(parts) == spec.reasoning
    assert summary_of(parts) == "\n\n".join(spec.summaries)
    assert answer_of(parts) == spec.answer


def _flatten(name: str) -> list[tuple[str, str]]:
    """The stream as runs of (channel, text): the text each channel carried, in order."""
    runs: list[tuple[str, str]] = []

    def add(kind: str, text: str) -> None:
        if not text:
            return
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1] + text)
        else:
            runs.append((kind, text))

    for delta in deltas_of(name):
        details = delta.get("reasoning_details") or []
        summary = "".join(d.get("summary") or "" for d in details) or delta.get("reasoning_summary")
        reasoning = (
            delta.get("reasoning_content") or delta.get("reasoning") or delta.get("thinking")
        )
        if summary:
            add("summary", summary)
        elif isinstance(reasoning, str):
            add("field", reasoning)
        content = delta.get("content")
        if isinstance(content, str):
            add("content", content)
        elif isinstance(content, list):
            for block in content:
                if block.get("type") == "thinking":
                    add("block", "".join(t["text"] for t in block["thinking"]))
                else:
                    add("content", block["text"])
    return runs


def _as_delta(kind: str, text: str) -> Delta:
    if kind == "field":
        return {"reasoning_content": text, "content": None}
    if kind == "summary":
        return {"reasoning_summary": text}
    if kind == "block":
        return {"content": [{"type": "thinking", "thinking": text}]}
    return {"content": text}


def _resplit(runs: list[tuple[str, str]], cuts: set[int]) -> list[Delta]:
    """Cut every run at the given absolute offsets (over the whole stream text)."""
    deltas: list[Delta] = []
    offset = 0
    for kind, text in runs:
        start = 0
        for i in range(1, len(text)):
            if offset + i in cuts:
                deltas.append(_as_delta(kind, text[start:i]))
                start = i
        deltas.append(_as_delta(kind, text[start:]))
        offset += len(text)
    return deltas


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_recorded_stream_cut_into_single_characters(name: str) -> None:
    spec = MANIFEST[name]
    runs = _flatten(name)
    total = sum(len(text) for _, text in runs)
    parts = run(_resplit(runs, set(range(total))), open_at_start=spec.open_at_start)
    assert reasoning_of(parts) == spec.reasoning
    assert summary_of(parts) == "\n\n".join(spec.summaries)
    assert answer_of(parts) == spec.answer


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(MANIFEST)), data=st.data())
def test_recorded_stream_any_split_gives_the_same_texts(name: str, data: st.DataObject) -> None:
    spec = MANIFEST[name]
    runs = _flatten(name)
    total = sum(len(text) for _, text in runs)
    cuts = data.draw(st.sets(st.integers(1, max(1, total - 1)), max_size=200))
    parts = run(_resplit(runs, cuts), open_at_start=spec.open_at_start)
    assert reasoning_of(parts) == spec.reasoning
    assert answer_of(parts) == spec.answer


# -- arbitrary text: split invariance and the never-spoken rule ---------------------

_VOCAB = [
    "<think>",
    "</think>",
    "<thi",
    "nk>",
    "</th",
    "<",
    ">",
    "/",
    "<thinking",
    "<th>",
    " ",
    "\n",
    "\n\n",
    "a",
    "b",
    "é",
    "日",
    ".",
]


def _split(text: str, cuts: set[int]) -> list[str]:
    points = sorted(c for c in cuts if 0 < c < len(text))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(_VOCAB), max_size=40).map("".join),
    cuts=st.sets(st.integers(1, 200), max_size=60),
    open_at_start=st.booleans(),
)
def test_any_split_of_content_equals_one_piece(
    text: str, cuts: set[int], open_at_start: bool
) -> None:
    whole = run(contents(text), open_at_start=open_at_start)
    pieces = run(contents(*_split(text, cuts)), open_at_start=open_at_start)
    assert reasoning_of(pieces) == reasoning_of(whole)
    assert answer_of(pieces) == answer_of(whole)
    for part in pieces:
        assert part.text  # never an empty part
    answer = answer_of(pieces)
    assert "<think>" not in answer and "</think>" not in answer
    assert answer == answer.lstrip()


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(
        st.tuples(
            st.booleans(),
            st.lists(st.sampled_from(["", " ", "\n", "\n\n"]), min_size=1, max_size=3),
            st.text("xyz", min_size=1, max_size=8),
        ),
        max_size=12,
    ),
    cuts=st.sets(st.integers(1, 400), max_size=80),
    unclosed=st.booleans(),
)
def test_reasoning_never_reaches_the_answer(
    blocks: list[tuple[bool, list[str], str]], cuts: set[int], unclosed: bool
) -> None:
    # Reasoning words use upper-case letters, answer words lower-case ones.
    text = ""
    for is_reasoning, spaces, word in blocks:
        pad = "".join(spaces)
        text += f"<think>{pad}{word.upper()}{pad}</think>" if is_reasoning else f"{pad}{word}"
    if unclosed:
        text += "<think>TAIL"
    parts = run(contents(*_split(text, cuts)))
    answer, reasoning = answer_of(parts), reasoning_of(parts)
    assert not any(c.isupper() for c in answer)
    assert not any(c.islower() for c in reasoning)
    assert "".join(c for c in answer if c.isalpha()) == "".join(w for r, _, w in blocks if not r)
    expected_reasoning = "".join(w.upper() for r, _, w in blocks if r) + (
        "TAIL" if unclosed else ""
    )
    assert "".join(c for c in reasoning if c.isalpha()) == expected_reasoning
    assert answer == answer.lstrip()


# -- the rules, one by one -----------------------------------------------------------


def test_tag_cut_at_every_character() -> None:
    parts = run(contents("<", "t", "h", "i", "n", "k", ">", "R", "<", "/", "think", ">", "A"))
    assert parts == [Reasoning("R"), Answer("A")]


def test_only_a_possible_tag_prefix_is_held_back() -> None:
    extractor = ReasoningExtractor()
    assert extractor.feed({"content": "The answer is <"}) == [Answer("The answer is ")]
    assert extractor.feed({"content": "5, not more."}) == [Answer("<5, not more.")]
    assert extractor.feed({"content": " See </th"}) == [Answer(" See ")]
    assert extractor.feed({"content": "ree>"}) == [Answer("</three>")]
    assert extractor.feed({"content": "x</think"}) == [Answer("x")]
    assert extractor.flush() == [Answer("</think")]


def test_look_alike_tags_are_ordinary_text() -> None:
    parts = run(contents("Let me tell you about <thi", "nking about it> and <th>cells</th>."))
    assert reasoning_of(parts) == ""
    assert answer_of(parts) == "Let me tell you about <thinking about it> and <th>cells</th>."
    assert run(contents("<THINK>loud</THINK>")) == [Answer("<THINK>loud</THINK>")]


def test_think_in_the_middle_of_the_answer_is_reasoning() -> None:
    parts = run(contents("Sure. <think>should I add more?</think> Done."))
    assert reasoning_of(parts) == "should I add more?"
    assert answer_of(parts) == "Sure. Done."
    parts = run(contents("Sure.<think>hm</think>\n\nDone."))
    assert answer_of(parts) == "Sure.\n\nDone."


def test_removed_reasoning_is_a_word_break() -> None:
    assert answer_of(run(contents("Sure.<think>hm</think>Done."))) == "Sure. Done."
    assert answer_of(run(contents("Sure.<think>hm</think>", "Done."))) == "Sure. Done."
    assert answer_of(run(contents("Sure.\n<think>hm</think>Done."))) == "Sure.\nDone."
    # No tag can be glued together around removed text.
    assert answer_of(run(contents("<thi<think>x</think>nk>"))) == "<thi nk>"
    assert answer_of(run(contents("<thi<", "/think>nk>"))) == "<thi nk>"


def test_unclosed_think_at_end_stays_reasoning() -> None:
    parts = run(contents("Hello. <think>I never close this", "\n\nand keep going"))
    assert answer_of(parts) == "Hello. "
    assert reasoning_of(parts) == "I never close this\n\nand keep going"
    assert run(contents("<think>partial </thi")) == [Reasoning("partial "), Reasoning("</thi")]


def test_whitespace_after_close_tag_does_not_start_the_answer() -> None:
    parts = run(contents("<think>\nR\n</think>", "\n", "\n", "The answer."))
    assert parts == [Reasoning("R\n"), Answer("The answer.")]
    assert run(contents("\n\n  Hi there.")) == [Answer("Hi there.")]
    assert run(contents("<think>R</think>", "\n\n")) == [Reasoning("R")]


def test_empty_and_null_deltas_yield_nothing() -> None:
    extractor = ReasoningExtractor()
    empties: list[Delta] = [
        {},
        {"role": "assistant"},
        {"content": None},
        {"content": ""},
        {"content": []},
        {"reasoning_content": None, "content": None},
        {"reasoning": "", "content": ""},
        {"content": None, "refusal": None, "tool_calls": None, "function_call": None},
    ]
    for delta in empties:
        assert extractor.feed(delta) == []
    assert extractor.flush() == []


def test_tool_call_deltas_are_ignored() -> None:
    delta = {
        "content": None,
        "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{"}}],
    }
    assert run([delta]) == []


def test_reasoning_field_and_content_in_one_delta_keep_order() -> None:
    parts = run([{"reasoning_content": "think ", "content": "say"}])
    assert parts == [Reasoning("think "), Answer("say")]


def test_duplicated_reasoning_fields_count_once() -> None:
    parts = run([{"reasoning": "r1", "reasoning_content": "r1"}, {"reasoning": "r2"}])
    assert parts == [Reasoning("r1"), Reasoning("r2")]


def test_reasoning_details_decide_the_kind_and_are_read_once() -> None:
    detail = {"type": "reasoning.text", "text": "R", "format": "unknown", "index": 0}
    summary = {"type": "reasoning.summary", "summary": "S"}
    encrypted = {"type": "reasoning.encrypted", "data": "opaque"}
    assert run([{"reasoning": "R", "reasoning_details": [detail]}]) == [Reasoning("R")]
    assert run([{"reasoning": "S", "reasoning_details": [summary]}]) == [Summary("S")]
    assert run([{"reasoning_details": [detail, summary, encrypted]}]) == [
        Reasoning("R"),
        Summary("S"),
    ]
    assert run([{"reasoning_details": [encrypted, "junk", 3]}]) == []
    # only an encrypted item: the plain field still counts
    assert run([{"reasoning": "R", "reasoning_details": [encrypted]}]) == [Reasoning("R")]


def test_content_blocks() -> None:
    parts = run(
        [
            {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "a"}]}]},
            {
                "content": [
                    {"type": "reasoning", "text": "b"},
                    {"type": "thinking", "thinking": "c"},
                ]
            },
            {"content": [{"type": "redacted_thinking", "data": "x"}, {"type": "image_url"}]},
            {"content": [{"type": "text", "text": "An"}, "swer", {"text": "!"}]},
            {"content": [{"type": "text", "text": "<think>d</think> more"}]},
            {"content": [{"type": "thinking"}, 5, None]},
        ]
    )
    assert reasoning_of(parts) == "abcd"
    assert answer_of(parts) == "Answer! more"


def test_open_at_start_reads_content_as_reasoning_until_close() -> None:
    parts = run(
        contents("Thinking first.\n\nMore.", "\n</th", "ink>\n\nAnswer."), open_at_start=True
    )
    assert reasoning_of(parts) == "Thinking first.\n\nMore.\n"
    assert answer_of(parts) == "Answer."
    # The model writes the opening tag anyway: it is dropped.
    parts = run(contents("<think>\nR</think>A"), open_at_start=True)
    assert parts == [Reasoning("R"), Answer("A")]


def test_open_at_start_is_cancelled_by_a_reasoning_field() -> None:
    deltas = [{"role": "assistant", "content": ""}, {"reasoning": "R"}, {"content": "Answer."}]
    assert run(deltas, open_at_start=True) == [Reasoning("R"), Answer("Answer.")]
    blocks: list[Delta] = [{"content": [{"type": "thinking", "thinking": "R"}]}, {"content": "A"}]
    assert run(blocks, open_at_start=True) == [Reasoning("R"), Answer("A")]


def test_open_at_start_without_close_is_all_reasoning() -> None:
    assert run(contents("never", " closed"), open_at_start=True) == [
        Reasoning("never"),
        Reasoning(" closed"),
    ]


def test_stray_close_tag_outside_reasoning_is_dropped() -> None:
    assert answer_of(run(contents("Fine </think> then."))) == "Fine then."


def test_adjacent_parts_of_one_call_are_merged() -> None:
    extractor = ReasoningExtractor()
    assert extractor.feed(
        {"reasoning": "a", "content": [{"type": "thinking", "thinking": "b"}]}
    ) == [Reasoning("ab")]


def test_in_reasoning_reports_the_state() -> None:
    extractor = ReasoningExtractor()
    assert not extractor.in_reasoning
    extractor.feed({"content": "<think>x"})
    assert extractor.in_reasoning
    extractor.feed({"content": "</think>y"})
    assert not extractor.in_reasoning


# -- strip_reasoning ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("No tags at all.\n", "No tags at all.\n"),
        ("  leading space kept without tags", "  leading space kept without tags"),
        ("<think>\nR\n</think>\n\nThe answer.", "The answer."),
        ("R only closes</think>\n\nThe answer.", "The answer."),
        ("A <think>x</think> B <think>y</think> C", "A B C"),
        ("Answer.<think>never closed", "Answer."),
        ("<thinking about it> is not a tag", "<thinking about it> is not a tag"),
        ("<thinking>x</thinking>Done.", "Done."),
        ("<think></think>", ""),
    ],
)
def test_strip_reasoning(text: str, expected: str) -> None:
    assert strip_reasoning(text) == expected


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_strip_reasoning_of_recorded_content_is_the_answer(name: str) -> None:
    spec = MANIFEST[name]
    content = "".join(text for kind, text in _flatten(name) if kind == "content")
    if spec.open_at_start or any(m in content for m in OPEN_MARKERS):
        assert strip_reasoning(content) == spec.answer
    else:
        assert strip_reasoning(content) == content
        assert content.lstrip() == spec.answer
