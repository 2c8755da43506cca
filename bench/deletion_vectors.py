"""Benchmark: format v3 deletion vectors (DVs) against v2 position delete files, read and write.

One process, two tables of the same data files: ``--files`` data files of
the ``orders`` rows are written once and appended (the same ``DataFile``
entries, one ``FastAppend`` each) to a v3 table and to a v2 table. Then
``--deleted-fraction`` of the rows are deleted at random, the same positions
in both, in ``--delete-batches`` commits, as a streaming writer would: each
commit deletes rows of every data file. In the v3 table each commit writes
one Puffin file with a DV per data file, merging the file's previous DV into
it (``merge_existing``; the commit removes the old one: one DV per data file,
as the spec requires). In the v2 table each commit adds one position delete
file naming every data file (as bench/position_deletes.py).

Read: the v3 table's snapshot before the deletes (no deletes: the reference),
its snapshot with the DVs, and the v2 snapshot with the position deletes,
read with Floe's reader, interleaved, best of ``--repeat``, because this
machine is shared and noisy. Twice: the whole scan (``TableScan.to_batches``,
planning included) and ``read_tasks`` alone over tasks planned before.
Throughput is in data-file rows read per second. The target: DVs read at
least 0.9x the reference, in both; the run exits 1 when either misses it.
Floe's reader applies deletes while a helper thread reads ahead, so this
measures two cores; ``taskset -c 0`` measures one.
Before timing, the DV and position-delete snapshots are read once and must
return exactly rows - deleted, the same ids, and every DV task must carry
exactly one DV (so the benchmark cannot pass by reading wrong).

Write cost per batch: ``--batch-deletes`` more positions (rows still live,
drawn at random over all data files), written (a) as DVs with
``DeletionVectorWriter``, merging each touched file's current DV, against
(b) one v2 position delete file with ``PositionDeleteWriter`` (the table is
unpartitioned: one writer); then each committed with ``RowDelta`` (the DVs
removing the ones they replace). Interleaved, best of ``--repeat``, each
repeat a new batch. The commits are real, so each table grows by
``--repeat`` commits here (the reads are timed before). The DV writer gets
the positions grouped by data file, as the upsert driver has them; the
position writer the same positions as one (file_path, pos) batch. Reported:
ms per batch (write, commit, both) and bytes written. A DV rewrites the whole
vector of every file it touches, so its bytes follow all the deletes in the
file (at 10% random, Roaring bitmap containers: about a byte per 8 rows of
the data file), where a position delete file holds the batch's rows only.

    .venv/bin/python bench/deletion_vectors.py [--rows 2000000] [--files 8] \
        [--deleted-fraction 0.1] [--delete-batches 10] [--batch-deletes 5000] \
        [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orders import ORDERS  # noqa: E402
from bench.position_deletes import random_deletes, timed_read, write_data  # noqa: E402
from bench.table_io import make_rows  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.operations.fast_append import FastAppend  # noqa: E402
from commit.operations.row_delta import RowDelta  # noqa: E402
from commit.snapshot_producer import SnapshotProducer  # noqa: E402
from table.deletes.positions import group_by_path  # noqa: E402
from table.deletes.writers import DeletionVectorWriter, PositionDeleteWriter  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.manifest import DataFile  # noqa: E402
from table.metadata import TableMetadata  # noqa: E402
from table.partitioning import UNPARTITIONED_SPEC  # noqa: E402
from table.scan import TableScan  # noqa: E402

V3 = "bench.vectors"
V2 = "bench.positions"
TARGET = 0.9


@dataclass
class Tables:
    """The two tables and what was deleted from them."""

    catalog: Catalog
    io: FileIO
    locations: dict[str, str]
    files: dict[str, DataFile]  # data file path -> entry
    before: int = 0  # the v3 snapshot without deletes
    batches: int = 0  # delete commits made by build_tables
    deleted: dict[str, np.ndarray] = field(default_factory=dict)  # data file path -> deleted positions
    vectors: dict[str, DataFile] = field(default_factory=dict)  # data file path -> its live DV

    @property
    def deleted_rows(self) -> int:
        return sum(len(p) for p in self.deleted.values())


@dataclass
class Written:
    """One batch of deletes, written and committed."""

    write_s: float
    commit_s: float
    files: int
    bytes: int


def by_file(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    """Data file path -> the positions a ``(file_path, pos)`` batch deletes in it."""
    groups = group_by_path(batch.column("file_path"), batch.column("pos"))
    return {path: pa.concat_arrays(parts).to_numpy() for path, parts in groups.items()}


def commit_vectors(t: Tables, deletes: dict[str, np.ndarray]) -> Written:
    """One Puffin file: a DV per data file of ``deletes``, each merged with the file's current DV."""
    start = time.perf_counter()
    writer = DeletionVectorWriter(t.io, f"{t.locations[V3]}/data")
    for path, positions in deletes.items():
        f = t.files[path]
        if path in t.vectors:
            writer.merge_existing(path, [t.vectors[path]], f.spec_id, f.partition)
        writer.delete(path, positions, f.spec_id, f.partition)
    written = writer.close()
    wrote = time.perf_counter()
    SnapshotProducer(t.catalog, V3, RowDelta(delete_files=written, removed_delete_files=writer.replaced)).commit()
    committed = time.perf_counter()
    t.vectors.update({dv.referenced_data_file: dv for dv in written})
    sizes = {dv.file_path: dv.file_size_in_bytes for dv in written}  # the DVs share one Puffin file
    return Written(wrote - start, committed - wrote, len(sizes), sum(sizes.values()))


def commit_positions(t: Tables, batch: pa.RecordBatch) -> Written:
    """One position delete file of the batch (the table is unpartitioned: one writer)."""
    start = time.perf_counter()
    writer = PositionDeleteWriter(t.io, f"{t.locations[V2]}/data", ORDERS, UNPARTITIONED_SPEC, ())
    writer.write(batch)
    written = writer.close()
    wrote = time.perf_counter()
    SnapshotProducer(t.catalog, V2, RowDelta(delete_files=written)).commit()
    committed = time.perf_counter()
    return Written(wrote - start, committed - wrote, len(written), sum(f.file_size_in_bytes for f in written))


def note_deleted(t: Tables, deletes: dict[str, np.ndarray]) -> None:
    for path, positions in deletes.items():
        t.deleted[path] = np.union1d(t.deleted.get(path, np.empty(0, np.int64)), positions)


def build_tables(catalog: Catalog, rows: pa.Table, args: argparse.Namespace) -> Tables:
    """The data files, appended to both tables, then the same deletes as DVs (v3) and position deletes (v2)."""
    catalog.create_namespace("bench")
    v3 = catalog.create_table(V3, ORDERS, properties={"format-version": "3"})
    v2 = catalog.create_table(V2, ORDERS)
    if (v3.metadata.format_version, v2.metadata.format_version) != (3, 2):
        raise SystemExit(f"format versions {v3.metadata.format_version} and {v2.metadata.format_version}, expected 3 and 2")
    io = FileIO.for_location(v3.metadata_location)
    files = write_data(io, v3.metadata.location, rows, args.files)
    t = Tables(catalog, io, {V3: v3.metadata.location, V2: v2.metadata.location}, {f.file_path: f for f in files})
    t.before = SnapshotProducer(catalog, V3, FastAppend(files)).commit().snapshot_id
    SnapshotProducer(catalog, V2, FastAppend(files)).commit()
    for batch in random_deletes(files, args.deleted_fraction, args.delete_batches):
        deletes = by_file(batch)
        commit_vectors(t, deletes)
        commit_positions(t, batch)
        note_deleted(t, deletes)
        t.batches += 1
    return t


def live_ids(io: FileIO, metadata: TableMetadata, snapshot_id: Optional[int] = None) -> np.ndarray:
    """The sorted ``id`` column of a snapshot, read with Floe's whole scan."""
    scan = TableScan(io, metadata, selected_fields=("id",), snapshot_id=snapshot_id)
    return np.sort(scan.to_arrow().column("id").to_numpy())


def check_reads(t: Tables, v3: TableMetadata, v2: TableMetadata, rows: int, batches: Optional[int]) -> None:
    """The DV and position-delete snapshots give exactly rows - deleted, the same ids; one DV per task."""
    expected = rows - t.deleted_rows
    dv_ids, pos_ids = live_ids(t.io, v3), live_ids(t.io, v2)
    for name, ids in (("DVs", dv_ids), ("position deletes", pos_ids)):
        if len(ids) != expected or len(np.unique(ids)) != len(ids):
            raise SystemExit(f"{name}: {len(ids):,} live rows ({len(np.unique(ids)):,} ids), expected {expected:,}")
    if not np.array_equal(dv_ids, pos_ids):
        raise SystemExit("the DV read and the position-delete read return different rows")
    for task in TableScan(t.io, v3).plan_files():
        deletes = task.delete_files
        if len(deletes) != 1 or not deletes[0].is_deletion_vector:
            raise SystemExit(f"{task.data_file.file_path}: {len(deletes)} delete files, expected its one DV")
        if deletes[0].record_count != len(t.deleted[task.data_file.file_path]):
            raise SystemExit(f"{task.data_file.file_path}: its DV deletes {deletes[0].record_count:,} rows, "
                             f"expected {len(t.deleted[task.data_file.file_path]):,}")
    if batches is not None:
        for task in TableScan(t.io, v2).plan_files():
            if len(task.delete_files) != batches:
                raise SystemExit(f"{task.data_file.file_path}: {len(task.delete_files)} position delete files, "
                                 f"expected {batches}")


def bench_reads(t: Tables, v3: TableMetadata, v2: TableMetadata, args: argparse.Namespace) -> dict[tuple[bool, str], float]:
    """Best seconds of each (planned, contender), interleaved."""
    contenders = (("none", v3, t.before), ("dv", v3, None), ("positions", v2, None))
    expected = {"none": args.rows, "dv": args.rows - t.deleted_rows, "positions": args.rows - t.deleted_rows}
    best: dict[tuple[bool, str], float] = {}
    for _ in range(args.repeat):
        for planned in (False, True):
            for name, metadata, snapshot in contenders:
                seconds, live = timed_read(t.io, metadata, snapshot, planned)
                if live != expected[name]:
                    raise SystemExit(f"{name}: {live:,} live rows, expected {expected[name]:,}")
                best[planned, name] = min(best.get((planned, name), float("inf")), seconds)
    return best


def new_batch(t: Tables, size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``size`` live rows drawn at random over all data files, by data file (sorted positions)."""
    paths = sorted(t.files)
    live = [np.setdiff1d(np.arange(t.files[p].record_count), t.deleted.get(p, ())) for p in paths]
    offsets = np.cumsum([0] + [len(x) for x in live])
    if size > offsets[-1]:
        raise SystemExit(f"--batch-deletes {size:,}: only {offsets[-1]:,} rows are left")
    chosen = np.sort(rng.choice(offsets[-1], size, replace=False))
    batch = {}
    for i, path in enumerate(paths):
        mine = chosen[(chosen >= offsets[i]) & (chosen < offsets[i + 1])] - offsets[i]
        if len(mine):
            batch[path] = live[i][mine].astype(np.int64)
    return batch


def as_record_batch(deletes: dict[str, np.ndarray]) -> pa.RecordBatch:
    paths = [path for path, positions in deletes.items() for _ in range(len(positions))]
    return pa.record_batch({"file_path": paths, "pos": pa.array(np.concatenate(list(deletes.values())), pa.int64())})


def bench_writes(t: Tables, args: argparse.Namespace) -> dict[str, list[Written]]:
    """Each repeat: one new batch, committed as DVs and as a position delete file (alternating which goes first)."""
    rng = np.random.default_rng(23)
    runs: dict[str, list[Written]] = {"dv": [], "positions": []}
    for i in range(args.repeat):
        deletes = new_batch(t, args.batch_deletes, rng)
        batch = as_record_batch(deletes)
        order = ("dv", "positions") if i % 2 == 0 else ("positions", "dv")
        for name in order:
            runs[name].append(commit_vectors(t, deletes) if name == "dv" else commit_positions(t, batch))
        note_deleted(t, deletes)
    return runs


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e6:6.2f} M rows/s  ({seconds:.3f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8, help="data files")
    parser.add_argument("--deleted-fraction", type=float, default=0.1)
    parser.add_argument("--delete-batches", type=int, default=10, help="delete commits before the reads")
    parser.add_argument("--batch-deletes", type=int, default=5_000, help="positions per batch of the write cost")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one scan with DVs")
    args = parser.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print("parameters:", ", ".join(f"{k}={v}" for k, v in vars(args).items()))

    work = Path(tempfile.mkdtemp(prefix="floe-bench-vectors-"))
    try:
        with SqlCatalog(f"sqlite:///{work}/catalog.db", f"{work}/warehouse", "bench") as catalog:
            start = time.perf_counter()
            t = build_tables(catalog, make_rows(args.rows), args)
            v3, v2 = catalog.load_table(V3).metadata, catalog.load_table(V2).metadata
            batches = t.batches
            check_reads(t, v3, v2, args.rows, batches)
            print(f"setup and checks: {time.perf_counter() - start:.1f} s")
            best = bench_reads(t, v3, v2, args)
            print(f"\nrows: {args.rows:,} in {args.files} data files, {t.deleted_rows:,} deleted "
                  f"({t.deleted_rows / args.rows:.1%}) by {batches} commits: v3 one DV per data file "
                  f"(merged each commit), v2 {batches} position delete files; best of {args.repeat}")
            passed = True
            for planned, title in ((False, "scan: plan + read"), (True, "read only: read_tasks over planned tasks")):
                none, dv, pos = (best[planned, name] for name in ("none", "dv", "positions"))
                ok = none / dv >= TARGET
                passed &= ok
                print(f"{title} (data-file rows/s):")
                print(f"  no deletes (ref)          {rate(args.rows, none)}")
                print(f"  v3 deletion vectors       {rate(args.rows, dv)}")
                print(f"  v2 position deletes       {rate(args.rows, pos)}")
                print(f"  DVs / reference           {none / dv:.3f}x (target >= {TARGET:.2f}x): {'PASS' if ok else 'FAIL'}")
                print(f"  positions / reference     {none / pos:.3f}x")
                print(f"  DVs / positions           {pos / dv:.3f}x")

            if args.profile:
                profiler = cProfile.Profile()
                profiler.runcall(timed_read, t.io, v3, None, False)
                pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
                pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)

            deleted_before = t.deleted_rows
            runs = bench_writes(t, args)
            print(f"\nwrite cost of a batch of {args.batch_deletes:,} deleted positions over {args.files} data files "
                  f"(tables already holding {deleted_before:,} deletes, +{args.batch_deletes:,} a repeat); "
                  f"best of {args.repeat}, interleaved:")
            print(f"  {'':24}{'write ms':>10}{'commit ms':>11}{'total ms':>10}{'files':>7}{'bytes':>11}")
            for name, title in (("dv", "v3 DVs (merged)"), ("positions", "v2 position deletes")):
                r = runs[name]
                write, commit = min(w.write_s for w in r), min(w.commit_s for w in r)
                total = min(w.write_s + w.commit_s for w in r)
                print(f"  {title:24}{write * 1e3:10.1f}{commit * 1e3:11.1f}{total * 1e3:10.1f}{r[-1].files:7}"
                      f"{r[-1].bytes:11,}")
            dv_total = min(w.write_s + w.commit_s for w in runs["dv"])
            pos_total = min(w.write_s + w.commit_s for w in runs["positions"])
            dv_bytes = [w.bytes for w in runs["dv"]]
            print(f"  DV / position cost per batch: {dv_total / pos_total:.2f}x; DV bytes per repeat: "
                  f"{', '.join(f'{b:,}' for b in dv_bytes)} (whole vectors: sized by all of each file's deletes, not the batch's)")

            v3, v2 = catalog.load_table(V3).metadata, catalog.load_table(V2).metadata
            check_reads(t, v3, v2, args.rows, None)
            print(f"after the write batches both tables read {args.rows - t.deleted_rows:,} identical rows; "
                  f"one DV per data file")
            print(f"\nDV read target (>= {TARGET:.2f}x of the delete-free read, scan and read-only): "
                  f"{'PASS' if passed else 'FAIL'}")
            if not passed:
                sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
