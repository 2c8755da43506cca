"""End to end on Floe's own Kafka source (``source.reader: python``): the records are read, decoded
and written by the Python tasks, and never enter the JVM.

A running query (1 s trigger, ``maxOffsetsPerTrigger``, so several batches)
ingests change events (inserts, updates, deletes, tombstones) of an upsert
table; it is stopped, more changes arrive, and it restarts on its checkpoint
(rate-limited from where the offset log ends); then the topic gains a
partition while the query runs, and new keys arrive on every partition.
Floe's reader and Iceberg Java must return exactly the expected table, the
committed offsets must reach every partition's end, including the new one,
and every batch must be committed once. That case runs on Spark's Kafka
source too.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from ingest.driver.stream import local_task_slots, python_source_options, run_ingest
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import Event, change_events, expected_table, normalized, produce, row_value, upsert_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

EVENTS = 6_000
KEYS = 1_500
MAX_OFFSETS = 1_500
NEW_KEYS = 600


def _ends(delivered: list) -> dict[int, int]:
    ends: dict[int, int] = {}
    for d in delivered:
        ends[d.partition] = max(ends.get(d.partition, 0), d.offset + 1)
    return ends


def _wait_for_offsets(job, topic: str, ends: dict[int, int], query, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
            committed = committed_offsets(catalog.load_table(job.table.identifier).metadata)
        if committed.get(topic) == ends:
            return
        time.sleep(1.0)
    raise AssertionError(f"committed offsets {committed} never reached {ends}")


# Spark's Kafka source too: a partition it discovers must reach Floe's committed offsets the same way.
@pytest.mark.parametrize("reader", ["python", "spark"])
def test_upserts_land_exactly_while_partitions_are_added(spark, kafka_bootstrap, new_topic, iceberg_oracle,
                                                         tmp_path: Path, reader: str):
    topic = new_topic(f"e2e-{reader}-source", partitions=2)
    delivered = produce(kafka_bootstrap, topic, change_events(EVENTS, KEYS, seed=11))
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS, available_now=False,
                     processing_time=1.0)
    job = dataclasses.replace(job, source=dataclasses.replace(job.source, reader=reader))
    query = run_ingest(job, spark)
    try:
        _wait_for_offsets(job, topic, _ends(delivered), query)
    finally:
        query.stop()
    assert query.exception() is None
    # a restart on the checkpoint: rate-limited again from where its offset log ends ...
    delivered += produce(kafka_bootstrap, topic, change_events(EVENTS // 2, KEYS, seed=12))
    query = run_ingest(job, spark)
    try:
        _wait_for_offsets(job, topic, _ends(delivered), query)
        # ... then the topic gains a partition while the query runs
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
            future.result(timeout=30)
        # new keys only: a key's changes stay in one partition, so Kafka order is the order of its changes
        fresh = [Event(json.dumps(k).encode(), json.dumps(row_value(k, 10_000 + k)).encode())
                 for k in range(KEYS, KEYS + NEW_KEYS)]
        delivered += produce(kafka_bootstrap, topic, fresh)
        assert {d.partition for d in delivered} == {0, 1, 2}
        _wait_for_offsets(job, topic, _ends(delivered), query)
    finally:
        query.stop()
    assert query.exception() is None

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    batches = [s for s in loaded.metadata.snapshots if "floe.batch-id" in s.summary]
    assert len(batches) >= (EVENTS + EVENTS // 2) // MAX_OFFSETS, "maxOffsetsPerTrigger splits the input into batches"
    ids = [s.summary["floe.batch-id"] for s in batches]
    assert len(ids) == len(set(ids)), "a batch was committed twice"
    expected = expected_table(delivered)
    assert normalized(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()) == expected
    java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=loaded.metadata_location)
    assert normalized(java) == expected


def test_an_available_now_run_keeps_its_rate_limit_and_ends_on_its_own(spark, kafka_bootstrap, new_topic,
                                                                       tmp_path: Path):
    """Spark would read everything in one batch (it asks a Python source for its latest offset once):
    Floe's run reads up to the offsets of its start in batches of ``maxOffsetsPerTrigger``, then ends;
    a second run with nothing new ends at once, committing nothing."""
    topic = new_topic("e2e-pysource-now", partitions=2)
    delivered = produce(kafka_bootstrap, topic, change_events(3_000, 500, seed=13))
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=700)
    job = dataclasses.replace(job, source=dataclasses.replace(job.source, reader="python"))
    assert job.trigger.available_now
    assert run_ingest(job, spark).await_termination(240), "the availableNow run did not end on its own"
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        metadata = catalog.load_table(job.table.identifier).metadata
    assert committed_offsets(metadata) == {topic: _ends(delivered)}
    assert len(metadata.snapshots) >= 3_000 // 700
    started = time.monotonic()
    assert run_ingest(job, spark).await_termination(120), "a run with nothing to read did not end"
    print(f"the empty run took {time.monotonic() - started:.1f} s")
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        assert len(catalog.load_table(job.table.identifier).metadata.snapshots) == len(metadata.snapshots)
    rows = normalized(TableScan(FileIO.for_location(metadata.location), metadata).to_arrow())
    assert rows == expected_table(delivered)


def test_a_local_session_reads_a_batch_in_one_task_per_slot(spark, kafka_bootstrap, tmp_path: Path):
    """The test session is local[2]: Floe's source gets maxPartitions 2 unless the job sets its own cap
    (the ranges of the growing topic above are then packed: 3 partitions in 2 tasks)."""
    assert spark.sparkContext.master.startswith("local")
    assert local_task_slots(spark) == spark.sparkContext.defaultParallelism == 2
    job = upsert_job(kafka_bootstrap, "any-topic", tmp_path)
    job = dataclasses.replace(job, source=dataclasses.replace(job.source, reader="python"))
    assert python_source_options(job, task_slots=local_task_slots(spark))["maxPartitions"] == "2"
