"""Client side of the Iceberg Java oracle (see ``oracle_worker``)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Optional, Sequence

import pyarrow as pa

from tests.support.oracle_worker import REPLY_PREFIX

REPO_ROOT = Path(__file__).resolve().parents[2]


class OracleError(RuntimeError):
    """The oracle's Spark raised; the message carries the Java/Python error."""


class IcebergOracle:
    """A long-lived oracle process; each request waits at most ``timeout_s``."""

    def __init__(self, work_dir: Path, timeout_s: float = 300.0, wrapper: Sequence[str] = ()) -> None:
        """``wrapper``: a command the worker runs under (e.g. ``unshare`` into a mount namespace of its own)."""
        self.work_dir = Path(work_dir)
        self.timeout_s = timeout_s
        self.wrapper = list(wrapper)
        self._proc: Optional[subprocess.Popen[str]] = None
        self.spark_version: Optional[str] = None

    def start(self) -> "IcebergOracle":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        self._stderr = open(self.work_dir / "oracle.stderr", "a")
        self._proc = subprocess.Popen(
            [*self.wrapper, sys.executable, "-m", "tests.support.oracle_worker"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self._replies: queue.Queue[Optional[dict[str, Any]]] = queue.Queue()
        threading.Thread(target=self._pump_replies, name="oracle-replies", daemon=True).start()
        self.spark_version = self._receive()["spark"]
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._stderr.close()

    def conf(self, **settings: str) -> None:
        self._request({"op": "conf", "settings": settings})

    def sql(self, query: str) -> pa.Table:
        """Runs SQL in the oracle's Spark and returns the result as Arrow."""
        out = self._out_path()
        self._request({"op": "sql", "query": query, "out": str(out)})
        return self._load(out)

    def execute(self, query: str) -> None:
        """Runs SQL for its effect only."""
        self._request({"op": "sql", "query": query, "out": None})

    def call(self, func: str, **kwargs: Any) -> Any:
        """Calls ``func(spark, **kwargs)`` ("module:function") in the oracle."""
        out = self._out_path()
        answer = self._request({"op": "call", "func": func, "kwargs": kwargs, "out": str(out)})
        return self._load(out) if "rows" in answer else answer.get("value")

    def _out_path(self) -> Path:
        return self.work_dir / f"result-{uuid.uuid4().hex}.arrow"

    @staticmethod
    def _load(path: Path) -> pa.Table:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
        path.unlink()
        return table

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._proc is None or self._proc.stdin is None:
            raise OracleError("oracle is not running")
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        return self._receive()

    def _pump_replies(self) -> None:
        """Reader thread: forwards the worker's reply lines to the queue."""
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(REPLY_PREFIX):
                self._replies.put(json.loads(line[len(REPLY_PREFIX):]))
        self._replies.put(None)

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                answer = self._replies.get(timeout=1.0)
            except queue.Empty:
                continue
            if answer is None:
                raise OracleError(f"oracle exited; see {self.work_dir}/oracle.stderr")
            if not answer.pop("ok"):
                raise OracleError(answer["error"] + "\n" + answer.get("traceback", ""))
            return answer
        raise OracleError(f"oracle gave no answer within {self.timeout_s}s")
