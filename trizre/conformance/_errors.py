"""The root of the conformance suite's errors (a module of its own, imported by every part)."""

from __future__ import annotations

from .._errors import TrizreError

__all__ = ["ConformanceError"]


class ConformanceError(TrizreError):
    """Base class of the conformance suite's errors: a target that cannot run, an agent that broke
    its contract, and the verdicts a case raises (``Fail``, ``NotApplicable``)."""
