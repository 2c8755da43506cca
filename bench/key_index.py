"""Benchmark (issue 13): upserts through the key index, as the table grows.

For each table size ``N`` (``--sizes``), in one run and one Spark session
(``local[2]``):

* **The table**: created the way ingest creates it (``ingest.driver.table_setup.ensure_table``):
  the ingest tests' ``events`` schema (``id`` long key, ``name``, ``amount``,
  ``event_ts``, ``version``), partitioned by ``bucket[4](id)``, properties
  ``floe.upsert.delete-strategy=position`` and ``write.target-file-size-bytes``
  = ``--target-mb`` (128 MB). ``N`` base rows (keys ``0..N-1``, version 0)
  are written by table/'s writers in chunks of ``--chunk-rows`` and committed
  as one ``FastAppend``. Then the key index is built from the table
  (``floe index rebuild``: :func:`service.index_command.rebuild_index`),
  timed as *index build*.
* **Upsert batches**: each batch is ``--changes`` change records (20% updates
  of random live keys, 5% deletes of random live keys, half by ``op: d`` and
  half by tombstone, 75% inserts of new keys), JSON-encoded as the ingest
  tests produce them, in a DataFrame with the Kafka source's schema (offsets
  increasing across batches), handed to the real ``foreachBatch`` function
  (:class:`ingest.driver.batch.BatchProcessor`, built as :func:`ingest.driver.stream.run_ingest`
  builds it). One warm-up batch (cold segment caches in the Python workers,
  Spark and JIT warm-up), then ``--repeat`` measured batches, each drawn
  afresh; the per-batch figure is the median wall time of ``process()``.
* **Append reference**: a second table registered on the same base snapshot
  (same data files), ingested in ``append`` mode with the same batch as pure
  inserts: one row per change, the row image of each changed key (a deleted
  key's too), no ``op`` field; warm-up, then ``--repeat`` batches interleaved
  with the upsert batches (the machine is shared and noisy). Throughput is
  changes (records) per second on both sides.
* **Index bytes per key**: the committed index manifest's segment bytes over
  the table's live keys, after the rebuild and after the batches.
* **Read throughput of the result**: Floe's reader (``TableScan.to_batches``,
  every column, batches dropped as they come so that memory stays bounded)
  and Iceberg Java (``spark.read.format("iceberg").load(<metadata.json>)``
  written to Spark's ``noop`` sink, in a child process with the
  ``iceberg-oracle`` jar set, ``local[2]``), best of ``--reads``; then the
  table is compacted fully (``CompactionRunner``, ``rewrite-all``, dangling
  deletes removed) and both read again: the reference.

Correctness, once per size: every batch commits all its changes, every read
returns ``N + inserts - deletes`` rows, and a filtered scan (``version > 0``)
returns exactly the final image of every key the batches touched, before and
after compaction; ``--check-index`` also runs ``floe index check``'s comparison
after the batches (it reads every live key: slow and memory-hungry at 30 M).

Also printed per size: wall time, and the peak resident memory of the whole
process tree (driver, Spark's JVM, Python workers, the Iceberg Java child) per
phase, sampled from /proc.

Targets: the per-batch time at the largest size at most 1.5x that at the
smallest; upsert throughput at least 0.5x append throughput (at every size).

    .venv/bin/python bench/key_index.py [--sizes 1000000,10000000,30000000] [--changes 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from bench.compaction import tree_rss_bytes  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.key_index.rebuild import index_problems  # noqa: E402
from commit.key_index.store import current_manifest  # noqa: E402
from commit.operations.fast_append import FastAppend  # noqa: E402
from commit.snapshot_producer import SnapshotProducer  # noqa: E402
from ingest.tasks.changes import OpField  # noqa: E402
from ingest.tasks.decode_records import DecodeSpec  # noqa: E402
from ingest.job import CatalogSpec, IngestJob, SourceSpec, TableSpec, TriggerSpec, with_decode_schema  # noqa: E402
from ingest.driver.table_setup import ensure_table  # noqa: E402
from table import properties  # noqa: E402
from table.arrow_schema import cast_to_schema  # noqa: E402
from table.expressions import col  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.manifest import DataFile  # noqa: E402
from table.metadata import TableMetadata  # noqa: E402
from table.parquet.partitioned import write_partitioned  # noqa: E402
from table.parquet.writer import WriterOptions  # noqa: E402
from table.scan import TableScan  # noqa: E402
from table.schema import Schema  # noqa: E402
from table.types import DoubleType, LongType, NestedField, StringType, TimestamptzType  # noqa: E402

EVENTS = Schema(  # tests/ingest/e2e_support.py's EVENTS
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "amount", DoubleType()),
    NestedField(4, "event_ts", TimestamptzType()),
    NestedField(5, "version", LongType()),
    identifier_field_ids=[1],
)
PARTITION = (("bucket[4]", "id"),)
UPSERT, APPEND = "bench.upsert", "bench.append"
TOPIC = "bench-changes"
KAFKA_PARTITIONS = 4
KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
             "timestampType int, headers array<struct<key:string,value:binary>>")
KAFKA_ARROW = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
T0_MICROS = int(T0.timestamp() * 1_000_000)
UPDATES, DELETES = 0.20, 0.05
MiB = 1024 * 1024


# ---------------------------------------------------------------------------
# Rows and change records
# ---------------------------------------------------------------------------


def row_value(key: int, version: int, op: Optional[str]) -> dict[str, Any]:
    """The JSON value of one change (tests/ingest/e2e_support.py's ``row_value``); no ``op`` for appends."""
    ts = T0 + dt.timedelta(seconds=version * 7 % 864_000)
    row = {"id": key, "name": f"n{key}-{version}", "amount": version * 0.25, "event_ts": ts.isoformat(),
           "version": version}
    return row if op is None else {"op": op, **row}


def base_chunks(schema: Schema, n: int, chunk_rows: int) -> Iterator[pa.Table]:
    """``n`` base rows (keys ``0..n-1``, version 0), ``chunk_rows`` at a time: memory stays bounded."""
    for start in range(0, n, chunk_rows):
        ids = pa.array(np.arange(start, min(n, start + chunk_rows), dtype=np.int64))
        seconds = pc.multiply(pc.bit_wise_and(ids, 0xFFFFF), 7)
        table = pa.table({
            "id": ids,
            "name": pc.binary_join_element_wise("n", pc.cast(ids, pa.string()), "-0", ""),
            "amount": pc.multiply(pc.cast(pc.bit_wise_and(ids, 4095), pa.float64()), 0.25),
            "event_ts": pc.cast(pc.add(pc.multiply(seconds, 1_000_000), T0_MICROS), pa.timestamp("us", "UTC")),
            "version": pa.array(np.zeros(len(ids), dtype=np.int64)),
        })
        yield cast_to_schema(table, schema)


@dataclass
class Batch:
    """One batch of change records and what it does."""

    keys: list[bytes]
    values: list[Optional[bytes]]
    inserts: int
    updates: int
    deletes: int
    append_keys: list[bytes] = field(default_factory=list)  # the append reference: one row per change
    append_values: list[bytes] = field(default_factory=list)


class Changes:
    """Draws batches over a table of ``n`` keys and remembers what they leave behind."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.base = n
        self.next_key = n
        self.deleted: set[int] = set()
        self.final: dict[int, Optional[int]] = {}  # touched key -> version of its final image (None: deleted)
        self.inserted = self.removed = 0

    @property
    def live(self) -> int:
        return self.base + self.inserted - self.removed

    def draw(self, changes: int, version: int) -> Batch:
        updates, deletes = round(changes * UPDATES), round(changes * DELETES)
        inserts = changes - updates - deletes
        existing: set[int] = set()
        while len(existing) < updates + deletes:
            key = self.rng.randrange(self.next_key)
            if key not in self.deleted:
                existing.add(key)
        picked = sorted(existing)
        self.rng.shuffle(picked)
        updated, removed = picked[:updates], picked[updates:]
        fresh = list(range(self.next_key, self.next_key + inserts))
        self.next_key += inserts
        ops = [(k, "u") for k in updated] + [(k, "d") for k in removed] + [(k, "c") for k in fresh]
        self.rng.shuffle(ops)
        keys, values, append_keys, append_values = [], [], [], []
        tombstone = False
        for key, op in ops:
            keys.append(json.dumps(key).encode())
            append_keys.append(keys[-1])  # the append batch: every change's key with a row image, no op
            append_values.append(json.dumps(row_value(key, version, None)).encode())
            if op == "d":
                tombstone = not tombstone  # half of the deletes by op field, half by tombstone
                values.append(None if tombstone else json.dumps({"op": "d", "id": key}).encode())
                self.deleted.add(key)
                self.final[key] = None
            else:
                values.append(json.dumps(row_value(key, version, op)).encode())
                self.final[key] = version
        self.inserted += inserts
        self.removed += deletes
        return Batch(keys, values, inserts, updates, deletes, append_keys, append_values)

    def expected_touched(self) -> dict[int, int]:
        return {k: v for k, v in self.final.items() if v is not None}


class KafkaFrames:
    """Spark DataFrames with the Kafka source's schema; offsets continue across batches, per partition."""

    def __init__(self, spark: Any, topic: str) -> None:
        self.spark = spark
        self.topic = topic
        self.next_offset = [0] * KAFKA_PARTITIONS

    def frame(self, keys: list[bytes], values: list[Optional[bytes]]) -> Any:
        partitions = [zlib.crc32(k) % KAFKA_PARTITIONS for k in keys]
        offsets = []
        for p in partitions:
            offsets.append(self.next_offset[p])
            self.next_offset[p] += 1
        now = int(time.time() * 1_000_000)
        n = len(keys)
        table = pa.table({
            "key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
            "topic": pa.array([self.topic] * n, pa.string()), "partition": pa.array(partitions, pa.int32()),
            "offset": pa.array(offsets, pa.int64()), "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32()), "headers": pa.nulls(n, KAFKA_ARROW.field("headers").type),
        }, schema=KAFKA_ARROW)
        return self.spark.createDataFrame(table, schema=KAFKA_DDL)


class PeakRss:
    """Peak resident memory of this process's whole tree (driver, Spark's JVM, Python workers, the
    Iceberg Java child), sampled every 100 ms from /proc; :meth:`take` returns the peak since the last take."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, tree_rss_bytes(os.getpid()))

    def take(self) -> int:
        peak, self.peak = self.peak, 0
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------
# Tables and jobs
# ---------------------------------------------------------------------------


def job(work: Path, identifier: str, mode: str, target_mb: int) -> IngestJob:
    decode = DecodeSpec(EVENTS, mode=mode, op_field=OpField("op") if mode == "upsert" else None)  # type: ignore[arg-type]
    props = {properties.TARGET_FILE_SIZE.key: str(target_mb * MiB)}
    if mode == "upsert":
        props[properties.UPSERT_DELETE_STRATEGY.key] = "position"
    return IngestJob(
        source=SourceSpec("127.0.0.1:9", topics=(TOPIC,)),  # never contacted: the bench hands frames over itself
        table=TableSpec(identifier, decode, partition=PARTITION, properties=props),
        catalog=CatalogSpec(f"sqlite:///{work / 'catalog.db'}", str(work / "warehouse")),
        checkpoint_location=str(work / "checkpoint"),
        trigger=TriggerSpec(available_now=True),
    )


def write_base(catalog: Catalog, identifier: str, n: int, chunk_rows: int) -> tuple[list[DataFile], float]:
    """``n`` rows written with table/'s writers (the table's own writer options), one FastAppend."""
    loaded = catalog.load_table(identifier)
    metadata = loaded.metadata
    io = FileIO.for_location(loaded.metadata_location)
    options = WriterOptions.for_table(metadata).for_data()
    target = options.pop("target_file_size_bytes")
    started = time.monotonic()
    files = write_partitioned(io, metadata.location, metadata.schema(), metadata.spec(),
                              base_chunks(metadata.schema(), n, chunk_rows), target, **options)
    SnapshotProducer(catalog, identifier, FastAppend(files)).commit()
    return files, time.monotonic() - started


def processor(catalog: Catalog, ingest: IngestJob) -> Any:
    """The ``foreachBatch`` function as :func:`ingest.driver.stream.run_ingest` builds it, bound to a fresh writer id."""
    from prometheus_client import CollectorRegistry

    from ingest.driver.batch import BatchProcessor
    from ingest.driver.metrics import IngestMetrics

    loaded = ensure_table(catalog, ingest.table)
    metrics = IngestMetrics(CollectorRegistry())
    metrics.register_table(ingest.table.identifier)
    table = with_decode_schema(ingest.table, loaded.metadata.schema())
    bound = BatchProcessor(ingest, table, catalog, metrics)
    bound.bind(f"bench-{uuid.uuid4()}")
    return bound


def run_batch(process: Any, frame: Any, batch_id: int, expected_rows: int) -> float:
    started = time.monotonic()
    outcome = process.process(frame, batch_id)
    seconds = time.monotonic() - started
    if outcome.result != "committed" or outcome.rows_committed != expected_rows:
        raise SystemExit(f"batch {batch_id}: {outcome.result}, {outcome.rows_committed} rows committed, "
                         f"{expected_rows} expected ({outcome})")
    return seconds


def loaded_io(catalog: Catalog, identifier: str) -> tuple[str, FileIO, TableMetadata]:
    loaded = catalog.load_table(identifier)
    return loaded.metadata_location, FileIO.for_location(loaded.metadata_location), loaded.metadata


def file_counts(io: FileIO, metadata: TableMetadata) -> tuple[int, int, int]:
    """Live data files, their delete files, and data bytes."""
    tasks = list(TableScan(io, metadata).plan_files())
    return (len(tasks), len({d.file_path for t in tasks for d in t.delete_files}),
            sum(t.data_file.file_size_in_bytes for t in tasks))


def floe_read(io: FileIO, metadata: TableMetadata) -> tuple[float, int]:
    """Seconds and rows of a full read with Floe's reader, every column (batches dropped as they come)."""
    started = time.monotonic()
    rows = sum(b.num_rows for b in TableScan(io, metadata).to_batches())
    return time.monotonic() - started, rows


def check_touched(io: FileIO, metadata: TableMetadata, changes: Changes) -> None:
    """The rows with ``version > 0`` are exactly the final images of the keys the batches touched."""
    found = TableScan(io, metadata, row_filter=col("version") > 0, selected_fields=("id", "version")).to_arrow()
    got = dict(zip(found.column("id").to_pylist(), found.column("version").to_pylist()))
    expected = changes.expected_touched()
    if len(got) != found.num_rows or got != expected:
        missing = sorted(set(expected) - set(got))[:5]
        extra = sorted(set(got) - set(expected))[:5]
        wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])[:5]
        raise SystemExit(f"touched rows differ: {found.num_rows} rows ({len(got)} ids), {len(expected)} expected; "
                         f"missing {missing}, unexpected {extra}, wrong version {wrong}")


def compact(catalog: Catalog, identifier: str, target_mb: int) -> float:
    from prometheus_client import CollectorRegistry

    from compaction.maintenance import MaintenanceOptions
    from compaction.metrics import CompactionMetrics
    from compaction.runner import CompactionOptions, CompactionRunner

    # no expiry, no orphan removal: the append table shares the base data files
    maintenance = MaintenanceOptions(remove_dangling_deletes=True, expire_snapshots=False, remove_orphans=False)
    options = CompactionOptions({"rewrite-all": "true", "target-file-size-bytes": str(target_mb * MiB),
                                 "max-concurrent-file-group-rewrites": "2"}, maintenance)
    started = time.monotonic()
    report = CompactionRunner(catalog, identifier, options, CompactionMetrics(CollectorRegistry())).run()
    if report.result.value != "success":
        raise SystemExit(f"compaction of {identifier}: {report.result.value} {report.errors}")
    return time.monotonic() - started


# ---------------------------------------------------------------------------
# Iceberg Java reads, in a child process (its runtime never shares Floe's classpath)
# ---------------------------------------------------------------------------


def iceberg_reads(locations: list[str], reads: int, driver_memory: str) -> dict[str, dict[str, float]]:
    args = [sys.executable, __file__, "--iceberg-read", json.dumps({"locations": locations, "reads": reads,
                                                                   "memory": driver_memory})]
    done = subprocess.run(args, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-30:])
        raise SystemExit(f"the Iceberg Java reader failed (exit {done.returncode}):\n{tail}")
    return json.loads(lines[-1])


def iceberg_read_child(request: str) -> None:
    from pyspark.sql import SparkSession

    from runtime.jars import jar_paths
    from runtime.spark_session import local_spark_conf

    spec = json.loads(request)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.appName("iceberg-read-bench").config(
        "spark.jars", ",".join(jar_paths("iceberg-oracle")))
    conf = {**local_spark_conf(), "spark.driver.memory": spec["memory"],
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"}
    for key, val in conf.items():
        builder = builder.config(key, val)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results: dict[str, dict[str, float]] = {}
    for location in spec["locations"]:
        results[location] = {"rows": spark.read.format("iceberg").load(location).count(), "best_s": float("inf")}
    for _ in range(spec["reads"]):
        for location in spec["locations"]:  # interleaved: the machine is shared and noisy
            started = time.monotonic()
            spark.read.format("iceberg").load(location).write.format("noop").mode("overwrite").save()
            results[location]["best_s"] = min(results[location]["best_s"], time.monotonic() - started)
    print(json.dumps(results), flush=True)
    spark.stop()


# ---------------------------------------------------------------------------
# One table size
# ---------------------------------------------------------------------------


def bench_size(spark: Any, n: int, work: Path, args: argparse.Namespace, rss: PeakRss) -> dict[str, Any]:
    from service.index_command import rebuild_index

    work.mkdir(parents=True)
    upsert_job, append_job = job(work, UPSERT, "upsert", args.target_mb), job(work, APPEND, "append", args.target_mb)
    r: dict[str, Any] = {"n": n}
    started = time.monotonic()
    rss.take()
    with SqlCatalog(upsert_job.catalog.uri, upsert_job.catalog.warehouse, upsert_job.catalog.name) as catalog:
        ensure_table(catalog, upsert_job.table)
        files, r["base_s"] = write_base(catalog, UPSERT, n, args.chunk_rows)
        r["base_files"], r["base_mb"] = len(files), sum(f.file_size_in_bytes for f in files) / 1e6
        catalog.register_table(APPEND, catalog.load_table(UPSERT).metadata_location)  # same base files
        print(f"  base: {n:,} rows in {len(files)} files ({r['base_mb']:.0f} MB) written in {r['base_s']:.1f} s",
              flush=True)

        rebuilt = rebuild_index(catalog, UPSERT)
        r["index_build_s"] = rebuilt.seconds
        r["index_bytes_rebuilt"] = rebuilt.manifest.size_bytes / n
        print(f"  index build: {rebuilt.manifest.entries:,} keys, {rebuilt.manifest.size_bytes / 1e6:.1f} MB "
              f"in {rebuilt.seconds:.1f} s", flush=True)

        r["rss_setup"] = rss.take()

        upsert, append = processor(catalog, upsert_job), processor(catalog, append_job)
        changes = Changes(n, seed=n)
        upsert_frames, append_frames = KafkaFrames(spark, TOPIC), KafkaFrames(spark, TOPIC)
        up_times, app_times = [], []
        for batch_id in range(args.repeat + 1):  # batch 0: the warm-up
            batch = changes.draw(args.changes, version=batch_id + 1)
            up_frame = upsert_frames.frame(batch.keys, batch.values)
            app_frame = append_frames.frame(batch.append_keys, batch.append_values)
            up_s = run_batch(upsert, up_frame, batch_id, args.changes)
            app_s = run_batch(append, app_frame, batch_id, len(batch.append_values))
            label = "warm-up" if batch_id == 0 else f"batch {batch_id}"
            print(f"  {label}: upsert {up_s:.2f} s, append {app_s:.2f} s", flush=True)
            if batch_id == 0:
                r["warmup_upsert_s"], r["warmup_append_s"] = up_s, app_s
            else:
                up_times.append(up_s)
                app_times.append(app_s)
        r["upsert_s"], r["append_s"] = statistics.median(up_times), statistics.median(app_times)
        r["append_rows"] = len(batch.append_values)
        r["expected_rows"] = changes.live
        r["rss_batches"] = rss.take()

        location, io, metadata = loaded_io(catalog, UPSERT)
        manifest = current_manifest(io, metadata)
        assert manifest is not None, "the upsert table names no key index"
        r["index_bytes_after"] = manifest.size_bytes / changes.live
        r["index_segments"] = len(manifest.segments)
        check_touched(io, metadata, changes)
        if args.check_index:
            problems = index_problems(io, metadata, manifest)
            if problems:
                raise SystemExit("the key index disagrees with the table:\n  " + "\n  ".join(problems))
            print("  index check: the key index agrees with the table", flush=True)
        r["files_result"] = file_counts(io, metadata)
        r["floe_result_s"], rows = best_floe_read(io, metadata, args.reads)
        expect_rows("Floe, result", rows, changes.live)

        r["compact_s"] = compact(catalog, UPSERT, args.target_mb)
        compacted, io, metadata = loaded_io(catalog, UPSERT)
        r["files_compacted"] = file_counts(io, metadata)
        check_touched(io, metadata, changes)
        r["floe_compacted_s"], rows = best_floe_read(io, metadata, args.reads)
        expect_rows("Floe, compacted", rows, changes.live)
    r["rss_reads"] = rss.take()
    print(f"  reads (Floe): result {r['floe_result_s']:.2f} s, compacted {r['floe_compacted_s']:.2f} s; "
          f"compaction {r['compact_s']:.1f} s", flush=True)

    if not args.no_java:
        java = iceberg_reads([location, compacted], args.reads, args.driver_memory)
        for name, loc in (("result", location), ("compacted", compacted)):
            expect_rows(f"Iceberg Java, {name}", int(java[loc]["rows"]), changes.live)
            r[f"java_{name}_s"] = java[loc]["best_s"]
        print(f"  reads (Iceberg Java): result {r['java_result_s']:.2f} s, compacted {r['java_compacted_s']:.2f} s",
              flush=True)
    r["rss_java"] = rss.take()
    r["elapsed_s"] = time.monotonic() - started
    print(f"  {n:,} rows done in {r['elapsed_s']:.0f} s; peak RSS of the process tree (GB): setup "
          f"{r['rss_setup'] / 1e9:.1f}, batches {r['rss_batches'] / 1e9:.1f}, reads + compaction "
          f"{r['rss_reads'] / 1e9:.1f}, Iceberg Java reads {r['rss_java'] / 1e9:.1f}", flush=True)
    return r


def best_floe_read(io: FileIO, metadata: TableMetadata, reads: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(reads):
        seconds, rows = floe_read(io, metadata)
        best = min(best, seconds)
    return best, rows


def expect_rows(what: str, rows: int, expected: int) -> None:
    if rows != expected:
        raise SystemExit(f"{what}: {rows:,} rows read, {expected:,} expected (N + inserts - deletes)")


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    c = args.changes
    print(f"\nper batch: {c:,} changes ({UPDATES:.0%} updates, {DELETES:.0%} deletes, "
          f"{1 - UPDATES - DELETES:.0%} inserts); median of {args.repeat} after one warm-up; "
          f"append: {results[0]['append_rows']:,} rows per batch, one per change (a row image for a delete too), "
          f"no op field")
    print(f"\n{'rows':>11} {'base':>16} {'index build':>11} {'warm-up':>8} {'upsert s':>9} {'upsert r/s':>10} "
          f"{'append s':>9} {'append r/s':>10} {'up/app':>6} {'idx B/key':>13}")
    for r in results:
        up_rate, app_rate = c / r["upsert_s"], r["append_rows"] / r["append_s"]
        print(f"{r['n']:>11,} {r['base_files']:>4} files {r['base_mb']:>5.0f} MB {r['index_build_s']:>9.1f} s "
              f"{r['warmup_upsert_s']:>6.1f} s {r['upsert_s']:>9.2f} {up_rate:>10,.0f} {r['append_s']:>9.2f} "
              f"{app_rate:>10,.0f} {up_rate / app_rate:>6.2f} {r['index_bytes_rebuilt']:>5.1f} -> {r['index_bytes_after']:<5.1f}")
    print("  (idx B/key: index segment bytes per live key, after the rebuild -> after the batches)")

    java = not args.no_java
    print(f"\nread throughput, M rows/s, best of {args.reads} (Floe: one Python process; Iceberg Java: local[2]):")
    print(f"{'rows':>11} {'files (deletes)':>15} {'Floe result':>11} {'compacted':>9} {'ratio':>5}"
          + (f" {'Java result':>11} {'compacted':>9} {'ratio':>5}" if java else "") + f" {'compaction':>10}")
    for r in results:
        rows = r["expected_rows"] / 1e6
        files, deletes, _ = r["files_result"]
        line = (f"{r['n']:>11,} {files:>6} ({deletes:>3}) -> {r['files_compacted'][0]:<2} "
                f"{rows / r['floe_result_s']:>11.2f} {rows / r['floe_compacted_s']:>9.2f} "
                f"{r['floe_compacted_s'] / r['floe_result_s']:>5.2f}")
        if java:
            line += (f" {rows / r['java_result_s']:>11.2f} {rows / r['java_compacted_s']:>9.2f} "
                     f"{r['java_compacted_s'] / r['java_result_s']:>5.2f}")
        print(line + f" {r['compact_s']:>8.1f} s")
    print("  (ratio: result throughput / compacted throughput)")

    small, large = results[0], results[-1]
    growth = large["upsert_s"] / small["upsert_s"]
    ok_growth = growth <= 1.5
    print(f"\n{'PASS' if ok_growth else 'FAIL'}: per-batch time at {large['n']:,} rows is {growth:.2f}x that at "
          f"{small['n']:,} ({large['upsert_s']:.2f} s vs {small['upsert_s']:.2f} s; target <= 1.5x)")
    ok_rate = True
    for r in results:
        ratio = (c / r["upsert_s"]) / (r["append_rows"] / r["append_s"])
        ok_rate &= ratio >= 0.5
        print(f"{'PASS' if ratio >= 0.5 else 'FAIL'}: upsert throughput at {r['n']:,} rows is {ratio:.2f}x append "
              f"(target >= 0.5x)")
    return ok_growth and ok_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000,30000000", help="table sizes, comma-separated")
    parser.add_argument("--changes", type=int, default=20_000, help="change records per batch")
    parser.add_argument("--repeat", type=int, default=3, help="measured batches per size (after one warm-up)")
    parser.add_argument("--reads", type=int, default=2, help="reads per table state (best is reported)")
    parser.add_argument("--target-mb", type=int, default=128, help="write.target-file-size-bytes, in MiB")
    parser.add_argument("--chunk-rows", type=int, default=1_000_000, help="base rows generated at a time")
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory of both Spark sessions")
    parser.add_argument("--no-java", action="store_true", help="skip the Iceberg Java reads")
    parser.add_argument("--check-index", action="store_true",
                        help="also check the key index against the table after the batches (floe index check; "
                             "reads every live key)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--iceberg-read", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.iceberg_read:
        iceberg_read_child(args.iceberg_read)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(sizes) or min(sizes) <= 0:
        parser.error("--sizes: positive and ascending")

    from runtime.spark_session import build_spark_session

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="floe-bench-key-index-"))
    print(f"sizes {sizes}, {args.changes:,} changes per batch, work dir {work}", flush=True)
    spark = build_spark_session("floe-bench-key-index", {"spark.driver.memory": args.driver_memory,
                                                             "spark.sql.shuffle.partitions": "4"})
    results = []
    rss = PeakRss()
    try:
        for n in sizes:
            print(f"\n{n:,} rows:", flush=True)
            results.append(bench_size(spark, n, work / f"n{n}", args, rss))
            if not args.keep:
                shutil.rmtree(work / f"n{n}", ignore_errors=True)
    finally:
        rss.stop()
        spark.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(results, args)
    print(f"\nwhole run: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
