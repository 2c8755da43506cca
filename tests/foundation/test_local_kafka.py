"""The local broker never outlives its owner."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.local_kafka import EPHEMERAL_RANGE, LocalKafka, broker_properties, kept_port, new_cluster_id

REPO_ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def _wait_gone(pid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


def test_cluster_id_is_kafka_shaped():
    ids = {new_cluster_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i) == 22 and "=" not in i for i in ids)


def test_cluster_id_never_starts_with_a_dash():
    """Kafka's StorageTool takes a leading '-' for an option (1 start in 64 failed)."""
    assert not any(new_cluster_id().startswith("-") for _ in range(20_000))
    dash_first = iter([b"\xf8" + bytes(15), bytes(16), bytes(15) + b"\x01", b"\x01" * 16])
    assert new_cluster_id(lambda: next(dash_first)) == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_properties_bind_loopback_only(tmp_path: Path):
    props = broker_properties(tmp_path, 1111, 2222)
    assert "listeners=PLAINTEXT://127.0.0.1:1111,CONTROLLER://127.0.0.1:2222" in props
    assert "controller.quorum.voters=1@127.0.0.1:2222" in props


@pytest.mark.kafka
def test_stop_leaves_no_broker_process(tmp_path: Path):
    kafka = LocalKafka(tmp_path)
    kafka.start()
    pid = kafka.pid
    assert pid is not None and _alive(pid)
    kafka.stop()
    assert _wait_gone(pid), "the broker survived stop()"
    kafka.stop()  # idempotent


@pytest.mark.kafka
def test_broker_dies_with_a_killed_owner(tmp_path: Path):
    """SIGKILL of the owning Python process (no cleanup code runs) still ends the broker."""
    owner = subprocess.Popen(
        [sys.executable, "-m", "service.local_kafka", str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = owner.stdout.readline()
        assert "local kafka ready" in line, line
        java = subprocess.run(["pgrep", "-P", str(owner.pid), "java"], capture_output=True, text=True)
        broker_pid = int(java.stdout.split()[0])
        assert _alive(broker_pid)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert _wait_gone(broker_pid), "the broker outlived its killed owner"


def test_a_kept_port_is_free_and_below_the_ephemeral_range_so_no_client_takes_it_while_the_broker_is_down():
    ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0 if ephemeral_low <= 10_000 else ephemeral_low - 1))
        busy = taken.getsockname()[1]
        picks = iter([busy, busy - 1])
        port = kept_port(lambda low, high: next(picks))
    assert port == busy - 1, "a port something listens on is passed over"
    assert kept_port() < ephemeral_low
