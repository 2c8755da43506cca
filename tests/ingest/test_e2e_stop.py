"""End to end: graceful stops (``stop_event``, and SIGTERM or SIGINT to ``python -m ingest``'s group), lag gauges, a resume.

With a 1 s processing-time trigger and a producer still running, ``stop_event``
stops the query after whole batches only: the table equals the changes below
the offsets it recorded, per partition. The lag probe then reports exactly
the records left behind (one more chunk is produced after the stop, so some
always are), and a restart on the same checkpoint lands them.

The producer keeps the topic ahead of the query until the stop, so the stop
comes while batches are still coming, whatever the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from ingest.job import job_to_json
from ingest.driver.lag import LagProbe
from ingest.driver.metrics import IngestMetrics
from ingest.driver.stream import run_ingest
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import (
    batch_lines,
    change_events,
    expected_table,
    normalized,
    produce,
    start_ingest,
    upsert_job,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def read_table(job):
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    rows = normalized(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow())
    return rows, loaded.metadata


def test_graceful_stop_commits_whole_batches_and_a_restart_resumes(spark, kafka_bootstrap, new_topic, paced_producer,
                                                                    tmp_path: Path):
    topic = new_topic("e2e-stop", partitions=2)
    producer = paced_producer(kafka_bootstrap, topic, change_events(200_000, 2_000, seed=9), chunk=1_000)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=3_000, available_now=False, processing_time=1.0)
    registry = CollectorRegistry()
    metrics = IngestMetrics(registry)
    stop = threading.Event()
    query = run_ingest(job, spark, stop, metrics)
    table = job.table.identifier
    deadline = time.monotonic() + 180
    while (registry.get_sample_value("floe_ingest_batches_total", {"table": table, "result": "committed"}) or 0) < 3:
        assert time.monotonic() < deadline and query.is_active, "the query should commit batches"
        time.sleep(0.2)
    stop.set()
    assert query.await_termination(120), "the query did not stop"
    assert query.exception() is None and not query.is_active
    assert registry.get_sample_value("floe_ingest_query_active", {"table": table}) == 0
    delivered = producer.stop()
    delivered += produce(kafka_bootstrap, topic, producer.more(1_000))  # records the stopped query left behind

    rows, metadata = read_table(job)
    committed = committed_offsets(metadata)[topic]
    below = [d for d in delivered if d.offset < committed.get(d.partition, 0)]
    assert rows == expected_table(below), "the table holds exactly the committed prefix of each partition"
    left = {p: sum(1 for d in delivered if d.partition == p) - committed.get(p, 0) for p in range(2)}

    probe = LagProbe(job, SqlCatalog(job.catalog.uri, job.catalog.warehouse), metrics)
    probe.refresh()
    probe.close()
    for p in range(2):
        assert registry.get_sample_value("floe_ingest_consumer_lag_records",
                                         {"table": table, "topic": topic, "partition": str(p)}) == left[p]
        freshness = registry.get_sample_value("floe_ingest_freshness_seconds",
                                              {"table": table, "topic": topic, "partition": str(p)})
        assert freshness is not None and 0 <= freshness < 600

    resumed = run_ingest(upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=10_000), spark)
    assert resumed.await_termination(300)
    rows, _ = read_table(job)
    assert rows == expected_table(delivered)


# SIGINT to the group (Ctrl-C) is tried on `floe ingest` in tests/service/test_sigterm.py; the handler is
# one for both signals.
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_to_the_group_stops_python_m_ingest_after_whole_batches(stop_signal, kafka_bootstrap, new_topic,
                                                                          paced_producer, tmp_path: Path):
    """As a terminal's Ctrl-C or ``timeout`` sends it: Spark's JVM and Python workers get the signal too."""
    topic = new_topic("e2e-sigterm", partitions=2)
    producer = paced_producer(kafka_bootstrap, topic, change_events(200_000, 1_000, seed=13), chunk=500)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=1_000, available_now=False, processing_time=0.5)
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job_to_json(job)))
    log = tmp_path / "ingest.log"
    proc = start_ingest(job_file, log)
    try:
        deadline = time.monotonic() + 240
        while not any(line["result"] == "committed" for line in batch_lines(log)):
            assert proc.poll() is None and time.monotonic() < deadline, f"no commit; see {log}"
            time.sleep(0.05)
        os.killpg(proc.pid, stop_signal)
        assert proc.wait(timeout=240) == 0, f"python -m ingest did not stop cleanly; see {log}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        delivered = producer.stop()
    output = log.read_text()
    assert "Traceback" not in output and "Error: " not in output, output[-4000:]
    stops = [json.loads(line) for line in output.splitlines() if '"stop requested"' in line]
    assert [s.get("signal") for s in stops] == [stop_signal.name], output[-4000:]
    assert "ended" in output.splitlines()[-1], "the last line says the query ended"
    rows, metadata = read_table(job)
    committed = committed_offsets(metadata)[topic]
    assert 0 < sum(committed.values()) < len(delivered), "it stopped part-way"
    assert rows == expected_table([d for d in delivered if d.offset < committed.get(d.partition, 0)])
