"""Benchmark: table/'s Parquet writer and merge-on-read reader.

Write: table/'s ``DataFileWriter`` (field ids, metrics, rolling) against a
bare ``pyarrow.parquet.write_table`` of the same rows, same compression.
Read: Floe's merge-on-read scan with 10% of the rows deleted by position, and
by equality, against the same scan with no deletes.

Both sides of each comparison run in the same process, interleaved, best of
``--repeat``, because this machine is shared and noisy.

    .venv/bin/python bench/table_io.py [--rows 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orders import ORDERS  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.operations.fast_append import FastAppend  # noqa: E402
from commit.operations.row_delta import RowDelta  # noqa: E402
from commit.snapshot_producer import SnapshotProducer  # noqa: E402
from table.arrow_schema import cast_to_schema, schema_to_arrow  # noqa: E402
from table.deletes.writers import EqualityDeleteWriter, PositionDeleteWriter  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.manifest import DataFile  # noqa: E402
from table.parquet.partitioned import write_partitioned  # noqa: E402
from table.parquet.writer import DataFileWriter, parquet_writer_options  # noqa: E402
from table.partitioning import UNPARTITIONED_SPEC  # noqa: E402
from table.scan import TableScan  # noqa: E402

SCHEMA = ORDERS


def make_rows(n: int) -> pa.Table:
    rng = random.Random(7)
    statuses = ["new", "paid", "shipped", "cancelled"]
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "customer": pa.array([f"customer-{i % 50_000:06d}" for i in range(n)]),
            "amount": pa.array([rng.uniform(0, 1000) for _ in range(n)]),
            "event_ts": pa.array(
                [1_767_225_600_000_000 + rng.randrange(86_400_000_000) for _ in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "status": pa.array([statuses[rng.randrange(4)] for _ in range(n)]),
            "note": pa.nulls(n, pa.string()),
        },
        schema=schema_to_arrow(SCHEMA),
    )


def best_of(repeat: int, run: Callable[[], None]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_write(rows: pa.Table, work: Path, repeat: int) -> tuple[float, float]:
    io = FileIO.for_location(str(work))
    options = parquet_writer_options()

    def floe() -> None:
        target = work / "floe"
        shutil.rmtree(target, ignore_errors=True)
        with DataFileWriter(io, str(target), SCHEMA, UNPARTITIONED_SPEC, ()) as writer:
            writer.write(rows)

    def bare() -> None:
        target = work / "bare"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        pq.write_table(rows, target / "f.parquet", compression=options.get("compression", "zstd"))

    floe_s = best_of(repeat, floe)
    bare_s = best_of(repeat, bare)
    return floe_s, bare_s


def build_tables(catalog: Catalog, rows: pa.Table) -> dict[str, str]:
    """Three copies of one table, committed through Floe's own commit path:
    no deletes, 10% deleted by position, 10% by equality. Name -> table identifier."""
    catalog.create_namespace("bench")
    tables = {}
    for name in ("none", "position", "equality"):
        ident = f"bench.t_{name}"
        loaded = catalog.create_table(ident, SCHEMA)
        io, location = FileIO.for_location(loaded.metadata_location), loaded.metadata.location
        files = write_partitioned(io, location, SCHEMA, UNPARTITIONED_SPEC, [rows], 64 * 1024 * 1024)
        SnapshotProducer(catalog, ident, FastAppend(files)).commit()
        if name == "position":
            SnapshotProducer(catalog, ident, RowDelta(delete_files=position_deletes(io, location, files))).commit()
        elif name == "equality":
            SnapshotProducer(catalog, ident, RowDelta(delete_files=[equality_deletes(io, location, rows)])).commit()
        tables[name] = ident
    return tables


def position_deletes(io: FileIO, location: str, files: list[DataFile]) -> list[DataFile]:
    """Every 10th row of each data file, one delete file per data file."""
    deletes = []
    for f in files:
        writer = PositionDeleteWriter(io, f"{location}/data", SCHEMA, UNPARTITIONED_SPEC, ())
        for pos in range(0, f.record_count, 10):
            writer.delete(f.file_path, pos)
        deletes += writer.close()
    return deletes


def equality_deletes(io: FileIO, location: str, rows: pa.Table) -> DataFile:
    """Every 10th id, in one equality delete file."""
    ids = pa.table({"id": pa.array(range(0, rows.num_rows, 10), pa.int64())})
    writer = EqualityDeleteWriter(io, f"{location}/data", SCHEMA, UNPARTITIONED_SPEC, (), [1])
    writer.write(cast_to_schema(ids, SCHEMA.select("id")))
    [delete_file] = writer.close()
    return delete_file


def bench_read(catalog: Catalog, tables: dict[str, str], repeat: int) -> dict[str, tuple[float, int]]:
    results = {}
    for name, ident in tables.items():
        loaded = catalog.load_table(ident)
        io = FileIO.for_location(loaded.metadata_location)
        count = {}

        def scan() -> None:
            count["rows"] = sum(b.num_rows for b in TableScan(io, loaded.metadata).to_batches())

        results[name] = (best_of(repeat, scan), count["rows"])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    rows = make_rows(args.rows)
    mb = rows.nbytes / 1e6
    work = Path(tempfile.mkdtemp(prefix="floe-bench-table-"))
    try:
        floe_s, bare_s = bench_write(rows, work, args.repeat)
        print(f"rows: {args.rows:,}  arrow size: {mb:.1f} MB  best of {args.repeat}")
        print("write throughput (rows/s, arrow MB/s):")
        print(f"  table/ DataFileWriter      {args.rows / floe_s:12,.0f} rows/s  {mb / floe_s:8.1f} MB/s  ({floe_s:.2f} s)")
        print(f"  pyarrow write_table (ref)  {args.rows / bare_s:12,.0f} rows/s  {mb / bare_s:8.1f} MB/s  ({bare_s:.2f} s)")
        print(f"  ratio table/ : pyarrow      {bare_s / floe_s:.2f}x of the reference throughput")

        with SqlCatalog(f"sqlite:///{work}/catalog.db", f"{work}/warehouse", "bench") as catalog:
            reads = bench_read(catalog, build_tables(catalog, rows), args.repeat)
        base_s, base_rows = reads["none"]
        print("merge-on-read scan throughput (input rows/s):")
        for name, (seconds, live) in reads.items():
            label = {"none": "no deletes (ref)", "position": "10% position-deleted", "equality": "10% equality-deleted"}[name]
            ratio = base_s / seconds
            print(f"  {label:24s} {args.rows / seconds:12,.0f} rows/s  live rows {live:,}  ({seconds:.2f} s, {ratio:.2f}x of ref)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
