"""End to end under the position delete strategy: every snapshot readable by every engine.

Change events (inserts, updates many times within and across batches,
deletes by op field and by tombstone, re-inserts after deletes, malformed
records to a dead-letter topic) land through several micro-batches. After
every batch ``main`` holds no equality delete file, and at every snapshot
Floe's reader, Iceberg Java and pyiceberg return exactly the rows the
records committed so far imply. At the end the key index checks clean
against the table. Run on a spec the key determines (``bucket(4, id)``) and
on one it does not (``bucket(4, id)`` + ``day(event_ts)``: a key moves
between days). The indexes here are small, so the decode tasks look keys up
(map-side); one case forces the lookup stage after an exchange by index
bucket, which big indexes take.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pyiceberg.table import StaticTable

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_batch, committed_offsets
from commit.key_index.manifest import describes
from commit.key_index.rebuild import index_problems
from commit.key_index.store import current_manifest
from commit.metadata_committer import commit_metadata_change
from compaction.metrics import CompactionMetrics
from compaction.runner import CompactionOptions, CompactionRunner, RunResult
from ingest.driver.stream import run_ingest
from table import properties
from table.io import FileIO
from table.metadata import MAIN_BRANCH
from table.scan import TableScan
from tests.commit.test_catalog_oracles import use_jdbc_catalog
from tests.ingest.e2e_support import (
    Event,
    change_events,
    check_v3_snapshot,
    expected_table,
    normalized,
    produce,
    upsert_job,
)
from tests.support.s3proxy import pyiceberg_s3_properties, s3_file_io_properties

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

EVENTS = 40_000
KEYS = 6_000
PARTITIONS = 3
MAX_OFFSETS = 8_000


def with_malformed(events: list[Event]) -> list[Event]:
    """Every 997th record is not JSON: it goes to the dead-letter topic and changes nothing."""
    return [Event(e.key, b"{not json") if i % 997 == 500 else e for i, e in enumerate(events)]


BY_BUCKET = {"floe.key-index.map-side-lookup-max-bytes": "0"}  # the lookup stage after an exchange by bucket


@pytest.mark.parametrize(("partition", "format_version", "table_properties", "on_s3"), [
    ((("bucket[4]", "id"),), 2, {}, False),
    ((("bucket[4]", "id"), ("day", "event_ts")), 2, BY_BUCKET, False),
    ((("bucket[4]", "id"), ("day", "event_ts")), 3, {}, False),
    ((("bucket[4]", "id"),), 2, {}, True),
    ((), 2, {}, False),
], ids=["key-determines-partition", "key-moves-between-partitions-lookup-by-bucket", "v3-deletion-vectors",
        "warehouse-and-checkpoint-on-s3proxy", "unpartitioned-direct-upsert"])
def test_every_snapshot_reads_exactly_in_every_engine(spark, kafka_bootstrap, new_topic, iceberg_oracle, s3proxy,
                                                     tmp_path: Path, partition, format_version,
                                                     table_properties, on_s3: bool, caplog) -> None:
    topic = new_topic("e2e-position", partitions=PARTITIONS)
    dead = new_topic("e2e-position-dlq", partitions=1)
    delivered = produce(kafka_bootstrap, topic, with_malformed(change_events(EVENTS, KEYS, seed=11)))
    good = [d for d in delivered if d.event.value != b"{not json"]

    store = s3proxy.create_bucket(f"e2e-{uuid.uuid4().hex[:12]}") if on_s3 else None
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS, partition=partition, store=store)
    job = dataclasses.replace(job, table=dataclasses.replace(job.table, bad_records="dead-letter",
                                                             dead_letter_topic=dead, format_version=format_version,
                                                             properties=table_properties))
    if on_s3:  # Iceberg Java reads through S3FileIO and its JDBC catalog, by the catalog's name
        job = dataclasses.replace(job, catalog=dataclasses.replace(job.catalog, name=f"s3_{uuid.uuid4().hex[:8]}"))
        use_jdbc_catalog(iceberg_oracle, job.catalog.name, job.catalog.uri, job.catalog.warehouse,
                         **s3_file_io_properties(s3proxy), **{"cache-enabled": "false"})
    with caplog.at_level(logging.INFO, logger="floe.ingest"):
        query = run_ingest(job, spark)
        assert query.await_termination(600), "the AvailableNow query did not finish"
    # an unpartitioned table's upserts are written by the decode tasks (the producer keys by the table key),
    # but for batch 0 of Spark's source, whose start (so size) the checkpoint does not say
    written = {r.batch_id: r.write for r in caplog.records if getattr(r, "result", None) == "committed"}
    assert len(written) >= 4 and set(written.values()) == ({"exchange"} if partition else {"exchange", "direct-upsert"})
    assert partition or [b for b, how in written.items() if how == "exchange"] == [0], written

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse, job.catalog.name) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    metadata = loaded.metadata
    io = FileIO.for_location(loaded.metadata_location)
    assert properties.UPSERT_DELETE_STRATEGY.read(metadata.properties) == "position"
    snapshots = list(reversed(list(metadata.ancestors_of(metadata.current_snapshot().snapshot_id))))
    assert len(snapshots) >= 4, "maxOffsetsPerTrigger should split the input into several micro-batches"
    static = StaticTable.from_metadata(loaded.metadata_location,
                                       properties=pyiceberg_s3_properties(s3proxy) if on_s3 else {})
    if on_s3:
        assert loaded.metadata_location.startswith(f"{store}/warehouse/")
        assert not (tmp_path / "warehouse").exists() and not (tmp_path / "checkpoint").exists()
        assert FileIO.for_location(store).exists(f"{store}/checkpoint/offsets/0"), "the checkpoint is on S3 too"

    position_deletes = 0
    for snapshot in snapshots:
        at = metadata.set_branch(MAIN_BRANCH, snapshot.snapshot_id)
        ends = committed_offsets(at)[topic]
        expected = expected_table([d for d in good if d.offset < ends.get(d.partition, 0)])
        tasks = list(TableScan(io, at, ref=MAIN_BRANCH).plan_files())
        assert not any(t.equality_deletes for t in tasks), f"snapshot {snapshot.snapshot_id} has equality deletes"
        position_deletes += sum(len(t.position_deletes) for t in tasks)
        if format_version == 3:
            check_v3_snapshot(snapshot, tasks)
        assert normalized(TableScan(io, metadata, snapshot_id=snapshot.snapshot_id).to_arrow()) == expected
        if on_s3:
            java = iceberg_oracle.sql(f"SELECT * FROM {job.catalog.name}.{job.table.identifier} "
                                      f"VERSION AS OF {snapshot.snapshot_id}")
        else:
            java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                                       metadata_location=loaded.metadata_location, snapshot_id=snapshot.snapshot_id)
        assert normalized(java) == expected, f"Iceberg Java at snapshot {snapshot.snapshot_id}"
        assert normalized(static.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == expected, \
            f"pyiceberg at snapshot {snapshot.snapshot_id}"
    assert position_deletes > 0, "updates and deletes of earlier batches' keys are position deletes"

    manifest = current_manifest(io, metadata)
    assert manifest is not None and manifest.snapshot_id == metadata.current_snapshot().snapshot_id
    assert index_problems(io, metadata, manifest) == []
    assert json.loads(json.dumps(manifest.to_json()))["key-field-ids"] == [1]


def test_switching_an_equality_table_to_position_keeps_it_exact(spark, kafka_bootstrap, new_topic, iceberg_oracle,
                                                               tmp_path: Path) -> None:
    """Old equality deletes apply until compaction rewrites every file they touch; new batches add none."""
    topic = new_topic("e2e-switch", partitions=PARTITIONS)
    events = change_events(EVENTS // 2, KEYS, seed=13)
    first = produce(kafka_bootstrap, topic, events[: len(events) // 2])
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS,
                     partition=(("bucket[4]", "id"), ("day", "event_ts")))
    job = dataclasses.replace(job, table=dataclasses.replace(
        job.table, properties={"floe.upsert.delete-strategy": "equality"}))
    assert run_ingest(job, spark).await_termination(600)

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        switched = catalog.load_table(job.table.identifier).metadata.current_snapshot_id
        commit_metadata_change(
            catalog, job.table.identifier,
            lambda loaded, _n: loaded.metadata.set_properties({"floe.upsert.delete-strategy": "position"}),
            lambda metadata: metadata.properties.get("floe.upsert.delete-strategy") == "position",
            what="delete strategy")
    delivered = first + produce(kafka_bootstrap, topic, events[len(events) // 2:])
    assert run_ingest(job, spark).await_termination(600)
    expected = expected_table(delivered)

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
        metadata, io = loaded.metadata, FileIO.for_location(loaded.metadata_location)
        after = [s for s in metadata.ancestors_of(metadata.current_snapshot_id) if s.snapshot_id != switched]
        after = after[: [s.snapshot_id for s in metadata.ancestors_of(metadata.current_snapshot_id)].index(switched)]
        assert after and all(int(s.summary.get("added-equality-delete-files", "0")) == 0 for s in after)
        assert any(t.equality_deletes for t in TableScan(io, metadata).plan_files()), "the old ones still apply"
        assert normalized(TableScan(io, metadata).to_arrow()) == expected
        java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                                   metadata_location=loaded.metadata_location)
        assert normalized(java) == expected

        report = CompactionRunner(catalog, job.table.identifier, CompactionOptions(),
                                  CompactionMetrics(CollectorRegistry())).run()
        assert report.result == RunResult.SUCCESS and report.groups
        loaded = catalog.load_table(job.table.identifier)
        metadata = loaded.metadata
        assert not any(t.equality_deletes for t in TableScan(io, metadata).plan_files())
        assert normalized(StaticTable.from_metadata(loaded.metadata_location).scan().to_arrow()) == expected
        assert normalized(TableScan(io, metadata).to_arrow()) == expected
        manifest = current_manifest(io, metadata)
        assert manifest is not None and describes(manifest, metadata)
        assert index_problems(io, metadata, manifest) == []


def test_keys_spread_over_kafka_partitions_are_written_again_after_an_exchange(spark, kafka_bootstrap, new_topic,
                                                                               iceberg_oracle, tmp_path: Path,
                                                                               caplog) -> None:
    """A producer that does not key by the table key: a key's changes in one batch are in several partitions, so
    several tasks. The direct upsert's first batch finds a key in two tasks, deletes its files and writes the
    batch again after an exchange by key, as every later batch is; each key's last change (greatest partition,
    then offset, within a batch) is in the table, in every engine, and no file of the discarded pass is left."""
    topic = new_topic("e2e-spread", partitions=PARTITIONS)
    delivered = produce(kafka_bootstrap, topic, change_events(6_000, 300, seed=17), round_robin=PARTITIONS)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=2_000, partition=())
    with caplog.at_level(logging.INFO, logger="floe.ingest"):
        assert run_ingest(job, spark).await_termination(600)
    spread = [r for r in caplog.records if "had changes in two tasks" in r.getMessage()]
    assert len(spread) == 1 and spread[0].levelname == "INFO", [r.getMessage() for r in spread]
    committed = [r for r in caplog.records if getattr(r, "result", None) == "committed"]
    assert len(committed) >= 3 and {r.write for r in committed} == {"exchange"}

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    metadata, io = loaded.metadata, FileIO.for_location(loaded.metadata_location)
    expected: dict = {}
    snapshots = list(reversed(list(metadata.ancestors_of(metadata.current_snapshot_id))))
    listed: set[str] = set()
    for snapshot in snapshots:  # batch by batch: within one, the greatest (partition, offset) of a key wins
        ranges = committed_batch(snapshot).offsets[topic]
        in_batch = [d for d in delivered if d.partition in ranges
                    and ranges[d.partition][0] <= d.offset < ranges[d.partition][1]]
        landed = expected_table(in_batch)
        touched = {json.loads(d.event.key) for d in in_batch}
        expected = {k: v for k, v in expected.items() if k not in touched}
        expected.update(landed)
        tasks = list(TableScan(io, metadata, snapshot_id=snapshot.snapshot_id).plan_files())
        listed |= {t.data_file.file_path for t in tasks} | {d.file_path for t in tasks for d in t.delete_files}
        assert normalized(TableScan(io, metadata, snapshot_id=snapshot.snapshot_id).to_arrow()) == expected
    java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=loaded.metadata_location)
    assert normalized(java) == expected
    assert normalized(StaticTable.from_metadata(loaded.metadata_location).scan().to_arrow()) == expected
    on_disk = {str(p).lstrip("/") for p in (tmp_path / "warehouse").rglob("*.parquet") if "/data/" in str(p)}
    assert on_disk == {p.removeprefix("file:").lstrip("/") for p in listed}, "the discarded pass left files"
    manifest = current_manifest(io, metadata)
    assert manifest is not None and index_problems(io, metadata, manifest) == []


def test_a_table_keyed_by_a_uuid_upserts_with_position_deletes(spark, kafka_bootstrap, new_topic, iceberg_oracle,
                                                                tmp_path: Path, caplog) -> None:
    """Arrow sorts, groups and joins no uuid: the key index keeps a uuid key as its 16 bytes. Updates, op-field
    deletes and tombstones of uuid keys, after an exchange (batch 0) and from the decode tasks (later batches),
    leave each key's last change, in Floe and Iceberg Java, with no equality delete."""
    from confluent_kafka import Producer

    from ingest.tasks.changes import OpField
    from ingest.tasks.decode_records import DecodeSpec
    from table.schema import Schema
    from table.types import LongType, NestedField, UUIDType

    schema = Schema(NestedField(1, "id", UUIDType(), required=True), NestedField(2, "version", LongType()),
                    identifier_field_ids=[1])
    rng = random.Random(5)
    ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(200)]
    topic = new_topic("e2e-uuid", partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    expected: dict[str, int] = {}
    for version in range(3_000):
        key = rng.choice(ids)
        roll = rng.random()
        if roll < 0.1:
            value = None  # a tombstone
        elif roll < 0.2:
            value = json.dumps({"op": "d", "id": key, "version": version}).encode()
        else:
            value = json.dumps({"op": "u", "id": key, "version": version}).encode()
        producer.produce(topic, key=json.dumps(key).encode(), value=value)  # keyed: one partition per key
        if value is None or roll < 0.2:
            expected.pop(key, None)
        else:
            expected[key] = version
    assert producer.flush(60) == 0
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=1_000, partition=())
    job = dataclasses.replace(job, table=dataclasses.replace(
        job.table, decode=DecodeSpec(schema, mode="upsert", op_field=OpField("op"))))
    with caplog.at_level(logging.INFO, logger="floe.ingest"):
        assert run_ingest(job, spark).await_termination(600)
    written = {r.batch_id: r.write for r in caplog.records if getattr(r, "result", None) == "committed"}
    assert written[0] == "exchange" and set(written.values()) == {"exchange", "direct-upsert"}, written

    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    io = FileIO.for_location(loaded.metadata_location)
    assert not any(t.equality_deletes for t in TableScan(io, loaded.metadata).plan_files())
    floe = TableScan(io, loaded.metadata).to_arrow().to_pylist()
    assert {str(uuid.UUID(bytes=r["id"]) if isinstance(r["id"], bytes) else r["id"]): r["version"] for r in floe} \
        == expected and len(floe) == len(expected)
    java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=loaded.metadata_location).to_pylist()
    assert {str(r["id"]): r["version"] for r in java} == expected and len(java) == len(expected)
