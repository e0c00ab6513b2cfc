"""Answer text into sentences: the same sentences however the text is cut into chunks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from alicia.agent.llm.sentences import SentenceStream

ANSWER = (
    "Sure. The answer is 42, which I computed with the calculator. It took no time at all! "
    "Dr. Smith agrees with 3.5 percent of it. Anything else I can do for you today?"
)


def run(chunks: list[str], **options: int) -> tuple[list[str], list[str]]:
    stream = SentenceStream(**options)
    out: list[str] = []
    for chunk in chunks:
        out += stream.push(chunk)
    return out, stream.flush()


def test_sentences_are_released_once_the_next_one_starts_and_the_last_is_held() -> None:
    out, rest = run([ANSWER])
    assert out == [
        "Sure. The answer is 42, which I computed with the calculator.",
        "It took no time at all!",
        "Dr. Smith agrees with 3.5 percent of it.",
    ]
    assert rest == ["Anything else I can do for you today?"]
    assert run(["Hello there, how are you doing?"]) == ([], ["Hello there, how are you doing?"])
    assert run(["", "  "]) == ([], [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(ANSWER) - 1), max_size=30))
def test_any_chunking_yields_the_same_text_in_order(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [ANSWER[a:b] for a, b in zip([0, *points], [*points, len(ANSWER)], strict=True)]
    out, rest = run(chunks)
    assert " ".join(out + rest).split() == ANSWER.split()
    assert rest and all(s.strip() == s and s for s in out + rest)


def test_an_endless_sentence_is_cut_to_packet_size() -> None:
    text = "word " * 5000
    out, rest = run([text[i : i + 7] for i in range(0, len(text), 7)], max_bytes=1000)
    pieces = out + rest
    assert all(len(p.encode()) <= 1000 for p in pieces)
    assert " ".join(pieces).split() == text.split()
