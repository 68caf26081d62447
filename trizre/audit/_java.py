"""Find the Java runtime that PySpark will launch, before launching it.

PySpark starts its JVM through ``spark-submit``, which runs
``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set and ``java`` from ``PATH``
otherwise.  :func:`find_java` follows the same rule, so a missing or too old
Java is reported with a clear message instead of a py4j stack trace.

No pyspark import here: this module must work when pyspark is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from ._errors import AuditError

MIN_MAJOR: Final = 17
"""The oldest Java that PySpark 4.x runs on."""

TESTED_MAJORS: Final = (17, 21)
"""The Java versions that Spark 4.x is built and tested against."""

INSTALL_HINT: Final = (
    "Install a Java 17 or 21 runtime, for example:\n"
    "  Debian/Ubuntu:  apt-get install openjdk-17-jre-headless\n"
    "  Fedora/RHEL:    dnf install java-17-openjdk-headless\n"
    "  macOS:          brew install openjdk@17\n"
    "then put `java` on PATH or set JAVA_HOME to its installation directory."
)

_VERSION_RE: Final = re.compile(r'version "(?P<version>[^"]+)"')


class JavaError(AuditError):
    """No usable Java: the message says what is wrong and how to fix it."""


@final
@dataclass(frozen=True)
class JavaInfo:
    """A Java runtime found on this machine."""

    path: str
    """The ``java`` executable PySpark will run."""
    version: str
    """The version string ``java -version`` printed, e.g. ``17.0.15``."""
    major: int
    """The feature release: 8 for ``1.8.0_392``, 17 for ``17.0.15``."""

    @property
    def tested(self) -> bool:
        """True for the versions Spark 4.x is tested against (17, 21)."""
        return self.major in TESTED_MAJORS


def parse_java_version(output: str) -> tuple[str, int]:
    """Return (version string, major) from the text of ``java -version``.

    >>> parse_java_version('openjdk version "17.0.15" 2025-04-15')
    ('17.0.15', 17)
    >>> parse_java_version('java version "1.8.0_392"')
    ('1.8.0_392', 8)

    Raises :class:`ValueError` when no version can be read.
    """
    match = _VERSION_RE.search(output)
    if match is None:
        raise ValueError(f"no version in {output[:200]!r}")
    version = match.group("version")
    parts = re.split(r"[._+-]", version)
    try:
        first = int(parts[0])
        major = int(parts[1]) if first == 1 and len(parts) > 1 else first
    except ValueError:
        raise ValueError(f"unreadable Java version {version!r}") from None
    return version, major


def _locate(env: Mapping[str, str]) -> str:
    java_home = env.get("JAVA_HOME", "")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise JavaError(
            f"JAVA_HOME is set to {java_home!r} but {candidate} is not an executable;"
            " Spark would fail to start.\n"
            "Unset JAVA_HOME to use `java` from PATH, or point it at a Java 17/21 installation.\n"
            + INSTALL_HINT
        )
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        raise JavaError(
            "Java was not found (JAVA_HOME is unset and no `java` on PATH);"
            " PySpark needs a Java runtime to run.\n" + INSTALL_HINT
        )
    return found


def find_java(env: Mapping[str, str] | None = None) -> JavaInfo:
    """Find the Java runtime Spark would use and check its version.

    *env* defaults to :data:`os.environ`.  Raises :class:`JavaError` when
    there is no Java, it cannot be run, or it is older than Java 17.  Newer
    untested versions (22, 25, ...) are accepted; see :attr:`JavaInfo.tested`.
    """
    if env is None:
        env = os.environ
    path = _locate(env)
    try:
        done = subprocess.run(
            [path, "-version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env=dict(env),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaError(f"could not run {path} -version: {exc}\n{INSTALL_HINT}") from exc
    try:
        version, major = parse_java_version(done.stderr + done.stdout)
    except ValueError as exc:
        raise JavaError(f"could not read the version of {path}: {exc}\n{INSTALL_HINT}") from exc
    if major < MIN_MAJOR:
        raise JavaError(
            f"{path} is Java {version} (major {major});"
            f" PySpark 4.x needs Java {MIN_MAJOR} or newer (17 or 21 tested).\n" + INSTALL_HINT
        )
    return JavaInfo(path=path, version=version, major=major)
