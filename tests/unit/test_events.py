"""The node's events: the receive path's fast constructors make the very same objects."""

from __future__ import annotations

import uuid

import attrs
import pytest

from trizre import Shout, Whisper
from trizre.sansio._events import new_shout, new_whisper

PEER = uuid.UUID(int=7)


def test_the_fast_constructors_cover_every_field() -> None:
    """A field added to Whisper or Shout must be added to its fast constructor too."""
    assert [f.name for f in attrs.fields(Whisper)] == ["peer", "name", "frames"]
    assert [f.name for f in attrs.fields(Shout)] == ["peer", "name", "group", "frames"]


def test_new_whisper_is_a_whisper() -> None:
    fast, slow = new_whisper(PEER, "bob", (b"a", b"b")), Whisper(PEER, "bob", (b"a", b"b"))
    assert type(fast) is Whisper
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert (fast.peer, fast.name, fast.frames) == (PEER, "bob", (b"a", b"b"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.name = "eve"  # type: ignore[misc]


def test_new_shout_is_a_shout() -> None:
    fast, slow = new_shout(PEER, "bob", "chat", ()), Shout(PEER, "bob", "chat", ())
    assert type(fast) is Shout
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert (fast.peer, fast.name, fast.group, fast.frames) == (PEER, "bob", "chat", ())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.group = "other"  # type: ignore[misc]
    match fast:  # what the monitor does
        case Shout(peer=peer, group=group):
            assert (peer, group) == (PEER, "chat")
        case _:
            raise AssertionError("a fast Shout did not match its class pattern")
