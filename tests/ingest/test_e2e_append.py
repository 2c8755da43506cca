"""End to end: append mode into a table partitioned by ``day(ts)`` and ``bucket(8, id)``.

Every record lands once; each data file holds only rows of its partition
tuple; and Iceberg's Java planner prunes by those partition values: for a
two-day time range it plans exactly the files of those two days, and its
partition filter alone (the inclusive projection evaluated on each file's
partition, no column metrics involved) keeps the same files.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from ingest.tasks.decode_records import DecodeSpec
from ingest.job import CatalogSpec, IngestJob, SourceSpec, TableSpec, TriggerSpec
from ingest.driver.stream import run_ingest
from table.io import FileIO
from table.scan import TableScan
from table.schema import Schema
from table.types import LongType, NestedField, StringType, TimestamptzType
from tests.ingest.e2e_support import Event, produce

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "ts", TimestamptzType(), required=True),
    NestedField(3, "payload", StringType()),
)
DAY0 = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
EVENTS = 20_000
DAYS = 10


def events(n: int) -> list[dict]:
    rng = random.Random(11)
    return [{"id": rng.randrange(1_000_000), "ts": DAY0 + dt.timedelta(seconds=rng.randrange(DAYS * 86_400)),
             "payload": f"p{i}"} for i in range(n)]


def micros(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)


def test_append_partitions_files_and_java_prunes_them(spark, kafka_bootstrap, new_topic, iceberg_oracle, tmp_path: Path):
    topic = new_topic("e2e-append", partitions=2)
    rows = events(EVENTS)
    produce(kafka_bootstrap, topic, [Event(None, json.dumps({**r, "ts": r["ts"].isoformat()}).encode()) for r in rows])
    job = IngestJob(
        source=SourceSpec(kafka_bootstrap, topics=(topic,), max_offsets_per_trigger=8_000),
        table=TableSpec("db.clicks", DecodeSpec(SCHEMA), partition=(("day", "ts"), ("bucket[8]", "id"))),
        catalog=CatalogSpec(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse")),
        checkpoint_location=str(tmp_path / "checkpoint"),
        trigger=TriggerSpec(available_now=True),
    )
    run_ingest(job, spark).await_termination(300)

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    metadata = loaded.metadata
    scan = TableScan(FileIO.for_location(loaded.metadata_location), metadata)
    landed = sorted(scan.to_arrow().to_pylist(), key=lambda r: r["payload"])
    assert landed == sorted(rows, key=lambda r: r["payload"])

    spec = metadata.spec()
    files = {t.data_file.file_path: t.data_file for t in scan.plan_files()}
    assert len({f.partition for f in files.values()}) == DAYS * 8
    for path, data_file in files.items():
        stored = pq.read_table(path).to_pylist()
        assert {spec.partition_values({1: r["id"], 2: micros(r["ts"])}, SCHEMA) for r in stored} == {data_file.partition}

    low, high = DAY0 + dt.timedelta(days=3), DAY0 + dt.timedelta(days=5)
    java = iceberg_oracle.call("tests.ingest.oracle_scan:planned_files", metadata_location=loaded.metadata_location,
                               column="ts", low=micros(low), high=micros(high))
    assert {p: tuple(v) for p, v in java["files"].items()} == {p: f.partition for p, f in files.items()}
    day = (low - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)).days
    in_range = sorted(p for p, f in files.items() if day <= f.partition[0] < day + 2)
    assert java["planned"] == in_range and java["partition_kept"] == in_range
    assert 0 < len(in_range) < len(files) // 3, "pruning keeps only the two days' files"

    where = f"ts >= TIMESTAMP '{low.isoformat()}' AND ts < TIMESTAMP '{high.isoformat()}'"
    selected = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                                   metadata_location=loaded.metadata_location, where=where)
    assert sorted(selected.column("payload").to_pylist()) == sorted(r["payload"] for r in rows if low <= r["ts"] < high)
