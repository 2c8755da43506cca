"""service/http.py and service/metrics.py: real HTTP requests to a server on loopback."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Optional

import pytest
from prometheus_client import CollectorRegistry

from service.http import OpsServer
from service.metrics import floe_version, register_service_metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def get(url: str, accept: Optional[str] = None, timeout: float = 5.0) -> tuple[int, str, str]:
    """(status, content type, body) of a GET; HTTP errors are answers too."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[OpsServer]:
    with OpsServer("127.0.0.1", 0, registry) as ops:
        yield ops


def test_healthz_answers_while_alive(server: OpsServer) -> None:
    assert server.port > 0
    status, content_type, body = get(f"{server.url}/healthz")
    assert (status, content_type, json.loads(body)) == (200, "application/json", {"status": "alive"})


def test_readyz_needs_a_registered_check(server: OpsServer) -> None:
    status, _, body = get(f"{server.url}/readyz")
    assert status == 503
    assert json.loads(body) == {"ready": False, "checks": {}, "reason": "no readiness checks registered yet"}


def test_readyz_is_ready_only_when_every_check_passes(server: OpsServer) -> None:
    state = {"ingest": (True, "query active, last commit 12s ago")}
    server.add_readiness_check("ingest", lambda: state["ingest"])
    server.add_readiness_check("compact", lambda: (True, "idle"))
    status, _, body = get(f"{server.url}/readyz")
    assert status == 200
    assert json.loads(body) == {
        "ready": True,
        "checks": {
            "ingest": {"ok": True, "reason": "query active, last commit 12s ago"},
            "compact": {"ok": True, "reason": "idle"},
        },
    }
    state["ingest"] = (False, "last commit 20m ago, older than 15m")
    status, _, body = get(f"{server.url}/readyz")
    assert status == 503
    assert json.loads(body)["checks"]["ingest"] == {"ok": False, "reason": "last commit 20m ago, older than 15m"}
    assert json.loads(body)["checks"]["compact"]["ok"] is True


def test_a_check_that_raises_is_not_ready_and_leaks_no_secret(server: OpsServer) -> None:
    def broken() -> tuple[bool, str]:
        raise ConnectionError("cannot reach postgresql://floe:hunter2@db/floe")

    server.add_readiness_check("catalog", broken)
    status, _, body = get(f"{server.url}/readyz")
    assert status == 503
    assert json.loads(body)["checks"]["catalog"] == {
        "ok": False,
        "reason": "check raised ConnectionError: cannot reach postgresql://floe:***@db/floe",
    }
    with pytest.raises(ValueError, match="already registered"):
        server.add_readiness_check("catalog", lambda: (True, ""))


def test_unknown_path_is_404(server: OpsServer) -> None:
    status, _, body = get(f"{server.url}/nope?x=1")
    assert status == 404 and json.loads(body)["paths"] == ["/healthz", "/metrics", "/readyz"]


def test_metrics_expose_the_service_metrics(server: OpsServer, registry: CollectorRegistry) -> None:
    metrics = register_service_metrics(registry, version="1.2.3")
    metrics.mark_up("ingest")
    metrics.mark_down("compact")
    status, content_type, body = get(f"{server.url}/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    assert 'floe_build_info{version="1.2.3"} 1.0' in body
    assert 'floe_up{component="ingest"} 1.0' in body
    assert 'floe_up{component="compact"} 0.0' in body
    status, content_type, body = get(f"{server.url}/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text") and body.endswith("# EOF\n")
    with pytest.raises(ValueError, match="component: expected one of ingest, compact, got 'spark'"):
        metrics.mark_up("spark")  # type: ignore[arg-type]


def test_build_info_defaults_to_the_installed_version(registry: CollectorRegistry) -> None:
    register_service_metrics(registry)
    assert registry.get_sample_value("floe_build_info", {"version": floe_version()}) == 1.0
    assert floe_version() != ""


def test_service_metrics_match_the_contract(registry: CollectorRegistry) -> None:
    """Every metric of service/metrics.py is in docs/metrics.md's Service table, same type and labels."""
    section = DOC.read_text().split("## Service", 1)[1]
    documented = {
        m.group(1): (m.group(2), tuple(label.strip() for label in m.group(3).split(",")))
        for m in re.finditer(r"^\| `(\w+)` \| (\w+) \| ([\w, ]+) \|", section, re.MULTILINE)
    }
    metrics = register_service_metrics(registry, version="x")
    metrics.mark_up("ingest")
    exported = {}
    for family in registry.collect():
        labels = {name for sample in family.samples for name in sample.labels}
        exported[family.name] = (family.type, tuple(sorted(labels)))
    assert exported == {name: (kind, tuple(sorted(labels))) for name, (kind, labels) in documented.items()}


def test_a_slow_readiness_check_does_not_block_liveness(server: OpsServer) -> None:
    release = threading.Event()
    server.add_readiness_check("slow", lambda: (release.wait(10), "released"))
    answers: list[int] = []
    waiter = threading.Thread(target=lambda: answers.append(get(f"{server.url}/readyz", timeout=15)[0]))
    waiter.start()
    try:
        time.sleep(0.2)
        started = time.monotonic()
        assert get(f"{server.url}/healthz")[0] == 200
        assert time.monotonic() - started < 2.0
        assert answers == []  # the readiness probe is still waiting
    finally:
        release.set()
        waiter.join(15)
    assert answers == [200]


def test_stop_closes_the_port_and_is_idempotent(registry: CollectorRegistry) -> None:
    ops = OpsServer("127.0.0.1", 0, registry).start()
    url = ops.url
    assert get(f"{url}/healthz")[0] == 200
    ops.stop()
    ops.stop()
    with pytest.raises(urllib.error.URLError):
        get(f"{url}/healthz", timeout=2)
    with pytest.raises(RuntimeError, match="not started"):
        ops.port


def test_a_fixed_port_can_be_reused_after_stop(registry: CollectorRegistry) -> None:
    first = OpsServer("127.0.0.1", 0, registry).start()
    port = first.port
    first.stop()
    second = OpsServer("127.0.0.1", port, registry).start()
    try:
        assert second.port == port and get(f"{second.url}/healthz")[0] == 200
        with pytest.raises(RuntimeError, match="already started"):
            second.start()
    finally:
        second.stop()


def test_a_client_that_hangs_up_mid_answer_leaves_no_traceback(server: OpsServer, capfd, caplog) -> None:
    """A probe that times out and resets its connection is routine: no traceback on stderr."""
    import socket
    import struct

    checking, release, answered = threading.Event(), threading.Event(), threading.Event()

    def slow_check() -> tuple[bool, str]:
        checking.set()
        release.wait(10)
        answered.set()
        return True, "released"

    def went_away() -> bool:
        return "an HTTP client went away mid-answer" in [r.getMessage() for r in caplog.records]

    server.add_readiness_check("slow", slow_check)
    client = socket.create_connection(("127.0.0.1", server.port))
    client.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert checking.wait(10), "the handler never reached the check"
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # a reset, not a polite close
    time.sleep(0.2)
    with caplog.at_level("DEBUG", logger="service.http"):
        release.set()
        assert answered.wait(5)
        deadline = time.monotonic() + 10  # the handler writes its answer into the reset connection
        while not went_away() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "Traceback" not in capfd.readouterr().err
    assert went_away()
    assert all(r.levelname == "DEBUG" for r in caplog.records if r.name == "service.http")
