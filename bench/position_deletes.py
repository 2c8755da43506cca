"""Benchmark: Floe's reader applying position deletes.

One table, written and committed with table/'s writers and commit/: ``--files``
data files of the ``orders`` rows, then ``--deleted-fraction`` of its rows
deleted by position, at random, as a streaming writer would: each of
``--delete-batches`` commits adds one position delete file, and every delete
file holds deletes for every data file (so each data file's reader must pick
its rows out of every delete file).

Figures: reading the snapshot with the deletes against reading the same
table's snapshot before them (same data files, no deletes: the reference),
interleaved in one process, best of ``--repeat``, because this machine is
shared and noisy. Twice: the whole scan (planning reads one more delete
manifest per commit), and ``read_tasks`` alone over tasks planned before.
Throughput is in data-file rows read per second; the target is a ratio of at
least 0.8.

    .venv/bin/python bench/position_deletes.py [--rows 2000000] [--files 8] \
        [--deleted-fraction 0.1] [--delete-batches 10] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orders import ORDERS  # noqa: E402
from bench.table_io import make_rows  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.operations.fast_append import FastAppend  # noqa: E402
from commit.operations.row_delta import RowDelta  # noqa: E402
from commit.snapshot_producer import SnapshotProducer  # noqa: E402
from table.deletes.writers import PositionDeleteWriter  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.manifest import DataFile  # noqa: E402
from table.metadata import TableMetadata  # noqa: E402
from table.parquet.writer import DataFileWriter  # noqa: E402
from table.partitioning import UNPARTITIONED_SPEC  # noqa: E402
from table.reader import read_tasks  # noqa: E402
from table.scan import TableScan  # noqa: E402

IDENT = "bench.positions"


def write_data(io: FileIO, location: str, rows: pa.Table, files: int) -> list[DataFile]:
    """``files`` data files of about equal row counts (one writer each, so exactly ``files``)."""
    per_file = -(-rows.num_rows // files)
    written = []
    for start in range(0, rows.num_rows, per_file):
        with DataFileWriter(io, f"{location}/data", ORDERS, UNPARTITIONED_SPEC, ()) as writer:
            writer.write(rows.slice(start, per_file))
        written += writer.close()
    return written


def random_deletes(files: list[DataFile], fraction: float, batches: int, seed: int = 11) -> list[pa.RecordBatch]:
    """A random ``fraction`` of every file's rows, shuffled and cut into ``batches``
    ``(file_path, pos)`` batches: each batch deletes rows of every data file."""
    rng = random.Random(seed)
    pairs = [(f.file_path, p) for f in files for p in rng.sample(range(f.record_count), int(f.record_count * fraction))]
    rng.shuffle(pairs)
    size = -(-len(pairs) // batches)
    chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
    return [
        pa.record_batch({"file_path": [path for path, _ in chunk], "pos": pa.array([p for _, p in chunk], pa.int64())})
        for chunk in chunks
    ]


def build_table(catalog: Catalog, rows: pa.Table, args: argparse.Namespace) -> tuple[int, int]:
    """Commit the data, then one position delete file per commit.
    (snapshot id without deletes, number of deleted rows)."""
    catalog.create_namespace("bench")
    loaded = catalog.create_table(IDENT, ORDERS)
    io, location = FileIO.for_location(loaded.metadata_location), loaded.metadata.location
    files = write_data(io, location, rows, args.files)
    before = SnapshotProducer(catalog, IDENT, FastAppend(files)).commit().snapshot_id
    deleted = 0
    for batch in random_deletes(files, args.deleted_fraction, args.delete_batches):
        writer = PositionDeleteWriter(io, f"{location}/data", ORDERS, UNPARTITIONED_SPEC, ())
        writer.write(batch)
        SnapshotProducer(catalog, IDENT, RowDelta(delete_files=writer.close())).commit()
        deleted += batch.num_rows
    return before, deleted


def timed_read(io: FileIO, metadata: TableMetadata, snapshot_id: Optional[int], planned: bool) -> tuple[float, int]:
    """(seconds, live rows) of reading a snapshot: the whole scan (plan and
    read), or when ``planned`` only ``read_tasks`` over tasks planned before."""
    scan = TableScan(io, metadata, snapshot_id=snapshot_id)
    tasks = list(scan.plan_files()) if planned else None
    start = time.perf_counter()
    if tasks is None:
        batches = scan.to_batches()
    else:
        batches = read_tasks(io, tasks, scan.projected_schema(), table_schema=scan.schema())
    rows = sum(b.num_rows for b in batches)
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8, help="data files")
    parser.add_argument("--deleted-fraction", type=float, default=0.1)
    parser.add_argument("--delete-batches", type=int, default=10, help="position delete files, one per commit")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one scan with deletes")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="floe-bench-positions-"))
    try:
        with SqlCatalog(f"sqlite:///{work}/catalog.db", f"{work}/warehouse", "bench") as catalog:
            before, deleted = build_table(catalog, make_rows(args.rows), args)
            loaded = catalog.load_table(IDENT)
            io, metadata = FileIO.for_location(loaded.metadata_location), loaded.metadata
            snapshots = (("none", before), ("deletes", None))
            runs = [(planned, name, snapshot) for planned in (False, True) for name, snapshot in snapshots]
            best = {(planned, name): float("inf") for planned, name, _ in runs}
            expected = {"none": args.rows, "deletes": args.rows - deleted}
            for _ in range(args.repeat):
                for planned, name, snapshot in runs:
                    seconds, live = timed_read(io, metadata, snapshot, planned)
                    if live != expected[name]:
                        raise SystemExit(f"{name}: {live:,} live rows, expected {expected[name]:,}")
                    best[planned, name] = min(best[planned, name], seconds)
            print(f"rows: {args.rows:,} in {args.files} data files, {deleted:,} deleted ({args.deleted_fraction:.0%}) "
                  f"by {args.delete_batches} position delete files, one per commit; best of {args.repeat}")
            for planned, title in ((False, "scan: plan + read"), (True, "read only: read_tasks over planned tasks")):
                none, deletes = best[planned, "none"], best[planned, "deletes"]
                print(f"{title} (data-file rows/s):")
                print(f"  no deletes (ref)       {args.rows / none:12,.0f} rows/s  ({none:.3f} s)")
                print(f"  with position deletes  {args.rows / deletes:12,.0f} rows/s  ({deletes:.3f} s)")
                print(f"  ratio                  {none / deletes:.2f}x of the reference (target >= 0.80x)")
            if args.profile:
                profiler = cProfile.Profile()
                profiler.runcall(timed_read, io, metadata, None, False)
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
