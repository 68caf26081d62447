"""What Titanic holds in memory of its store: the dispatch queue, the latest answers (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trizre.patterns._titanic_memory import Row, _Answers, _DispatchQueue


def rows(*ids: str) -> list[Row]:
    return [(i, "echo", (i.encode(),)) for i in ids]


def ids(taken: list[Row]) -> list[str]:
    return [row[0] for row in taken]


def started(capacity: int, on_disk: list[Row] | None = None) -> _DispatchQueue:
    """A queue after its first read (at start) found ``on_disk``."""
    queue = _DispatchQueue(capacity)
    assert queue.need_read  # at start the disk may hold anything
    limit = queue.read_begins()
    found = (on_disk or [])[:limit]
    queue.read_ends(found)
    return queue


def test_commits_are_handed_over_and_the_disk_is_read_once() -> None:
    queue = started(4)
    for n in range(10):
        assert not queue.need_read
        queue.stored(rows(f"a{n}", f"b{n}"))
        assert ids(queue.take(5)) == [f"a{n}", f"b{n}"]
        queue.finished(f"a{n}")
        queue.finished(f"b{n}")
    assert queue.reads == 1 and not queue.need_read


def test_the_oldest_go_first_and_only_as_many_as_asked() -> None:
    queue = started(4)
    queue.stored(rows("a", "b", "c"))
    assert ids(queue.take(2)) == ["a", "b"] and queue.in_flight == {"a", "b"}
    assert len(queue) == 1 and ids(queue.take(0)) == []
    assert ids(queue.take(2)) == ["c"]


def test_more_than_fit_are_left_on_disk_and_read_back_oldest_first_once_memory_is_empty() -> None:
    queue = started(2)
    queue.stored(rows("a", "b"))
    queue.stored(rows("c"))  # does not fit: memory no longer holds everything pending
    assert not queue.need_read  # a and b first
    assert ids(queue.take(1)) == ["a"]
    queue.stored(rows("d"))  # memory incomplete: not handed over, even though it would fit
    assert ids(queue.take(5)) == ["b"]
    assert queue.need_read
    limit = queue.read_begins()
    # Room in memory, the two in flight (among the oldest pending), one to tell if more wait.
    assert limit == 2 + 2 + 1
    queue.read_ends(rows("a", "b", "c", "d"))  # the disk: oldest first, in flight too
    assert ids(queue.take(5)) == ["c", "d"]
    # The read was whole: commits are handed over again.
    queue.stored(rows("e"))
    assert ids(queue.take(5)) == ["e"] and queue.reads == 2


def test_a_read_that_filled_its_limit_leaves_memory_incomplete() -> None:
    queue = started(2, rows("a", "b", "c"))  # limit 3, all found: c (and more?) wait on disk
    assert ids(queue.take(5)) == ["a", "b"]
    queue.stored(rows("d"))  # not handed over: c is older
    assert queue.need_read
    queue.read_begins()
    queue.read_ends(rows("a", "b", "c", "d"))
    assert ids(queue.take(5)) == ["c", "d"]


def test_a_commit_during_a_read_is_found_by_the_next_read() -> None:
    queue = started(4)
    queue.stored(rows("a", "b", "c", "d", "e"))  # too many: incomplete
    assert ids(queue.take(5)) == []  # nothing: memory was not given them
    limit = queue.read_begins()
    assert not queue.need_read  # one read at a time
    queue.stored(rows("f"))  # committed while the read runs: the read may not have seen it
    queue.read_ends(rows("a", "b", "c", "d", "e")[:limit])
    assert limit == 5 and ids(queue.take(9)) == ["a", "b", "c", "d"]
    assert queue.need_read  # e was left out, and f came during the read
    queue.read_begins()
    queue.read_ends(rows("a", "b", "c", "d", "e", "f"))
    assert ids(queue.take(9)) == ["e", "f"]
    assert not queue.need_read


def test_what_finished_or_closed_during_a_read_is_not_taken_again() -> None:
    queue = started(4)
    queue.stored(rows("a", "b"))
    assert ids(queue.take(2)) == ["a", "b"]
    queue.stored(rows(*"cdefg"))  # too many: incomplete, read once memory is empty
    queue.read_begins()
    queue.finished("a")  # answered after the read found it pending
    queue.closed(["c"])  # forgotten after the read found it
    queue.read_ends(rows(*"abcdefg"))
    assert ids(queue.take(9)) == ["d", "e", "f", "g"]
    assert queue.in_flight == {"b", "d", "e", "f", "g"}


def test_a_full_read_leaves_memory_incomplete_though_a_close_during_it_made_room() -> None:
    """Found by the model test below: the read's rows all fitted only because one went."""
    queue = _DispatchQueue(1)
    queue.stored(rows("a", "b", "c"))  # at start: incomplete
    limit = queue.read_begins()
    assert limit == 2
    found = rows("a", "b")  # the oldest 2; c is on disk beyond them
    queue.closed(["a"])  # committed while the read ran
    queue.read_ends(found)
    assert ids(queue.take(1)) == ["b"]
    assert queue.need_read  # c: read it
    queue.read_ends(rows("c")[: queue.read_begins()])
    assert ids(queue.take(1)) == ["c"]


def test_a_closed_request_is_not_sent() -> None:
    queue = started(4)
    queue.stored(rows("a", "b", "c"))
    queue.closed(["b", "unknown"])
    assert ids(queue.take(9)) == ["a", "c"]


def test_a_commit_during_a_whole_read_is_not_lost() -> None:
    """The read found everything it was asked for and less, but not what came meanwhile."""
    queue = _DispatchQueue(4)
    queue.read_begins()
    queue.stored(rows("a"))  # committed after the read took its rows
    queue.read_ends([])
    assert queue.need_read and ids(queue.take(9)) == []
    queue.read_begins()
    queue.read_ends(rows("a"))
    assert ids(queue.take(9)) == ["a"] and not queue.need_read


def test_a_queue_needs_room() -> None:
    with pytest.raises(ValueError, match="capacity"):
        _DispatchQueue(0)


def test_rows_that_do_not_fit_keep_memory_incomplete_even_when_the_read_was_short() -> None:
    """One in flight was answered on disk before the read: the margin it left is not room."""
    queue = started(2)
    queue.stored(rows("a"))
    assert ids(queue.take(1)) == ["a"]
    queue.stored(rows(*"bcd"))  # too many: incomplete
    queue.read_begins()  # 2 + 1 in flight + 1
    queue.read_ends(rows(*"bcd"))  # a, answered already, is not among them
    assert ids(queue.take(9)) == ["b", "c"]
    assert queue.need_read  # d did not fit


# The latest answers.


def test_answers_are_held_until_the_count_or_the_bytes_are_exceeded_oldest_first() -> None:
    answers = _Answers(max_count=3, max_bytes=10)
    answers.add("a", 200, b"1234")
    answers.add("b", 500, b"")
    answers.add("c", 200, b"12")
    assert answers.get("a") == (200, b"1234") and answers.get("b") == (500, b"")
    answers.add("d", 200, b"1")  # a fourth: a goes
    assert answers.get("a") is None and len(answers) == 3 and answers.bytes == 3
    answers.add("e", 200, b"123456789")  # 12 bytes: b and c go, 10 left
    assert [answers.get(i) is not None for i in "bcde"] == [False, False, True, True]
    assert answers.bytes == 10
    answers.add("f", 200, b"x" * 11)  # larger than all it may hold: not held, nothing dropped
    assert answers.get("f") is None and len(answers) == 2


def test_an_answer_is_not_held_once_its_close_is_queued() -> None:
    answers = _Answers(max_count=9, max_bytes=99)
    answers.add("a", 200, b"r")
    answers.closing("a")  # queued: the disk answers from now on
    assert answers.get("a") is None
    answers.add("a", 200, b"r")  # committed before the close: not taken in
    assert answers.get("a") is None
    answers.closing("a")  # a second close of it, under way with the first
    answers.close_done("a")
    answers.add("a", 200, b"r")
    assert answers.get("a") is None
    answers.close_done("a")  # both over (failed, say): answers are taken in again
    answers.add("a", 200, b"r")
    assert answers.get("a") == (200, b"r")
    answers.forget(["a", "unknown"])  # a close committed
    assert answers.get("a") is None and answers.bytes == 0


def test_answers_need_room() -> None:
    with pytest.raises(ValueError, match="max_count"):
        _Answers(max_count=0, max_bytes=1)
    with pytest.raises(ValueError, match="max_bytes"):
        _Answers(max_count=1, max_bytes=-1)


# The dispatch queue against a model of the disk, in any order the run allows.


class Disk:
    """The store as the queue sees it: pending requests in commit order."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.made = 0

    def store(self, n: int) -> list[Row]:
        new = [f"r{self.made + i}" for i in range(n)]
        self.made += n
        self.pending += new
        return rows(*new)

    def read(self, limit: int) -> list[Row]:
        return rows(*self.pending[:limit])


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 6),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["store", "take", "finish", "close", "read", "snapshot"]),
            st.integers(0, 9),
        ),
        max_size=60,
    ),
)
def test_every_request_stored_is_sent_once_whatever_the_order(
    capacity: int, steps: list[tuple[str, int]]
) -> None:
    """Commits, answers and closes land between a read's start, its look at the
    disk and its end, as they can in Titanic (each commit's callback runs
    before a read that began after it ends).  Memory never holds more than
    ``capacity``; once the disk is drained, every request stored and not
    closed was sent, none twice."""
    queue, disk = _DispatchQueue(capacity), Disk()
    sent: list[str] = []
    closed: set[str] = set()
    read: list[Row] | None = None  # a read's look at the disk, while it runs
    reading = False

    def finish(titanic_id: str) -> None:
        disk.pending.remove(titanic_id)  # its answer committed
        queue.finished(titanic_id)

    for kind, n in steps:
        if kind == "store":
            queue.stored(disk.store(n % 4 + 1))
        elif kind == "take" and not reading:
            if queue.need_read:
                reading, limit = True, queue.read_begins()
            else:
                sent += ids(queue.take(n))
        elif kind == "snapshot" and reading and read is None:
            read = disk.read(limit)
        elif kind == "read" and reading and read is not None:
            queue.read_ends(read)
            reading, read = False, None
        elif kind == "finish" and queue.in_flight:
            finish(sorted(queue.in_flight)[n % len(queue.in_flight)])
        elif kind == "close" and disk.pending:
            titanic_id = disk.pending[n % len(disk.pending)]
            if titanic_id not in queue.in_flight:  # a close of one in flight: it finishes
                disk.pending.remove(titanic_id)
                closed.add(titanic_id)
                queue.closed([titanic_id])
        assert len(queue) <= capacity
    if reading:
        queue.read_ends(read if read is not None else disk.read(limit))
    for _ in range(disk.made + 2):  # drain: each round sends or reads
        for titanic_id in list(queue.in_flight):
            finish(titanic_id)
        if queue.need_read:
            queue.read_ends(disk.read(queue.read_begins()))
        sent += ids(queue.take(capacity))
        assert len(queue) <= capacity
    assert not disk.pending and not queue.in_flight
    assert len(sent) == len(set(sent)), "a request sent twice"
    assert set(sent) == {f"r{i}" for i in range(disk.made)} - closed
