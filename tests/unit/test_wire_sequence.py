"""uint16 sequence-number arithmetic (wraps 65535 -> 0, HELLO is 1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trizre.wire import (
    HELLO_SEQUENCE,
    INITIAL_SEQUENCE,
    SEQUENCE_MODULUS,
    is_next,
    next_sequence,
    sequence_distance,
)

DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=500)
sequences = st.integers(0, 65535)


def test_constants() -> None:
    assert SEQUENCE_MODULUS == 65536
    assert INITIAL_SEQUENCE == 0
    assert HELLO_SEQUENCE == 1
    assert next_sequence(INITIAL_SEQUENCE) == HELLO_SEQUENCE
    assert is_next(INITIAL_SEQUENCE, HELLO_SEQUENCE)


@pytest.mark.parametrize(
    ("seq", "expected"), [(0, 1), (1, 2), (254, 255), (255, 256), (65534, 65535), (65535, 0)]
)
def test_next_sequence(seq: int, expected: int) -> None:
    assert next_sequence(seq) == expected


def test_is_next_wraps() -> None:
    assert is_next(65535, 0)
    assert is_next(0, 1)
    assert not is_next(65535, 1)  # gap across the wrap
    assert not is_next(65535, 65535)  # repeat
    assert not is_next(0, 65536 % 65536)  # repeat of 0
    assert not is_next(5, 4)  # out of order
    assert not is_next(5, 7)  # gap


def test_distance() -> None:
    assert sequence_distance(1, 2) == 1
    assert sequence_distance(65535, 0) == 1
    assert sequence_distance(65534, 1) == 3
    assert sequence_distance(7, 7) == 0
    assert sequence_distance(7, 6) == 65535


def test_a_long_stream_wraps_cleanly() -> None:
    sent = INITIAL_SEQUENCE
    seen = INITIAL_SEQUENCE
    for _ in range(3 * SEQUENCE_MODULUS + 5):
        sent = next_sequence(sent)
        assert is_next(seen, sent)
        seen = sent
    assert seen == 5


@pytest.mark.parametrize("bad", [-1, 65536, 1.0, None, True, "1"])
def test_bad_inputs(bad: object) -> None:
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        next_sequence(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        is_next(bad, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        is_next(1, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"0\.\.65535"):
        sequence_distance(bad, 1)  # type: ignore[arg-type]


@DETERMINISTIC
@given(last=sequences, received=sequences)
def test_is_next_iff_distance_one(last: int, received: int) -> None:
    assert is_next(last, received) == (sequence_distance(last, received) == 1)
    assert is_next(last, next_sequence(last))
    assert 0 <= next_sequence(last) < SEQUENCE_MODULUS
    assert sequence_distance(last, received) + sequence_distance(received, last) in (
        0,
        SEQUENCE_MODULUS,
    )
