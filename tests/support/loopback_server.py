"""What the tests' JVM servers (S3Proxy, the REST catalog) share: launch with a parent-death signal,
wait until the server answers over HTTP, stop, and their log's tail for errors."""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping, Optional, Sequence

from service.local_kafka import _die_with_parent


class ServerStartError(RuntimeError):
    """A test server did not come up; the message carries the tail of its log."""


class LoopbackServer:
    """A server process the tests start; subclasses name it, its log and the URL that answers when up."""

    name = "server"
    log_name = "server.log"

    def __init__(self, work_dir: Path, startup_timeout_s: float = 60.0) -> None:
        self.work_dir = Path(work_dir)
        self.startup_timeout_s = startup_timeout_s
        self._proc: Optional[subprocess.Popen[bytes]] = None

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def ready_url(self) -> str:
        raise NotImplementedError

    def ready_context(self) -> Optional[ssl.SSLContext]:
        """How an ``https://`` ready URL is verified (a server on a CA of the test's own); None: the default."""
        return None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill ends it: connections reset, nothing flushed."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    def _launch(self, command: Sequence[str], env: Optional[Mapping[str, str]] = None) -> None:
        """Start ``command`` (dying with this process) and wait until it answers; stopped again on failure."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        with open(self.work_dir / self.log_name, "ab") as out:
            self._proc = subprocess.Popen(list(command), env=None if env is None else dict(env), stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          preexec_fn=_die_with_parent)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """Until the ready URL answers at all (an HTTP error answer counts: the server is up)."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise ServerStartError(f"{self.name} exited during start-up:\n{self._log_tail()}")
            try:
                urllib.request.urlopen(self.ready_url(), timeout=2, context=self.ready_context()).close()
                return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.3)
        raise ServerStartError(f"{self.name} did not answer within {self.startup_timeout_s}s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 40) -> str:
        path = self.work_dir / self.log_name
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
