"""End to end: 200,000 change events on 4 partitions land as exactly the expected table.

Inserts, updates (many per key, within a batch and across batches), deletes by
op field, tombstones and re-inserts after deletes. The expected table is
computed in plain Python from what the producer delivered, in Kafka order
per key. After an AvailableNow run split into several micro-batches, both
Floe's reader and Iceberg's Java runtime (by metadata location) return
exactly that table, and there is one snapshot per micro-batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from ingest.driver.metrics import IngestMetrics
from ingest.driver.stream import run_ingest
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import change_events, expected_table, normalized, produce, upsert_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

EVENTS = 200_000
KEYS = 30_000
PARTITIONS = 4
MAX_OFFSETS = 50_000


def test_upserts_and_deletes_land_exactly(spark, kafka_bootstrap, new_topic, iceberg_oracle, tmp_path: Path):
    topic = new_topic("e2e-upsert", partitions=PARTITIONS)
    delivered = produce(kafka_bootstrap, topic, change_events(EVENTS, KEYS))
    expected = expected_table(delivered)
    assert {d.partition for d in delivered} == set(range(PARTITIONS))

    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS)
    registry = CollectorRegistry()
    query = run_ingest(job, spark, metrics=IngestMetrics(registry))
    assert query.await_termination(600), "the AvailableNow query did not finish"
    batches = [p for p in query.recent_progress if p["numInputRows"] > 0]
    assert len(batches) >= 4, "maxOffsetsPerTrigger should split the input into several micro-batches"

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    metadata = loaded.metadata
    assert len(metadata.snapshots) == len(batches), "one snapshot per micro-batch"
    ends = {p: max(d.offset for d in delivered if d.partition == p) + 1 for p in range(PARTITIONS)}
    assert committed_offsets(metadata) == {topic: ends}

    floe = normalized(TableScan(FileIO.for_location(loaded.metadata_location), metadata).to_arrow())
    assert floe == expected
    java = iceberg_oracle.call(
        "tests.support.oracle_ops:read_by_metadata_location", metadata_location=loaded.metadata_location
    )
    assert normalized(java) == expected

    table = job.table.identifier
    assert registry.get_sample_value("floe_ingest_records_read_total", {"table": table}) == EVENTS
    assert registry.get_sample_value("floe_ingest_batches_total", {"table": table, "result": "committed"}) == len(batches)
