"""Whether the audit (pyspark on a Java runtime) can run here, asked the same way everywhere."""

from __future__ import annotations

import importlib.util

import pytest

from trizre.audit import _java

__all__ = ["require_java", "spark_missing"]


def spark_missing() -> str | None:
    """``None`` when the audit can run here (pyspark importable, a usable Java); else why not."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    try:
        _java.find_java()
    except _java.JavaError as exc:
        return f"no Java for the audit: {exc}"
    return None


def require_java() -> _java.JavaInfo:
    """The Java runtime Spark would use; without one, skip the calling test module."""
    try:
        return _java.find_java()
    except _java.JavaError as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"no usable Java: {exc}", allow_module_level=True)
