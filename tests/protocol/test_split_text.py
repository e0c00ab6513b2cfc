"""split_text: pieces within the byte budget, joined back exactly, cut at whitespace."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alicia.protocol import TEXT_BUDGET_BYTES, split_text

pytestmark = pytest.mark.filterwarnings("error")


def _check_pieces(text: str, pieces: list[str], budget: int) -> None:
    """The invariants every split must keep."""
    assert "".join(pieces) == text
    assert all(len(p.encode()) <= budget for p in pieces)
    if len(text.encode()) <= budget:
        assert pieces == [text]
        return
    assert all(pieces)  # no empty piece
    for i, piece in enumerate(pieces[:-1]):
        rest = "".join(pieces[i + 1 :])
        # The budget's worth of text that was not taken into this piece.
        room = budget - len(piece.encode())
        spill = rest.encode()[:room].decode("utf-8", errors="ignore")
        if piece[-1].isspace():
            # Cut after the LAST whitespace that fitted: none in the spill.
            assert not any(c.isspace() for c in spill), (piece, spill)
        else:
            # No whitespace to cut at (past the first char): the piece is as long as allowed.
            assert not any(c.isspace() for c in piece[1:])
            assert spill == "", "a word-less piece must fill the budget"


class TestExamples:
    def test_short_text_is_one_piece(self) -> None:
        assert split_text("hello world") == ["hello world"]
        assert split_text("") == [""]

    def test_cuts_after_the_last_space_within_budget(self) -> None:
        assert split_text("aaa bbb ccc", max_bytes=8) == ["aaa bbb ", "ccc"]
        assert split_text("aaa bbb ccc", max_bytes=4) == ["aaa ", "bbb ", "ccc"]

    def test_keeps_runs_of_whitespace_and_newlines(self) -> None:
        text = "one\n\ntwo  three\tfour"
        pieces = split_text(text, max_bytes=6)
        assert pieces == ["one\n\n", "two  ", "three\t", "four"]
        _check_pieces(text, pieces, 6)

    def test_long_word_is_cut_between_characters(self) -> None:
        assert split_text("abcdefghij", max_bytes=4) == ["abcd", "efgh", "ij"]

    @pytest.mark.parametrize("char", ["é", "日", "🧠"], ids=["2-byte", "3-byte", "4-byte"])
    def test_multibyte_characters_are_never_split(self, char: str) -> None:
        text = char * 50
        pieces = split_text(text, max_bytes=7)
        _check_pieces(text, pieces, 7)
        width = len(char.encode())
        assert all(len(p) == 7 // width for p in pieces[:-1])

    def test_mixed_multibyte_words(self) -> None:
        text = "Ünïcödé wörds 日本語 テキスト 🧠💭 thinking " * 40
        pieces = split_text(text, max_bytes=50)
        _check_pieces(text, pieces, 50)
        assert all(p.endswith(" ") for p in pieces[:-1])

    def test_default_budget_is_the_text_budget(self) -> None:
        text = "word " * 10_000  # 50,000 bytes
        pieces = split_text(text)
        _check_pieces(text, pieces, TEXT_BUDGET_BYTES)
        assert len(pieces) == 4
        assert all(len(p.encode()) > TEXT_BUDGET_BYTES - 5 for p in pieces[:-1])

    @pytest.mark.parametrize("budget", [0, 1, 3])
    def test_budget_below_one_character_is_refused(self, budget: int) -> None:
        with pytest.raises(ValueError, match="at least 4"):
            split_text("some text", max_bytes=budget)


class TestProperties:
    @given(
        st.text(st.characters(codec="utf-8"), max_size=400),
        st.integers(min_value=4, max_value=120),
    )
    @settings(max_examples=400, deadline=None)
    def test_any_unicode_text(self, text: str, budget: int) -> None:
        _check_pieces(text, split_text(text, max_bytes=budget), budget)

    @given(
        st.lists(
            st.text(st.characters(codec="utf-8", exclude_categories=["Zs", "Cc"]), max_size=12),
            max_size=80,
        ),
        st.sampled_from([" ", "\n", "  ", "\u3000", "\t"]),
        st.integers(min_value=16, max_value=64),
    )
    @settings(max_examples=300, deadline=None)
    def test_words_and_separators(self, words: list[str], sep: str, budget: int) -> None:
        text = sep.join(words)
        pieces = split_text(text, max_bytes=budget)
        _check_pieces(text, pieces, budget)
