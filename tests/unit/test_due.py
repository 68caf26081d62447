"""The presence clock's schedule: each peer looked at when due, once, never late."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from trizre.sansio.node_core._due import Due


def test_items_come_out_when_due_earliest_first_each_once() -> None:
    due: Due[str, str] = Due()
    due.schedule("b", "B", 2.0)
    due.schedule("a", "A", 1.0)
    due.schedule("c", "C", 3.0)
    assert due.next() == 1.0
    assert due.pop(0.5) == []
    assert due.pop(2.0) == ["A", "B"]
    assert due.pop(2.0) == []  # handed out once, until scheduled again
    assert "a" not in due and "c" in due and len(due) == 1
    assert due.next() == 3.0


def test_a_new_time_replaces_the_old_one_earlier_or_later() -> None:
    due: Due[str, str] = Due()
    due.schedule("a", "A", 1.0)
    due.schedule("a", "A", 5.0)  # heard since: later
    assert due.pop(4.0) == []
    assert due.next() == 5.0
    due.schedule("a", "A", 2.0)  # earlier again: never late
    assert due.pop(2.0) == ["A"]
    assert due.pop(10.0) == []


def test_a_forgotten_key_is_never_handed_out() -> None:
    due: Due[str, str] = Due()
    due.schedule("a", "A", 1.0)
    due.forget("a")
    due.forget("never scheduled")
    assert due.next() == math.inf
    assert due.pop(10.0) == []
    assert len(due) == 0


def test_replaced_entries_do_not_pile_up() -> None:
    due: Due[int, int] = Due()
    for round_ in range(1000):
        for key in range(10):
            due.schedule(key, key, float(round_))  # pushed later and later, never popped
    assert len(due) == 10
    assert len(due._heap) <= 2 * 10 + 64


def test_settle_moves_the_early_entries_at_the_front_to_their_real_times() -> None:
    """Issue 28: entries made early (heard since) move together, handed out nothing,
    up to the first one that holds: it wakes the next pass, which goes on from it."""
    due: Due[str, str] = Due()
    real: dict[str, float | None] = {"a": 9.0, "b": 2.5, "c": 3.0, "d": 4.5, "e": None}
    due.schedule("a", "a", 1.0)  # early: really due at 9, past the horizon
    due.schedule("b", "b", 2.0)  # early: really 2.5, within it
    due.schedule("c", "c", 3.0)  # on time: the settle stops here
    due.schedule("d", "d", 4.0)  # early, but behind c: the next pass's
    due.schedule("e", "e", 4.8)  # not told (None): left as it is
    asked: list[str] = []

    def actual(item: str) -> float | None:
        asked.append(item)
        return real[item]

    due.settle(5.0, actual)
    assert asked == ["a", "b", "b"]  # b again at 2.5, where it holds: the stop
    assert due.next() == 2.5
    assert due.pop(3.0) == ["b", "c"]
    asked.clear()
    due.settle(5.0, actual)  # the pass at c's time
    assert asked == ["d", "d"]
    assert due.pop(4.8) == ["d", "e"]
    assert due.pop(9.0) == ["a"]
    assert len(due) == 0


def test_settle_skips_replaced_and_forgotten_entries() -> None:
    due: Due[str, str] = Due()
    due.schedule("a", "a", 1.0)
    due.schedule("a", "a", 3.0)  # the 1.0 entry is void
    due.schedule("b", "b", 2.0)
    due.forget("b")
    asked: list[str] = []
    due.settle(5.0, lambda item: asked.append(item) or 8.0)
    assert asked == ["a"]  # once: its one live entry, now past the horizon
    assert due.pop(7.0) == [] and due.pop(8.0) == ["a"]
    assert due.next() == math.inf


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["schedule", "forget", "pop", "settle"]),
            st.integers(0, 7),
            st.integers(0, 50),
        ),
        max_size=200,
    )
)
def test_it_agrees_with_a_plain_dict_of_times(steps: list[tuple[str, int, int]]) -> None:
    due: Due[int, int] = Due()
    model: dict[int, int] = {}
    for op, key, at in steps:
        if op == "schedule":
            due.schedule(key, key, float(at))
            model[key] = at
        elif op == "forget":
            due.forget(key)
            model.pop(key, None)
        elif op == "settle":
            # ``key`` 0: each is on time (nothing moves); else each due by ``at``
            # is really due past any ``at`` (all of them move, in one settle).
            shift = 0 if key == 0 else 100 + key
            due.settle(float(at), lambda k, shift=shift: float(model[k] + shift))
            for k, t in model.items():
                if t <= at:
                    model[k] = t + shift
        else:
            popped = [(model[k], k) for k in due.pop(float(at))]
            assert sorted(popped) == sorted((t, k) for k, t in model.items() if t <= at)
            assert [t for t, _k in popped] == sorted(t for t, _k in popped)  # earliest first
            for _t, k in popped:
                del model[k]
        assert due.next() == min(model.values(), default=math.inf)
        assert len(due) == len(model)
