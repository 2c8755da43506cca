"""What Kafka itself does to a topic, end to end through a whole query, on both sources.

* A transactional producer commits some transactions and aborts others: only
  committed records land (``read_committed``, which Floe sets for Spark's
  source too), a column filled from a record header carries each record's
  own, and the table's offsets reach the log end past the markers, even
  where a batch holds an aborted transaction alone.
* Retention deletes offsets the table has not read yet: with
  ``fail_on_data_loss`` the run fails and commits nothing; without it the next
  run skips to the oldest offset Kafka still holds.

Each case runs on Spark's Kafka source and on Floe's (``reader: python``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from commit.key_index.manifest import describes
from commit.key_index.rebuild import index_problems
from commit.key_index.store import current_manifest
from ingest.tasks.decode_records import DecodeSpec
from ingest.job import CatalogSpec, IngestJob, SourceSpec, TableSpec, TriggerSpec
from ingest.driver.stream import run_ingest
from table.io import FileIO
from table.scan import TableScan
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.ingest.e2e_support import COLUMNS, normalized, row_value, upsert_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

READERS = ("spark", "python")
ROWS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "origin", StringType()),
)


def _job(bootstrap: str, topic: str, tmp: Path, reader: str, **source) -> IngestJob:
    decode = DecodeSpec(ROWS, metadata_columns={"origin": "headers.origin"})
    return IngestJob(
        source=SourceSpec(bootstrap, topics=(topic,), max_offsets_per_trigger=400, reader=reader, **source),
        table=TableSpec("db.rows", decode),
        catalog=CatalogSpec(f"sqlite:///{tmp / 'catalog.db'}", f"{tmp}/warehouse"),
        checkpoint_location=f"{tmp}/checkpoint",
        trigger=TriggerSpec(available_now=True),
    )


def _log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "floe-test-ends"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


def _value(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}"}).encode()


def _table_rows(job: IngestJob) -> list[dict]:
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        metadata = catalog.load_table(job.table.identifier).metadata
    rows = TableScan(FileIO.for_location(metadata.location), metadata).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def _snapshots(job: IngestJob) -> list:
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        return list(catalog.load_table(job.table.identifier).metadata.snapshots)


def _committed(job: IngestJob) -> dict:
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        return committed_offsets(catalog.load_table(job.table.identifier).metadata)


@pytest.mark.parametrize("reader", READERS)
def test_aborted_transactions_never_land_and_headers_fill_their_column(
        spark, kafka_bootstrap, new_topic, tmp_path: Path, reader: str):
    topic = new_topic(f"e2e-txn-{reader}", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"floe-e2e-{topic}"})
    producer.init_transactions(30)
    expected, last = [], {0: -1, 1: -1}
    for n in range(6):
        delivered: list = []
        producer.begin_transaction()
        for i in range(n * 100, n * 100 + 100):
            producer.produce(topic, value=_value(i), partition=i % 2, headers=[("origin", f"txn-{n}".encode())],
                             on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())))
        producer.flush(30)  # delivered: an aborted transaction's records are in the log too, behind its marker
        if n % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            expected += [{"id": i, "name": f"n{i}", "origin": f"txn-{n}"} for i in range(n * 100, n * 100 + 100)]
            for partition, offset in delivered:
                last[partition] = max(last[partition], offset)
    job = _job(kafka_bootstrap, topic, tmp_path, reader)
    assert run_ingest(job, spark).await_termination(240), "the availableNow run did not end"
    assert _table_rows(job) == expected
    # the table records the batch's end, the log end: past the last committed record, its commit
    # marker and the aborted transaction after it (nothing to read there), so the lag is 0
    ends = _log_ends(kafka_bootstrap, topic, 2)
    assert all(ends[p] > offset + 1 for p, offset in last.items()), "markers and aborted records follow"
    assert _committed(job) == {topic: ends}
    assert run_ingest(job, spark).await_termination(120)
    assert _table_rows(job) == expected, "a second run finds nothing more"
    # a batch of an aborted transaction alone reads no record: it commits its offsets, and no file
    producer.begin_transaction()
    for i in range(600, 610):
        producer.produce(topic, value=_value(i), partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    snapshots = _snapshots(job)
    assert run_ingest(job, spark).await_termination(120)
    assert _table_rows(job) == expected
    assert _committed(job) == {topic: _log_ends(kafka_bootstrap, topic, 2)}
    [markers] = _snapshots(job)[len(snapshots):]
    assert markers.summary["changed-partition-count"] == "0" and markers.summary["total-records"] == str(len(expected))

@pytest.mark.parametrize("reader", READERS)
def test_offsets_deleted_by_retention_fail_the_run_or_are_skipped(
        spark, kafka_bootstrap, new_topic, tmp_path: Path, reader: str):
    topic = new_topic(f"e2e-loss-{reader}")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})

    def produce(ids: range) -> None:
        for i in ids:
            producer.produce(topic, value=_value(i), headers=[("origin", b"p")])
        assert producer.flush(30) == 0

    produce(range(30))
    job = _job(kafka_bootstrap, topic, tmp_path, reader)
    assert run_ingest(job, spark).await_termination(240)
    assert _committed(job) == {topic: {0: 30}}
    produce(range(30, 100))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 60)]).values():
        future.result(timeout=30)

    query = run_ingest(job, spark)
    with pytest.raises(Exception) as failed:
        query.await_termination(240)
    message = str(failed.value)
    assert ("offsets 30..59 were deleted" in message) if reader == "python" else ("lost" in message), message[:2000]
    assert _committed(job) == {topic: {0: 30}}, "a failed run commits nothing"

    lenient = dataclasses.replace(job, source=dataclasses.replace(job.source, fail_on_data_loss=False))
    assert run_ingest(lenient, spark).await_termination(240)
    assert _committed(job) == {topic: {0: 100}}
    assert [r["id"] for r in _table_rows(job)] == list(range(30)) + list(range(60, 100))


@pytest.mark.parametrize("reader", READERS)
def test_an_upsert_table_commits_a_batch_of_markers_and_its_key_index_stays_current(
        spark, kafka_bootstrap, new_topic, tmp_path: Path, reader: str):
    """Under the position strategy: a batch holding an aborted transaction alone commits its
    offsets; the key index, not moved by it, still describes the table, and the next batch's
    updates find their keys' rows through it."""
    topic = new_topic(f"e2e-txn-upsert-{reader}", partitions=2)
    job = upsert_job(kafka_bootstrap, topic, tmp_path)
    job = dataclasses.replace(job, source=dataclasses.replace(job.source, reader=reader))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"floe-e2e-{topic}"})
    producer.init_transactions(30)

    def transaction(versions: range, commit: bool) -> None:
        producer.begin_transaction()
        for key in range(40):
            for version in versions:
                producer.produce(topic, key=json.dumps(key).encode(), value=json.dumps(row_value(key, version)).encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def ingest() -> None:
        assert run_ingest(job, spark).await_termination(240), "the availableNow run did not end"

    def state() -> tuple:
        with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
            metadata = catalog.load_table(job.table.identifier).metadata
        io = FileIO.for_location(metadata.location)
        return metadata, io, current_manifest(io, metadata)

    transaction(range(0, 2), commit=True)
    ingest()
    _, _, first_index = state()
    transaction(range(2, 4), commit=False)
    ingest()
    metadata, io, index = state()
    assert metadata.current_snapshot().summary["changed-partition-count"] == "0"
    assert committed_offsets(metadata) == {topic: _log_ends(kafka_bootstrap, topic, 2)}
    assert index == first_index and describes(index, metadata), "the index still describes the table"
    transaction(range(4, 5), commit=True)
    ingest()
    metadata, io, index = state()
    assert describes(index, metadata) and index_problems(io, metadata, index) == []
    rows = normalized(TableScan(io, metadata).to_arrow())
    assert rows == {key: {c: row_value(key, 4)[c] for c in COLUMNS} for key in range(40)}
