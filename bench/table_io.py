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

from table.arrow_schema import schema_to_arrow  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.parquet.writer import DataFileWriter, parquet_writer_options  # noqa: E402
from table.partitioning import UNPARTITIONED_SPEC  # noqa: E402
from table.scan import TableScan  # noqa: E402
from table.schema import Schema  # noqa: E402
from table.types import DoubleType, LongType, NestedField, StringType, TimestamptzType  # noqa: E402
from tests.support.table_builder import HandWrittenTable  # noqa: E402

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "customer", StringType()),
    NestedField(3, "amount", DoubleType()),
    NestedField(4, "event_ts", TimestamptzType()),
    NestedField(5, "status", StringType()),
)


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


def build_tables(rows: pa.Table, work: Path) -> dict[str, HandWrittenTable]:
    """Three copies of one table: no deletes, 10% by position, 10% by equality."""
    tables = {}
    for name in ("none", "position", "equality"):
        t = HandWrittenTable.create(str(work / f"t_{name}"), SCHEMA)
        files = t.write_data(rows, target_file_size_bytes=64 * 1024 * 1024)
        t.commit(files)
        if name == "position":
            deletes = [t.write_position_deletes(f, range(0, f.record_count, 10)) for f in files]
            t.commit(deletes, "delete")
        elif name == "equality":
            ids = pa.table({"id": pa.array(range(0, rows.num_rows, 10), pa.int64())})
            t.commit([t.write_equality_deletes(ids)], "delete")
        tables[name] = t
    return tables


def bench_read(tables: dict[str, HandWrittenTable], repeat: int) -> dict[str, tuple[float, int]]:
    results = {}
    for name, t in tables.items():
        count = {}

        def scan() -> None:
            count["rows"] = sum(b.num_rows for b in TableScan(t.io, t.metadata).to_batches())

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

        reads = bench_read(build_tables(rows, work), args.repeat)
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
