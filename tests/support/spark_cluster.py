"""A real Spark standalone cluster for the tests: one master and N one-core workers on loopback.

Started from pyspark's own jars with ``bin/spark-class`` (the Master and
Worker main classes), each process with a parent-death signal so nothing
outlives the test run. A worker can be killed with SIGKILL and started again,
as a host that fails and comes back. Executors run the Python that the
driver names (``PYSPARK_PYTHON``): the same virtualenv on every worker, one
of the supported ways of giving executors Floe's code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional

import pyspark

from service.local_kafka import _die_with_parent, free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent


class SparkClusterError(RuntimeError):
    """The cluster did not come up; the message carries the tail of a log."""


class SparkCluster:
    """``with SparkCluster(dir, workers=2) as cluster: cluster.master_url``."""

    def __init__(self, work_dir: Path, workers: int = 2, worker_memory: str = "2g",
                 startup_timeout_s: float = 90.0) -> None:
        self.work_dir = Path(work_dir)
        self.worker_count = workers
        self.worker_memory = worker_memory
        self.startup_timeout_s = startup_timeout_s
        self.port = self.ui_port = 0
        self._master: Optional[subprocess.Popen[bytes]] = None
        self._workers: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def worker_dir(self, index: int) -> Path:
        """Where worker ``index`` keeps its executors' work directories and logs."""
        return self.work_dir / f"worker-{index}"

    def __enter__(self) -> "SparkCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "SparkCluster":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self._master = self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        try:
            self._wait(lambda state: True, "the master")
            for index in range(self.worker_count):
                self.start_worker(index)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, index: int) -> None:
        """Start worker ``index`` (again) and wait until the master counts it alive."""
        self.worker_dir(index).mkdir(parents=True, exist_ok=True)
        alive_before = self.alive_workers()
        self._workers[index] = self._launch(
            f"worker-{index}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
            "--memory", self.worker_memory, "--webui-port", str(free_port()),
            "--work-dir", str(self.worker_dir(index)), self.master_url)
        self._wait(lambda state: _alive(state) > alive_before, f"worker {index}")

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index``, as a host that dies; its executors notice and exit. Returns once the
        master counts it dead (it notices the lost connection)."""
        alive_before = self.alive_workers()
        proc = self._workers.pop(index)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self._wait(lambda state: _alive(state) < alive_before, f"the master to count worker {index} dead")

    def alive_workers(self) -> int:
        return _alive(self.state())

    def state(self) -> dict:
        """The master's JSON status page: workers, applications, cores in use."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        """Workers first, then the master: SIGTERM, then SIGKILL after 20 s."""
        for proc in [*self._workers.values(), self._master]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [*self._workers.values(), self._master]:
            if proc is None:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        self._workers.clear()
        self._master = None

    def _launch(self, name: str, main_class: str, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(self.work_dir),
               "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_MEMORY": "256m",
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost",
               "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "")}  # C1 alone, as the tests' drivers
        with open(self.work_dir / f"{name}.log", "ab") as out:
            return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main_class, *args], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_die_with_parent)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._master is None or self._master.poll() is not None:
                raise SparkClusterError(f"the Spark master exited:\n{self._tail('master')}")
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise SparkClusterError(f"{what} did not come up within {self.startup_timeout_s}s:\n{self._tail('master')}")

    def _tail(self, name: str, lines: int = 30) -> str:
        path = self.work_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def _alive(state: dict) -> int:
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


_TASK_STARTED = re.compile(r"Running task [^(]*\(TID (\d+)\)")
_TASK_ENDED = re.compile(r"(?:Finished|Exception in|killed) task [^(]*\(TID (\d+)\)")


def running_tasks(cluster: SparkCluster, app_name: str) -> dict[int, set[int]]:
    """Per worker, the task ids that the executors of the applications named ``app_name`` have started and
    not yet ended (finished, failed or killed), from the executors' own logs."""
    state = cluster.state()
    apps = [a["id"] for a in state.get("activeapps", []) if a["name"] == app_name]
    running: dict[int, set[int]] = {}
    for index in range(cluster.worker_count):
        logs = [stderr.read_text(errors="replace") for app in apps
                for stderr in cluster.worker_dir(index).glob(f"{app}/*/stderr")]
        started = {int(tid) for text in logs for tid in _TASK_STARTED.findall(text)}
        ended = {int(tid) for text in logs for tid in _TASK_ENDED.findall(text)}
        running[index] = started - ended
    return running


def app_task_counts(cluster: SparkCluster, app_name: str) -> dict[int, int]:
    """Per worker, how many tasks the executors of the applications named ``app_name`` ran,
    counted from the executors' own logs (``Running task`` lines in each executor's stderr)."""
    state = cluster.state()
    apps = [a["id"] for a in [*state.get("activeapps", []), *state.get("completedapps", [])] if a["name"] == app_name]
    return {index: sum(stderr.read_text(errors="replace").count("Running task")
                       for app in apps for stderr in cluster.worker_dir(index).glob(f"{app}/*/stderr"))
            for index in range(cluster.worker_count)}
