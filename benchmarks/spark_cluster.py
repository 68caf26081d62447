"""A Spark standalone cluster on 127.0.0.1, started from the installed pyspark.

A master and one worker, from pyspark's own ``spark-class``, both bound to
127.0.0.1 (``SPARK_LOCAL_IP``; nothing listens or talks elsewhere), and
stopped on the way out whatever happens.  ``tests/system/test_audit_cluster.py``
checks the audit on it; ``make chaos`` gives it its verdict.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

LOOPBACK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost"}


def spark_env(java: str) -> dict[str, str]:
    """This process's environment, kept on loopback, with ``JAVA_HOME`` for *java*."""
    env = {**os.environ, **LOOPBACK_ENV}
    env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _alive_workers(ui_port: int) -> int:
    """Workers the master's web UI counts; 0 while it cannot say (not up, or
    answering with an empty or partial page as it starts)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as page:
            state = json.load(page)
    except (OSError, ValueError):
        return 0
    return int(state.get("aliveworkers", 0)) if isinstance(state, dict) else 0


@contextlib.contextmanager
def standalone_cluster(logs: Path, java: str, *, cores: int = 1) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a running master with one registered worker.

    ``logs`` receives ``master.log``, ``worker.log`` and the worker's
    ``work`` directory (its executors' files).  Raises
    ``RuntimeError`` (with the logs' tails) if the worker has not registered
    within 120 s or a JVM exits first.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    spark_class = Path(spec.submodule_search_locations[0]) / "bin" / "spark-class"
    logs.mkdir(parents=True, exist_ok=True)
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        with (logs / f"{name}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [str(spark_class), *args],
                    env=spark_env(java),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its JVM and children die together
                )
            )

    try:
        start(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui),
        )  # fmt: skip
        start(
            "worker", "org.apache.spark.deploy.worker.Worker", master_url,
            "--host", "127.0.0.1", "--cores", str(cores), "--memory", "1g",
            "--webui-port", str(worker_ui),
            # Its executors' directories: by default in the installed pyspark,
            # where they piled up and two clusters at once could meet.
            "--work-dir", str(logs / "work"),
        )  # fmt: skip
        deadline = time.monotonic() + 120  # two JVMs starting on a loaded machine
        while _alive_workers(ui) < 1:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(
                    "the standalone cluster did not start: "
                    + " | ".join(
                        (logs / f"{n}.log").read_text()[-2000:] for n in ("master", "worker")
                    )
                )
            time.sleep(0.5)  # polling another process's state
        yield master_url
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
