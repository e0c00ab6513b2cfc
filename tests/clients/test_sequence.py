"""The client library's view of the server's stanza sequence (``alicia.client.sequence``):
de-duplication by id, and the resume point held from the moment the link or agent is lost."""

from __future__ import annotations

from alicia.client.sequence import REMEMBERED, SUSPECT_AHEAD, ServerSequence


def test_an_envelope_lost_below_what_arrived_is_taken_when_replayed() -> None:
    seq = ServerSequence()
    assert [seq.accept("a", -n) for n in (1, 2, 4)] == [True, True, True]
    assert seq.last_seen == 4
    # -3 went into the link that was going down; the replay brings it, and -4 again
    assert seq.accept("a", -3) is True
    assert seq.accept("a", -4) is False
    assert seq.accept("a", -2) is False


def test_a_resume_asks_from_what_had_arrived_when_the_link_was_lost() -> None:
    seq = ServerSequence()
    for n in (1, 2, 3):
        seq.accept("a", -n)
    seq.lost()
    seq.accept("a", -5)  # through the new link, before the resume
    seq.lost()  # a second report of the same outage keeps the first mark
    assert (seq.resume_from, seq.last_seen) == (3, 5)
    seq.resumed()
    assert seq.resume_from == 5


def test_a_new_agent_that_does_not_continue_the_sequence_restarts_it() -> None:
    seq = ServerSequence()
    for n in (1, 2, 3):
        seq.accept("a", -n)
    seq.lost()
    assert seq.accept("b", -1) is True  # b numbers from scratch
    assert (seq.renumbered, seq.last_seen, seq.resume_from) == (1, 1, 1)
    assert seq.accept("b", -2) is True


def test_a_continuing_agent_is_not_renumbered_and_client_ids_are_not_taken() -> None:
    seq = ServerSequence()
    seq.accept("a", -1)
    assert seq.accept("b", -2) is True
    assert seq.accept("b", 3) is False  # a client's number
    assert seq.renumbered == 0


def test_ids_far_below_the_mark_count_as_seen_and_memory_stays_bounded() -> None:
    seq = ServerSequence()
    top = 5 * REMEMBERED
    for n in range(1, top + 1, 2):  # every other id: the rest never came
        seq.accept("a", -n)
    assert seq.accept("a", -(top - 2)) is True  # within the window: a late one
    assert seq.accept("a", -2) is False  # far below: taken as seen
    assert len(seq._got) <= 2 * REMEMBERED + 1


def test_an_envelope_from_an_unnamed_sender_lowers_the_resume_point_until_a_later_resume() -> None:
    seq = ServerSequence()
    for n in (1, 2, 3, 4):
        seq.accept("a", -n)
    assert seq.suspect(-4) is False  # held: nothing to ask again
    assert seq.suspect(3) is False  # a client's number
    seq.lost()
    assert seq.asking() == (4, 0)  # a resume in flight asks from 4
    assert seq.suspect(-7) is True  # dropped: its sender was not named yet (its answer?)
    assert seq.suspect(-6) is True
    assert seq.suspect(-4 - SUSPECT_AHEAD - 1) is False  # not the agent's next few
    assert seq.suspect(-2147483647) is False  # a forger's
    assert (seq.suspected, seq.resume_from) == (True, 4)  # the mark is lower still
    seq.accept("a", -8)
    seq.resumed(0)  # answered, but the drops came after it began
    assert (seq.suspected, seq.resume_from) == (True, 5)
    point, began = seq.asking()
    assert (point, seq.suspect(-5)) == (5, False)  # at or below what it asks from
    seq.resumed(began)  # the next resume, begun after them, asked from 5
    assert (seq.suspected, seq.resume_from) == (False, 8)


def test_a_suspect_far_below_or_from_a_renumbering_agent_is_forgotten() -> None:
    seq = ServerSequence()
    for n in range(1, REMEMBERED + 10):
        seq.accept("a", -n)
    assert seq.suspect(-5) is False  # far below the window: taken as seen
    assert seq.suspect(-(REMEMBERED + 20)) is True
    assert seq.accept("b", -1) is True  # b numbers from scratch: the hint was a's
    assert (seq.suspected, seq.resume_from) == (False, 1)


def test_a_suspected_envelope_that_arrives_after_all_is_no_longer_asked_for() -> None:
    seq = ServerSequence()
    for n in (1, 2, 3):
        seq.accept("a", -n)
    seq.asking()
    assert seq.suspect(-5) is True
    assert (seq.suspected, seq.resume_from) == (True, 3)
    seq.accept("a", -4)
    assert seq.suspected is True
    seq.accept("a", -5)  # named, through the answer of the resume under way
    assert (seq.suspected, seq.resume_from) == (False, 5)
