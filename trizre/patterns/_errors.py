"""The root of the patterns' errors, in a module of its own.

The pure modules (the Binary Star state machine, the envelope codec) raise
pattern errors too, without importing the Trio side of the patterns.
"""

from __future__ import annotations

from .._errors import TrizreError

__all__ = ["PatternError"]


class PatternError(TrizreError):
    """Base class of the errors the patterns raise (Binary Star's and Titanic's among them)."""
