"""The audit on a real Spark standalone cluster gives what local mode gives.

A master and one worker are started from the installed pyspark's own
``spark-class``, both on 127.0.0.1 (``SPARK_LOCAL_IP``; nothing listens
or talks elsewhere), and stopped at the end whatever happens.  The same
trace set, holding every kind of flagged request, is audited by
``python -m trizre.audit`` in local mode and with ``--master
spark://127.0.0.1:PORT``; the summaries must be equal but for timings and
the master's name.  Skipped without pyspark or Java, as the other audit
tests.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.support.spark import require_java

JAVA = require_java()

from benchmarks.spark_cluster import spark_env, standalone_cluster  # noqa: E402
from tests.support.audit_requests import request_cases  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the cluster's logs and its worker's ``work`` directory go."""
    return tmp_path_factory.mktemp("spark-cluster")


@pytest.fixture(scope="module")
def cluster(cluster_logs: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a running master with one registered worker."""
    with standalone_cluster(cluster_logs, JAVA.path) as url:
        yield url


def _audit(traces: Path, out: Path, *master: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "trizre.audit", str(traces), "--out", str(out), "--quiet", *master],
        env=spark_env(JAVA.path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the cases hold flags
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The verdict: everything but how long it took and where it ran."""
    audit = dict(summary)
    run = audit.pop("audit")
    audit.pop("timings", None)
    audit["exit_code"] = run["exit_code"]
    return audit


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ; floats may differ in their last bits.

    A mean is a sum over partitions, and the cluster partitions otherwise
    than local mode: the order of a floating-point sum is not fixed.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{where}[{i}]")
        ]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else [f"{where}: {a} != {b}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def test_a_standalone_cluster_gives_the_local_verdict(
    cluster: str, cluster_logs: Path, tmp_path: Path
) -> None:
    traces = request_cases().write(tmp_path / "traces")
    local = _audit(traces, tmp_path / "local")
    remote = _audit(traces, tmp_path / "cluster", "--master", cluster)
    # The executors kept their files beside the logs, not in the installed pyspark.
    assert [app.name[:4] for app in (cluster_logs / "work").iterdir()] == ["app-"]
    assert remote["audit"]["master"] == cluster
    assert local["audit"]["master"].startswith("local")
    assert _differences(_comparable(remote), _comparable(local)) == []
    assert _comparable(local)["exit_code"] == 1
