"""Spill directories of writers that start at the same moment (in one process, as the
rooms of a worker do, or in two processes on one spill root): each keeps its own and
adopts only the directories no live writer holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from alicia.agent.storage import spill
from alicia.agent.storage.spill import Item, SpillDir
from alicia.protocol import envelope
from tests.storage.traffic import CID, step


def test_a_writer_opening_while_another_creates_its_directory_does_not_adopt_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The interleaving a worker met when two rooms opened their writers together: the
    # second writer looks for orphans just after the first made its directory and before
    # the first locked it (the first then failed: "cannot lock spill directory").
    first, second = SpillDir(tmp_path), SpillDir(tmp_path)
    real_lock = spill._try_lock
    interleaved: list[list[spill.Segment]] = []

    def lock_after_the_other_looked(path: Path) -> int | None:
        if not interleaved:
            interleaved.append([])
            interleaved[0] = second.open()
        return real_lock(path)

    monkeypatch.setattr(spill, "_try_lock", lock_after_the_other_looked)
    assert first.open() == []
    assert interleaved == [[]]
    assert first.own != second.own and first.own.is_dir() and second.own.is_dir()
    # Each holds its own directory: a third writer adopts neither while they live.
    kept = first.write(
        [Item(1, 0.0, envelope(step("m1", 1, "x"), stanza_id=-1, conversation_id=CID))]
    )
    third = SpillDir(tmp_path)
    assert third.open() == [] and kept.path.exists()
    first.close()
    second.close()
    third.close()
