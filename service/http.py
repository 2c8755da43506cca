"""The operations HTTP endpoint of a Floe process: ``/metrics``, ``/healthz``, ``/readyz``.

Kubernetes probes and Prometheus scrapes must be answered while the component
is busy in a long micro-batch or compaction run, so the server runs on its own
daemon threads (stdlib ``ThreadingHTTPServer``), one per request.

- ``/healthz``: the process is alive and serving; always 200. A stuck
  component is a readiness matter, not a reason to kill the pod mid-commit.
- ``/readyz``: 200 only when at least one readiness check is registered and
  every registered check passes; otherwise 503. The JSON body names each
  check's state and reason, so ``kubectl describe`` and humans see *why*.
- ``/metrics``: Prometheus exposition of the given registry (OpenMetrics when
  the scraper asks for it).
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from runtime.logging import redact_text, summarize_error

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], tuple[bool, str]]
"""Returns (ok, reason). It must be quick: a probe waits for it."""

_JSON = "application/json"
_POLL_S = 0.1  # how soon stop() takes effect; the idle thread wakes this often


class PortInUse(OSError):
    """The ops server cannot bind its port: another process holds it."""

    def __init__(self, setting: str, host: str, port: int) -> None:
        super().__init__(
            errno.EADDRINUSE,
            f"{setting} {port} is already in use on {host} (another Floe process?): "
            f"stop that process, or set {setting} to a free port",
        )
        self.setting, self.host, self.port = setting, host, port

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass(frozen=True)
class CheckResult:
    """One readiness check's outcome, as shown in the ``/readyz`` body."""

    name: str
    ok: bool
    reason: str


class ReadinessChecks:
    """Named readiness checks; thread-safe, because probes run on server threads."""

    def __init__(self) -> None:
        self._checks: dict[str, ReadinessCheck] = {}
        self._lock = threading.Lock()

    def add(self, name: str, check: ReadinessCheck) -> None:
        """Register ``check`` under ``name``; a second check with the same name is an error."""
        with self._lock:
            if name in self._checks:
                raise ValueError(f"readiness check {name!r} is already registered")
            self._checks[name] = check

    def remove(self, name: str) -> None:
        with self._lock:
            self._checks.pop(name, None)

    def run(self) -> list[CheckResult]:
        """Run every check; a check that raises counts as failed, with the error as reason."""
        with self._lock:
            checks = list(self._checks.items())
        return [_run_one(name, check) for name, check in checks]


def _run_one(name: str, check: ReadinessCheck) -> CheckResult:
    try:
        ok, reason = check()
    except Exception as exc:  # noqa: BLE001 - a broken check means "not ready", never a 500
        log.warning("readiness check failed with an error", extra={"check": name, "error": repr(exc)})
        return CheckResult(name, False, redact_text(f"check raised {type(exc).__name__}: {exc}"))
    return CheckResult(name, bool(ok), redact_text(str(reason)))


def readiness_body(results: list[CheckResult]) -> tuple[bool, dict[str, Any]]:
    """Whether the process is ready, and the ``/readyz`` JSON body."""
    ready = bool(results) and all(r.ok for r in results)
    body: dict[str, Any] = {
        "ready": ready,
        "checks": {r.name: {"ok": r.ok, "reason": r.reason} for r in results},
    }
    if not results:
        body["reason"] = "no readiness checks registered yet"
    return ready, body


class OpsServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free port).

    Use :meth:`start` and :meth:`stop`, or a ``with`` block.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        registry: CollectorRegistry = REGISTRY,
        checks: ReadinessChecks | None = None,
        setting: str = "http port",
    ) -> None:
        """``setting`` names the configuration key of the port, for the message when it is taken."""
        self.setting = setting
        self.host = host
        self.requested_port = port
        self.registry = registry
        self.checks = checks or ReadinessChecks()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        self.checks.add(name, check)

    @property
    def port(self) -> int:
        """The bound port; only known after :meth:`start`."""
        if self._server is None:
            raise RuntimeError("the ops server is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        """Bind and serve on a daemon thread; returns once the socket listens."""
        if self._server is not None:
            raise RuntimeError("the ops server is already started")
        try:
            server = _Server((self.host, self.requested_port), _handler_class(self))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise PortInUse(self.setting, self.host, self.requested_port) from None
            raise
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": _POLL_S}, name="floe-ops-http", daemon=True
        )
        self._thread.start()
        log.info("ops http server listening", extra={"host": self.host, "port": self.port})
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the socket; safe to call twice."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line instead of socketserver's traceback on stderr (the traceback only at DEBUG);
        a scraper or probe that hangs up mid-answer is routine, and logged at DEBUG only."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError)):
            log.debug("an HTTP client went away mid-answer", extra={"client": str(client_address)})
            return
        log.error(
            "answering an HTTP request failed: %s",
            summarize_error(error) if error else "unknown",
            extra={"client": str(client_address)},
            exc_info=error if log.isEnabledFor(logging.DEBUG) else None,
        )


def _handler_class(ops: OpsServer) -> type[BaseHTTPRequestHandler]:
    """A request handler bound to ``ops`` (the stdlib server builds one handler per request)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "floe"
        sys_version = ""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            routes = {"/metrics": self._metrics, "/healthz": self._healthz, "/readyz": self._readyz}
            route = routes.get(path)
            if route is None:
                self._send(404, _JSON, _json({"error": f"no such path {path!r}", "paths": sorted(routes)}))
                return
            route()

        def _metrics(self) -> None:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, content_type, encoder(ops.registry))

        def _healthz(self) -> None:
            self._send(200, _JSON, _json({"status": "alive"}))

        def _readyz(self) -> None:
            ready, body = readiness_body(ops.checks.run())
            self._send(200 if ready else 503, _JSON, _json(body))

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("ops http request: " + format, *args)

    return Handler


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, sort_keys=True) + "\n").encode()
