"""Audit trizre traces with PySpark (the ``spark`` extra): ``python -m trizre.audit``.

Importing this package does not import pyspark; :func:`main` imports it once
the arguments and Java have been checked.  See docs/audit.md.
"""

from ._errors import AuditError
from ._java import JavaError, JavaInfo, find_java
from .cli import EXIT_FLAGGED, EXIT_NO_JAVA, EXIT_OK, EXIT_USAGE, build_session, main, run

__all__ = [
    "AuditError",
    "EXIT_FLAGGED",
    "EXIT_NO_JAVA",
    "EXIT_OK",
    "EXIT_USAGE",
    "JavaError",
    "JavaInfo",
    "build_session",
    "find_java",
    "main",
    "run",
]
