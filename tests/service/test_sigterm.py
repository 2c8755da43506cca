"""SIGTERM mid-batch: `floe ingest` exits 3, the table holds whole batches only, a restart resumes exactly.

"Mid-batch" is observed, not hoped for: Spark writes ``offsets/N`` of the
checkpoint before running batch N and ``commits/N`` after it, so the signal is
sent while ``offsets`` is ahead of ``commits``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from commit.exactly_once import committed_batch
from service.ingest_command import EXIT_OK, EXIT_STOPPED
from service.local_kafka import free_port
from tests.ingest.e2e_support import change_events, expected_table, produce
from tests.service.test_ingest_command import events_config, http_get, read_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
FLOE = [sys.executable, "-m", "service.cli"]


def latest(directory: Path) -> int:
    """The highest batch id in a checkpoint log directory (-1 when empty)."""
    ids = [int(p.name) for p in directory.glob("[0-9]*")] if directory.exists() else []
    return max(ids, default=-1)


def committed_batches(exposition: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "floe_ingest_batches_total" and sample.labels == {"table": "db.events", "result": "committed"}
    )


def wait_mid_batch(port: int, checkpoint: Path, process: subprocess.Popen, min_committed: int) -> None:
    """Return while a batch runs, after ``min_committed`` batches were committed."""
    deadline = time.monotonic() + 240
    while True:
        assert process.poll() is None, "floe ingest ended early"
        assert time.monotonic() < deadline, "no batch in progress after the first commits"
        try:
            _, text = http_get(f"http://127.0.0.1:{port}/metrics")
        except OSError:
            text = ""
        if committed_batches(text) >= min_committed and latest(checkpoint / "offsets") > latest(checkpoint / "commits"):
            return
        time.sleep(0.05)


def assert_whole_batches(metadata) -> None:
    """Every snapshot is one batch whose offset ranges start where the previous batch ended."""
    ends: dict[tuple[str, int], int] = {}
    batch_ids: list[int] = []
    for snapshot in sorted(metadata.snapshots, key=lambda s: s.sequence_number):
        batch = committed_batch(snapshot)
        assert batch is not None, f"snapshot {snapshot.snapshot_id} is not an ingest batch"
        batch_ids.append(batch.batch_id)
        for topic, ranges in batch.offsets.items():
            for partition, (start, end) in ranges.items():
                assert start == ends.get((topic, partition), 0), f"gap or overlap at {topic}/{partition}: {start}"
                assert end >= start
                ends[(topic, partition)] = end
    assert batch_ids == sorted(batch_ids)


def test_sigterm_mid_batch_stops_after_whole_batches_and_a_restart_resumes_exactly(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("sigterm", partitions=2)
    delivered = produce(kafka_bootstrap, topic, change_events(10_000, 1_500, seed=11))
    port = free_port()
    raw = events_config(tmp_path, kafka_bootstrap, topic)
    raw["kafka"]["max_offsets_per_trigger"] = 1_250
    raw["http"]["ingest_port"] = port
    config = tmp_path / "floe.yaml"
    config.write_text(yaml.safe_dump(raw))
    checkpoint = tmp_path / "checkpoints" / "db.events"
    log = (tmp_path / "ingest.log").open("w")
    process = subprocess.Popen([*FLOE, "ingest", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_mid_batch(port, checkpoint, process, min_committed=2)
        in_flight = latest(checkpoint / "offsets")
        process.send_signal(signal.SIGTERM)
        code = process.wait(180)
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    output = (tmp_path / "ingest.log").read_text()
    assert code == EXIT_STOPPED, output[-3000:]
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    [requested] = [r for r in records if r.get("signal") == "SIGTERM"]
    assert (requested["logger"], requested["message"]) == ("floe.ingest", "stop requested")
    assert (records[-1]["logger"], records[-1]["message"], records[-1]["exit_code"]) == (
        "floe.ingest", "ingest stopped", EXIT_STOPPED), "the last line says ingest stopped, from ingest's logger"
    assert not [r for r in records if r["logger"].startswith("service.compact")], "no compactor lines in ingest"

    rows, metadata = read_rows(tmp_path)
    assert_whole_batches(metadata)
    ends = {(t, p): e for s in metadata.snapshots for t, r in committed_batch(s).offsets.items() for p, (_, e) in r.items()}
    below = [d for d in delivered if d.offset < ends.get((topic, d.partition), 0)]
    assert 0 < len(below) < len(delivered), "stopped part-way through the topic"
    assert rows == expected_table(below), "the table is exactly the committed prefix"
    assert latest(checkpoint / "commits") <= in_flight

    raw["trigger"] = {"available_now": True}
    config.write_text(yaml.safe_dump(raw))
    resumed = subprocess.run([*FLOE, "ingest", "--config", str(config)], capture_output=True, text=True,
                             timeout=300, env={**os.environ})
    assert resumed.returncode == EXIT_OK, resumed.stderr[-3000:]
    rows, metadata = read_rows(tmp_path)
    assert_whole_batches(metadata)
    assert rows == expected_table(delivered), "every event landed exactly once"
