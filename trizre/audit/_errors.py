"""The root of the audit's errors (a module of its own: it needs no PySpark)."""

from __future__ import annotations

from .._errors import TrizreError

__all__ = ["AuditError"]


class AuditError(TrizreError):
    """Base class of the errors the audit raises (no usable Java, hidden trace files)."""
