"""Benchmark: Floe's compactor against Iceberg's ``rewrite_data_files``, on copies of one table.

The table looks like what streaming upserts leave behind: ``--batches``
commits into ``bucket[4](id)``, each adding one small data file per bucket
(``--rows-per-batch`` rows of about 90 bytes), equality deletes for the keys it
updates (a quarter of its rows update earlier keys), and, every fifth
commit, position deletes erasing 2% of an earlier file. It is written once by
``table/`` + ``commit/`` into a SQLite catalog, then registered under three
more names pointing at the same metadata file: each contender compacts its
own copy (new files only; nothing of the source is changed or removed).

Contenders, each in a fresh child process so that memory is its own:

* ``floe``: ``CompactionRunner`` as the sidecar runs it (groups one after another, in process);
* ``floe-spark``: the same, groups as Spark tasks on ``local[2]`` (``SparkExecutor``);
* ``iceberg``: ``CALL system.rewrite_data_files`` in Spark ``local[2]`` with
  ``iceberg-spark-runtime`` through Iceberg's ``JdbcCatalog`` on the same catalog file.

All get the same options (target ``--target-mb``, ``max-concurrent-file-group-rewrites`` 2),
and both Spark contenders the same ``--driver-memory`` (default 1g, Spark's own).
Reported per contender: the rewrite's wall time (start-up excluded), input MB/s
(bytes of the replaced data files), files in and out, and the peak resident
memory of the child's whole process tree (Python and JVM, sampled every 50 ms
from /proc), next to its resident memory just before the rewrite began.
Read speed: Floe's merge-on-read reader over the source table and over each
compacted copy (best of ``--reads``); every copy must read the same rows.

``--no-deletes`` builds plain small files instead (inserts only), which
isolates the cost of applying deletes from the cost of rewriting.

    .venv/bin/python bench/compaction.py [--batches 60] [--rows-per-batch 40000] [--target-mb 32] [--no-deletes]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from bench.orders import ORDERS  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.operations.row_delta import RowDelta  # noqa: E402
from commit.snapshot_producer import SnapshotProducer  # noqa: E402
from table.arrow_schema import cast_to_schema  # noqa: E402
from table.deletes.writers import EqualityDeleteWriter, PositionDeleteWriter  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.manifest import DataFile  # noqa: E402
from table.parquet.partitioned import write_partitioned  # noqa: E402
from table.partitioning import build_partition_spec  # noqa: E402
from table.scan import TableScan  # noqa: E402
from table.transforms import BucketTransform  # noqa: E402

SCHEMA = ORDERS
BUCKETS = 4
CATALOG_NAME = "bench"
SOURCE = "db.source"
CONTENDERS = ("floe", "floe-spark", "iceberg")
T0_MICROS = 1_767_225_600_000_000  # 2026-01-01


# ---------------------------------------------------------------------------
# The source table
# ---------------------------------------------------------------------------


def batch_rows(first_new: int, rows: int, updated: pa.Array, seed: int) -> pa.Table:
    """``rows`` rows: ``updated`` earlier keys, then fresh keys from ``first_new``."""
    fresh = pa.array(range(first_new, first_new + rows - len(updated)), pa.int64())
    ids = pa.concat_arrays([updated.cast(pa.int64()), fresh])
    noise = pc.random(len(ids), initializer=seed)
    big = pc.cast(pc.floor(pc.multiply(noise, 1e15)), pa.int64())
    table = pa.table({
        "id": ids,
        "customer": pc.binary_join_element_wise("c", pc.cast(pc.divide(ids, 7), pa.string()), ""),
        "amount": pc.multiply(noise, 1000.0),
        "event_ts": pc.cast(pc.add(pc.multiply(ids, 1_000_000), T0_MICROS), pa.timestamp("us", "UTC")),
        "status": pc.if_else(pc.less(noise, 0.5), "paid", "shipped"),
        "note": pc.binary_join_element_wise("note-", pc.cast(big, pa.string()), pc.cast(ids, pa.string()), "-"),
    })
    return cast_to_schema(table, SCHEMA)


def equality_deletes(io: FileIO, location: str, spec: Any, ids: pa.Array) -> list[DataFile]:
    """One equality delete file per bucket of ``ids``."""
    buckets = BucketTransform(BUCKETS).apply_arrow(ids)
    files = []
    for bucket in range(BUCKETS):
        chosen = pc.filter(ids, pc.equal(buckets, bucket))
        if len(chosen) == 0:
            continue
        writer = EqualityDeleteWriter(io, f"{location}/data", SCHEMA, spec, (bucket,), [1])
        writer.write(cast_to_schema(pa.table({"id": chosen}), SCHEMA.select("id")))
        files += writer.close()
    return files


def position_deletes(io: FileIO, location: str, spec: Any, data_file: DataFile, fraction: float) -> list[DataFile]:
    step = max(1, round(1 / fraction))
    writer = PositionDeleteWriter(io, f"{location}/data", SCHEMA, spec, data_file.partition)
    for pos in range(0, data_file.record_count, step):
        writer.delete(data_file.file_path, pos)
    return writer.close()


def build_source(catalog: Catalog, batches: int, rows_per_batch: int, with_deletes: bool) -> dict[str, float]:
    catalog.create_namespace("db")
    spec = build_partition_spec(SCHEMA, [(f"bucket[{BUCKETS}]", "id")])
    loaded = catalog.create_table(SOURCE, SCHEMA, spec)
    io, location = FileIO.for_location(loaded.metadata_location), loaded.metadata.location
    next_id, written = 0, []
    started = time.monotonic()
    for b in range(batches):
        updates = min(next_id, rows_per_batch // 4) if with_deletes else 0
        updated = pc.cast(pc.floor(pc.multiply(pc.random(updates, initializer=b), max(next_id - 1, 0))), pa.int64())
        updated = pc.unique(updated)
        rows = batch_rows(next_id, rows_per_batch, updated, seed=b)
        next_id += rows_per_batch - len(updated)
        data = write_partitioned(io, location, SCHEMA, spec, [rows])
        deletes = equality_deletes(io, location, spec, updated) if len(updated) else []
        if with_deletes and b % 5 == 4:
            deletes += position_deletes(io, location, spec, written[b // 2 * BUCKETS], 0.02)
        SnapshotProducer(catalog, SOURCE, RowDelta(data, deletes)).commit()
        written += data
    return {"seconds": time.monotonic() - started, "data_files": len(written),
            "data_mb": sum(f.file_size_in_bytes for f in written) / 1e6}


# ---------------------------------------------------------------------------
# Children: one contender each
# ---------------------------------------------------------------------------


def rewrite_options(target_mb: int) -> dict[str, str]:
    return {"target-file-size-bytes": str(target_mb * 1024 * 1024), "max-concurrent-file-group-rewrites": "2"}


def floe_child(work: str, table: str, target_mb: int, spark_executor: bool, driver_memory: str) -> None:
    from prometheus_client import CollectorRegistry

    from compaction.maintenance import MaintenanceOptions
    from compaction.metrics import CompactionMetrics
    from compaction.runner import CompactionOptions, CompactionRunner

    spark = None
    if spark_executor:
        from runtime.spark_session import build_spark_session

        spark = build_spark_session("floe-compaction-bench", {"spark.driver.memory": driver_memory})
        spark.sparkContext.parallelize([1, 2], 2).count()  # executors up before the clock starts
    registry = CollectorRegistry()
    off = MaintenanceOptions(remove_dangling_deletes=False, expire_snapshots=False, remove_orphans=False)
    with SqlCatalog(f"sqlite:///{work}/catalog.db", f"{work}/warehouse", CATALOG_NAME) as catalog:
        runner = CompactionRunner(catalog, table, CompactionOptions(rewrite_options(target_mb), off),
                                  CompactionMetrics(registry), spark)
        print("READY", flush=True)
        started = time.monotonic()
        report = runner.run()
        seconds = time.monotonic() - started
    assert report.result.value == "success", report.errors

    def total(name: str) -> float:
        return registry.get_sample_value(name, {"table": table}) or 0.0

    print(json.dumps({"seconds": seconds,
                      "input_bytes": total("floe_compaction_bytes_rewritten_total"),
                      "files_in": total("floe_compaction_data_files_rewritten_total"),
                      "files_out": total("floe_compaction_files_added_total")}), flush=True)


def iceberg_child(work: str, table: str, target_mb: int, driver_memory: str) -> None:
    from pyspark.sql import SparkSession

    from runtime.jars import jar_paths
    from runtime.spark_session import local_spark_conf

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.appName("iceberg-compaction-bench").config(
        "spark.jars", ",".join(jar_paths("iceberg-oracle")))
    conf = {**local_spark_conf(), "spark.driver.memory": driver_memory,
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            f"spark.sql.catalog.{CATALOG_NAME}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{CATALOG_NAME}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            f"spark.sql.catalog.{CATALOG_NAME}.uri": f"jdbc:sqlite:{work}/catalog.db",
            f"spark.sql.catalog.{CATALOG_NAME}.warehouse": f"{work}/warehouse"}
    for key, val in conf.items():
        builder = builder.config(key, val)
    spark = builder.getOrCreate()
    spark.sql(f"SELECT count(*) FROM {CATALOG_NAME}.{table}.snapshots").collect()  # catalog and JVM warm
    options = ", ".join(f"'{k}', '{v}'" for k, v in rewrite_options(target_mb).items())
    print("READY", flush=True)
    started = time.monotonic()
    [row] = spark.sql(f"CALL {CATALOG_NAME}.system.rewrite_data_files(table => '{table}', "
                      f"options => map({options}))").collect()
    seconds = time.monotonic() - started
    print(json.dumps({"seconds": seconds, "input_bytes": row["rewritten_bytes_count"],
                      "files_in": row["rewritten_data_files_count"], "files_out": row["added_data_files_count"]}),
          flush=True)
    spark.stop()


# ---------------------------------------------------------------------------
# Measuring a child
# ---------------------------------------------------------------------------


def tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total


def run_child(args: list[str]) -> dict[str, Any]:
    """Run a contender; its figures plus peak tree RSS, and the RSS when it said READY."""
    process = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True,
                               stderr=subprocess.DEVNULL)
    peak, at_ready, done = [0], [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_bytes(process.pid))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result: Optional[dict[str, Any]] = None
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("READY"):
            at_ready[0] = tree_rss_bytes(process.pid)
        elif line.startswith("{"):
            result = json.loads(line)
    done.set()
    sampler.join()
    if process.wait() != 0 or result is None:
        raise RuntimeError(f"contender {args} failed (exit {process.returncode})")
    return {**result, "peak_rss_mb": peak[0] / 2**20, "ready_rss_mb": at_ready[0] / 2**20}


def read_speed(catalog: Catalog, table: str, repeat: int) -> tuple[float, pa.Table]:
    """Best rows/s of Floe's merge-on-read reader over ``table``, and its rows."""
    best, rows = 0.0, None
    for _ in range(repeat):
        loaded = catalog.load_table(table)
        started = time.monotonic()
        rows = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()
        best = max(best, rows.num_rows / (time.monotonic() - started))
    assert rows is not None
    return best, rows


def live_counts(catalog: Catalog, table: str) -> tuple[int, int]:
    loaded = catalog.load_table(table)
    tasks = list(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).plan_files())
    return len(tasks), len({d.file_path for t in tasks for d in t.delete_files})


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    order = [("id", "ascending")]
    return a.sort_by(order).equals(b.select(a.column_names).sort_by(order))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rows-per-batch", type=int, default=40_000)
    parser.add_argument("--target-mb", type=int, default=32)
    parser.add_argument("--reads", type=int, default=2)
    parser.add_argument("--no-deletes", action="store_true", help="small files only: no updates, no deletes")
    parser.add_argument("--only", choices=CONTENDERS, action="append")
    parser.add_argument("--driver-memory", default="1g", help="spark.driver.memory of both Spark contenders (Spark's default: 1g)")
    parser.add_argument("--child", nargs=5, metavar=("KIND", "WORK", "TABLE", "TARGET_MB", "MEMORY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, work, table, target, memory = args.child
        if kind == "iceberg":
            iceberg_child(work, table, int(target), memory)
        else:
            floe_child(work, table, int(target), kind == "floe-spark", memory)
        return
    with tempfile.TemporaryDirectory(prefix="floe-compaction-bench-") as tmp:
        bench(Path(tmp), args)


def bench(work: Path, args: argparse.Namespace) -> None:
    contenders = args.only or list(CONTENDERS)
    with SqlCatalog(f"sqlite:///{work}/catalog.db", f"{work}/warehouse", CATALOG_NAME) as catalog:
        built = build_source(catalog, args.batches, args.rows_per_batch, not args.no_deletes)
        source = catalog.load_table(SOURCE)
        for name in contenders:
            catalog.register_table(f"db.{name.replace('-', '_')}", source.metadata_location)
        files, deletes = live_counts(catalog, SOURCE)
        print(f"source: {args.batches} commits, {files} data files ({built['data_mb']:.0f} MB), "
              f"{deletes} delete files; written in {built['seconds']:.0f} s")
        before, expected = read_speed(catalog, SOURCE, args.reads)
        print(f"read before: {before / 1e6:.2f} M rows/s ({expected.num_rows} rows, Floe reader)\n")
        print(f"{'contender':<11} {'rewrite s':>9} {'MB/s in':>8} {'files':>11} {'peak RSS':>9} "
              f"{'RSS@start':>9} {'read after':>12} {'deletes left':>12}")
        for name in contenders:
            table = f"db.{name.replace('-', '_')}"
            figures = run_child(["--child", name, str(work), table, str(args.target_mb), args.driver_memory])
            speed, rows = read_speed(catalog, table, args.reads)
            assert same_rows(expected, rows), f"{name}: the compacted table reads different rows"
            files_after, deletes_after = live_counts(catalog, table)
            print(f"{name:<11} {figures['seconds']:>9.1f} {figures['input_bytes'] / 1e6 / figures['seconds']:>8.1f} "
                  f"{int(figures['files_in']):>5}->{files_after:<5} {figures['peak_rss_mb']:>6.0f} MB "
                  f"{figures['ready_rss_mb']:>6.0f} MB {speed / 1e6:>6.2f} M r/s {deletes_after:>12}", flush=True)


if __name__ == "__main__":
    main()
