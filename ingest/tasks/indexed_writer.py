"""Upserts with position deletes: the steps of a batch that use the key index.

Under the ``position`` delete strategy (``floe.upsert.delete-strategy``) an
upsert batch deletes each touched key's previous row by position, found
through the key index (:mod:`commit.key_index`, docs/key-index-design.md).
After the reduction, which runs on rows exchanged by index bucket:

1. :func:`lookup_previous_rows` (per bucket): each change's key is looked up;
   a key with a live row yields a *delete row* (``_floe_delete_file``,
   ``_floe_delete_pos``), routed to the old file's partition.
2. :class:`IndexedTaskWriter` (per table partition): data files for final
   images, position delete files for delete rows, and the index entries of
   the batch: each written row's key with its new file and position, a
   tombstone for each deleted key, as ``index_entries`` rows per bucket.
3. :func:`write_index_segments` (per bucket): a delta segment, or a merged
   base, per touched bucket; ``index_segment`` rows go back to the driver.
   After a small batch the driver does this itself on the write output
   (:func:`write_index_segments_here`): one Spark stage fewer.

A small index (up to ``floe.key-index.map-side-lookup-max-bytes``, 256 MiB) is
looked up map-side instead, as Spark broadcasts a small join side: the decode
tasks give each change row its key's previous ``(file, pos)``
(:func:`decode_and_look_up`), the reduction keeps one change per key with it,
and the writer deletes it. There is no lookup stage, and when the key
determines the partition one exchange serves the reduction and the writer:
two Spark stages, as an append has. Each executor then caches the whole
index, which is why a big one keeps the exchange by bucket.

The driver plans the batch (:func:`plan_index`: the index to start from, built
from the table when there is none or it is stale) and commits the files and
the index change in one swap (:func:`index_update`).
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commit.key_index.bucket_change import BucketChange, find_keys, write_change
from commit.key_index.manifest import (
    IndexManifest,
    manifest_from_json,
)
from commit.key_index.segments import FILE, FILE_TYPE, POS, keys_of
from ingest.tasks.changes import ChangeKind
from ingest.tasks.decode_records import OP_COLUMN
from ingest.tasks.frame import (
    BUCKET_COLUMN,
    DELETE_FILE_COLUMN,
    DELETE_POS_COLUMN,
    PKEY_COLUMN,
    FrameSpec,
    decode_frame,
)
from ingest.tasks.output import (
    DV_POSITIONS,
    INDEX_ENTRIES,
    INDEX_SEGMENT,
    REFERENCED,
    ipc_payload,
    ipc_table,
    split_kind,
    stats_batch,
    written_batch,
    written_rows,
)
from ingest.tasks.transport import table_batch
from ingest.tasks.writer import TaskWriter, WriteTask, task_prefix, write_all
from table.arrow_schema import cast_to_schema
from table.deletes.writers import PositionDeleteWriter
from table.io import FileIO
from table.manifest import DataFile
from table.parquet.writer import FileNameFactory, abort_all
from table.partitioning import partition_key, partition_spec_from_json, split_by_partition
from table.schema import Schema, schema_from_json

log = logging.getLogger("floe.ingest")

_DELETE_ROUTE = b"\x1d"  # routing keys of delete rows: never a data row's partition key
_BUCKET = "__floe_bucket"


@dataclass(frozen=True)
class IndexPlan:
    """What the lookup, write and index tasks of one batch need; plain data, shipped to executors.

    ``live_files`` maps each live data file to the ordinal of its partition in
    ``partitions`` ((spec id, partition tuple)); a delete row is routed by it.
    """

    manifest: str
    location: str
    schema: str
    key_ids: tuple[int, ...]
    io: FileIO  # the table's, with its vended credentials: the index lives beside the table
    live_files: tuple[tuple[str, int], ...] = ()
    partitions: tuple[tuple[int, tuple[Any, ...]], ...] = ()
    specs: tuple[tuple[int, str], ...] = ()
    max_deltas: int = 8
    deletion_vectors: bool = False  # v3: tasks return deleted positions, the driver writes DVs

    def index(self) -> IndexManifest:
        return _parsed_manifest(self.manifest)

    def table_schema(self) -> Schema:
        return _parsed_schema(self.schema)

    def key_schema(self) -> Schema:
        return self.table_schema().project(self.key_ids)


@lru_cache(maxsize=8)
def _parsed_manifest(text: str) -> IndexManifest:
    return manifest_from_json(json.loads(text), "the batch's key index")


@lru_cache(maxsize=8)
def _parsed_schema(text: str) -> Schema:
    return schema_from_json(json.loads(text))


# ---------------------------------------------------------------------------
# Step 1: find the previous rows
# ---------------------------------------------------------------------------


def lookup_previous_rows(batches: Iterator[pa.RecordBatch], plan: IndexPlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: every row passes, and after each batch a delete row per key that had a live row."""
    io = plan.io
    manifest = plan.index()
    key_schema = plan.key_schema()
    routes = _routes(plan.live_files)
    for batch in batches:
        yield batch
        changes = batch.filter(pc.is_valid(batch.column(OP_COLUMN)))
        if changes.num_rows == 0:
            continue
        keys = keys_of(table_batch(changes, key_schema), key_schema, plan.key_ids)
        buckets = changes.column(BUCKET_COLUMN)
        found_files, found_positions = [], []
        for bucket in pc.unique(buckets).to_pylist():
            files, positions = find_keys(io, manifest, bucket, keys.filter(pc.equal(buckets, bucket)))
            live = files.is_valid()
            found_files.append(files.filter(live))
            found_positions.append(positions.filter(live))
        deletes = _delete_rows(batch.schema, found_files, found_positions, routes)
        if deletes.num_rows:
            yield deletes


def decode_and_look_up(
    batches: Iterator[pa.RecordBatch], frame: FrameSpec, plan: IndexPlan
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body when the index is small (map-side lookup): decode, then give each change
    row the ``(file, pos)`` of its key's live row, if any, in the delete columns.

    Every change of a key gets the same position (the index as of the batch's
    start), so whichever the reduction keeps carries it to the writer, which
    deletes it there: no lookup stage and no exchange by bucket.
    """
    io = plan.io
    manifest = plan.index()
    key_schema = plan.key_schema()
    for batch in decode_frame(batches, frame):
        yield _with_previous_rows(batch, io, manifest, key_schema, plan.key_ids)


def _with_previous_rows(
    batch: pa.RecordBatch, io: FileIO, manifest: IndexManifest, key_schema: Schema, key_ids: tuple[int, ...]
) -> pa.RecordBatch:
    is_change = pc.is_valid(batch.column(OP_COLUMN))
    if not pc.any(is_change).as_py():
        return batch
    rows = np.flatnonzero(is_change.to_numpy(zero_copy_only=False))
    changes = batch.take(pa.array(rows))
    keys = keys_of(table_batch(changes, key_schema), key_schema, key_ids)
    files, positions = previous_rows(io, manifest, keys, changes.column(BUCKET_COLUMN).to_numpy())
    spread = np.full(batch.num_rows, len(rows), dtype=np.int64)  # a row that is no change: the null after them
    spread[rows] = np.arange(len(rows))
    at = pa.array(spread)
    columns = {
        DELETE_FILE_COLUMN: pa.concat_arrays([files, pa.nulls(1, pa.string())]).take(at),
        DELETE_POS_COLUMN: pa.concat_arrays([positions, pa.nulls(1, pa.int64())]).take(at),
    }
    return pa.RecordBatch.from_arrays(
        [columns.get(f.name, batch.column(f.name)) for f in batch.schema], schema=batch.schema
    )


def look_up_changes(changes: pa.Table, keys: pa.Table, plan: IndexPlan) -> pa.Table:
    """``changes`` (change rows only; ``keys`` their keys, row for row) with each key's live row, if any, in
    the delete columns: one lookup per bucket for a whole task's reduced changes (the direct upsert)."""
    io = plan.io
    files, positions = previous_rows(io, plan.index(), keys, changes.column(BUCKET_COLUMN).to_numpy())
    changes = changes.set_column(changes.schema.get_field_index(DELETE_FILE_COLUMN), DELETE_FILE_COLUMN, files)
    return changes.set_column(changes.schema.get_field_index(DELETE_POS_COLUMN), DELETE_POS_COLUMN, positions)


def previous_rows(
    io: FileIO, manifest: IndexManifest, keys: pa.Table, buckets: np.ndarray
) -> tuple[pa.Array, pa.Array]:
    """The file and position of each key's live row (both null: none), aligned with ``keys``.

    Each bucket's keys are looked up in one call: a call costs about as much as a few hundred keys.
    """
    order, files, positions = [], [], []
    for bucket in np.unique(buckets):
        mine = np.flatnonzero(buckets == bucket)
        found_files, found_positions = find_keys(io, manifest, int(bucket), keys.take(pa.array(mine)))
        order.append(mine)
        files.append(_array(found_files))
        positions.append(_array(found_positions))
    if not order:
        return pa.array([], pa.string()), pa.array([], pa.int64())
    back = np.empty(len(buckets), dtype=np.int64)
    back[np.concatenate(order)] = np.arange(len(buckets))
    at = pa.array(back)
    found = pa.concat_arrays(files).take(at).cast(pa.string())
    located = pc.if_else(pc.is_valid(found), pa.concat_arrays(positions).take(at).cast(pa.int64()), None)
    return found, located


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


@lru_cache(maxsize=4)
def _routes(live_files: tuple[tuple[str, int], ...]) -> dict[str, bytes]:
    return {path: _DELETE_ROUTE + str(ordinal).encode() for path, ordinal in live_files}


def _delete_rows(
    schema: pa.Schema, files: list[pa.Array], positions: list[pa.Array], routes: dict[str, bytes]
) -> pa.RecordBatch:
    paths = pa.concat_arrays(files) if files else pa.array([], pa.string())
    n = len(paths)
    route = []
    for path in paths.to_pylist():
        found = routes.get(path)
        if found is None:
            raise LookupError(f"the key index points at {path}, which is not a live data file of the table")
        route.append(found)
    by_name = {
        PKEY_COLUMN: pa.array(route, pa.binary()),
        DELETE_FILE_COLUMN: paths,
        DELETE_POS_COLUMN: pa.concat_arrays(positions) if positions else pa.array([], pa.int64()),
    }
    return pa.RecordBatch.from_arrays([by_name.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


# ---------------------------------------------------------------------------
# Step 2: write data, position deletes and index entries
# ---------------------------------------------------------------------------


@dataclass
class _Written:
    """Rows of one partition written from one batch: where they start in the partition's output."""

    partition: Any
    first: int
    keys: pa.Table  # key columns, then the bucket


class IndexedTaskWriter(TaskWriter):
    """A write task under the position strategy (see the module docstring, step 2)."""

    def __init__(self, task: WriteTask, plan: IndexPlan, io: FileIO, names: FileNameFactory) -> None:
        super().__init__(task, io, names)
        self.plan = plan
        self.io = io
        self.names = names
        self.key_schema = plan.key_schema()
        self.position_deletes: dict[int, PositionDeleteWriter] = {}
        self.vector_positions: list[pa.Table] = []  # v3: (file_path, pos, partition ordinal), for the driver
        self.written: list[_Written] = []
        self.tombstones: list[pa.Table] = []
        self.referenced: set[str] = set()
        self.specs = {spec_id: partition_spec_from_json(json.loads(text)) for spec_id, text in plan.specs}

    def write(self, batch: pa.RecordBatch) -> None:
        deleting = pc.is_valid(batch.column(DELETE_FILE_COLUMN))
        if pc.any(deleting).as_py():
            delete_rows = pc.and_(deleting, pc.is_null(batch.column(OP_COLUMN)))  # the lookup stage's rows
            self._delete_positions(self._routed(batch.filter(deleting)))
            batch = batch.filter(pc.invert(delete_rows))  # a change with its previous row attached stays
        if batch.num_rows == 0:
            return
        ops = batch.column(OP_COLUMN)
        upserts = pc.equal(ops, pa.scalar(int(ChangeKind.UPSERT), ops.type))
        deleted = batch.filter(pc.invert(upserts))
        if deleted.num_rows:
            self.deleted_keys += deleted.num_rows
            keys = keys_of(table_batch(deleted, self.key_schema), self.key_schema, self.plan.key_ids)
            self.tombstones.append(keys.append_column(_BUCKET, deleted.column(BUCKET_COLUMN)))
        rows = batch.filter(upserts)
        if rows.num_rows:
            touched = self._write_rows(rows)
            if self.task.clustered:
                self.data.close_except(touched)

    def _write_rows(self, rows: pa.RecordBatch) -> set[Any]:
        table_rows = cast_to_schema(table_batch(rows, self.schema), self.schema)
        keys = keys_of(table_rows, self.schema, self.plan.key_ids).append_column(_BUCKET, rows.column(BUCKET_COLUMN))
        names = table_rows.schema.names
        combined = pa.RecordBatch.from_arrays(
            [*table_rows.columns, *(c.combine_chunks() for c in keys.columns)],
            schema=pa.schema([*table_rows.schema, *keys.schema]),
        )
        touched = set()
        for partition, part in split_by_partition(combined, self.schema, self.spec):
            first = self.data.write_partition(partition, part.select(names))
            key = partition_key(self.spec.spec_id, partition)
            self.written.append(_Written(key, first, pa.Table.from_batches([part.select(keys.column_names)])))
            touched.add(key)
        return touched

    def _routed(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """``rows`` with a delete's route as their partition key: a change row that carries its
        key's previous row (map-side lookup) is routed by that row's file, as a lookup row is."""
        if pc.all(pc.is_null(rows.column(OP_COLUMN))).as_py():
            return rows
        routes = _routes(self.plan.live_files)
        paths = rows.column(DELETE_FILE_COLUMN)
        missing = [p for p in pc.unique(paths).to_pylist() if p not in routes]
        if missing:
            raise LookupError(f"the key index points at {missing[0]}, which is not a live data file of the table")
        route = pa.array([routes[p] for p in paths.to_pylist()], pa.binary())
        return rows.set_column(rows.schema.get_field_index(PKEY_COLUMN), PKEY_COLUMN, route)

    def _delete_positions(self, rows: pa.RecordBatch) -> None:
        routes = rows.column(PKEY_COLUMN)
        for route in pc.unique(routes).to_pylist():
            ordinal = int(route[len(_DELETE_ROUTE) :])
            part = rows.filter(pc.equal(routes, pa.scalar(route, pa.binary())))
            self.referenced.update(pc.unique(part.column(DELETE_FILE_COLUMN)).to_pylist())
            if self.plan.deletion_vectors:
                self.vector_positions.append(
                    pa.table(
                        {
                            "file_path": part.column(DELETE_FILE_COLUMN),
                            "pos": part.column(DELETE_POS_COLUMN),
                            "ordinal": pa.array(np.full(part.num_rows, ordinal, np.int32)),
                        }
                    )
                )
                continue
            writer = self.position_deletes.get(ordinal)
            if writer is None:
                spec_id, partition = self.plan.partitions[ordinal]
                writer = self.position_deletes[ordinal] = PositionDeleteWriter(
                    self.io,
                    self.task.data_location,
                    self.schema,
                    self.specs[spec_id],
                    partition,
                    file_name_factory=self.names,
                    **self.task.writer.for_deletes(),
                )
            writer.write(
                pa.record_batch({"file_path": part.column(DELETE_FILE_COLUMN), "pos": part.column(DELETE_POS_COLUMN)})
            )

    def finish_indexed(self) -> tuple[list[DataFile], list[DataFile], dict[int, pa.Table]]:
        """The data files, the position delete files and the index entries per bucket."""
        by_partition = self.data.close_by_partition()
        outputs = {partition_key(self.spec.spec_id, p): files for p, files in by_partition}
        deletes = [f for w in self.position_deletes.values() for f in w.close()]
        entries = [_located(w, outputs[w.partition]) for w in self.written]
        entries += [_tombstones(t) for t in self.tombstones]
        return [f for _, files in by_partition for f in files], deletes, _by_bucket(entries)

    def abort(self) -> None:
        abort_all([self.data, *self.position_deletes.values()])


def write_indexed(batches: Iterator[pa.RecordBatch], task: WriteTask, plan: IndexPlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of step 2: write every row, then the files, the index entries and the stats rows."""
    writer = IndexedTaskWriter(task, plan, task.io, FileNameFactory(task_prefix()))
    (data, deletes, entries), stats = write_all(batches, writer, writer.finish_indexed)
    yield written_batch(data, deletes, writer.deleted_keys)
    if writer.referenced:
        yield written_rows(
            [REFERENCED], [json.dumps(sorted(writer.referenced)).encode()], [len(writer.referenced)], [0]
        )
    if writer.vector_positions:
        positions = pa.concat_tables(writer.vector_positions)
        yield written_rows([DV_POSITIONS], [ipc_payload(positions)], [positions.num_rows], [0])
    if entries:
        yield index_entry_rows(entries)
    if stats:
        yield stats_batch(stats)


def _located(written: _Written, files: Sequence[DataFile]) -> pa.Table:
    """The rows' keys with the file and position each row landed at (files roll by size).

    The file is a dictionary column (:data:`~commit.key_index.segments.FILE_TYPE`, as a segment holds
    it): a task's rows land in a few files, and a path per key as text would be about 100 bytes a key
    on its way to the index writer (25 MB for a batch of 250 k keys).
    """
    ends = np.cumsum([f.record_count for f in files])
    ordinals = np.arange(written.first, written.first + written.keys.num_rows, dtype=np.int64)
    which = np.searchsorted(ends, ordinals, side="right")
    starts = np.concatenate([[0], ends[:-1]])
    paths = pa.DictionaryArray.from_arrays(pa.array(which, pa.int32()), pa.array([f.file_path for f in files]))
    return written.keys.append_column(FILE, paths).append_column(POS, pa.array(ordinals - starts[which], pa.int64()))


def _tombstones(keys: pa.Table) -> pa.Table:
    n = keys.num_rows
    return keys.append_column(FILE, pa.nulls(n, FILE_TYPE)).append_column(POS, pa.array([0] * n, pa.int64()))


def _by_bucket(entries: list[pa.Table]) -> dict[int, pa.Table]:
    if not entries:
        return {}
    table = pa.concat_tables(entries)
    buckets = table.column(_BUCKET)
    rest = [n for n in table.column_names if n != _BUCKET]
    return {b: table.filter(pc.equal(buckets, b)).select(rest) for b in pc.unique(buckets).to_pylist()}


def index_entry_rows(entries: dict[int, pa.Table]) -> pa.RecordBatch:
    """One ``index_entries`` row per bucket: the entries as an Arrow IPC stream."""
    kinds, payloads, records, buckets = [], [], [], []
    for bucket, table in sorted(entries.items()):
        kinds.append(INDEX_ENTRIES)
        payloads.append(ipc_payload(table))
        records.append(table.num_rows)
        buckets.append(bucket)
    return written_rows(kinds, payloads, records, [0] * len(kinds), buckets)


# ---------------------------------------------------------------------------
# Step 3: the index segments
# ---------------------------------------------------------------------------


def write_index_segments(batches: Iterator[pa.RecordBatch], plan: IndexPlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over the write output exchanged by bucket: other rows pass, entries become segments."""
    entries: dict[int, list[pa.Table]] = {}
    for batch in batches:
        others = take_entries(batch, entries)
        if others.num_rows:
            yield others
    segments = segment_rows(entries, plan)
    if segments is not None:
        yield segments


def take_entries(batch: pa.RecordBatch, entries: dict[int, list[pa.Table]]) -> pa.RecordBatch:
    """``batch`` without its ``index_entries`` rows, whose tables are added to ``entries`` by bucket."""
    part, others = split_kind(batch, INDEX_ENTRIES)
    for payload, bucket in zip(part.column("payload").to_pylist(), part.column("bucket").to_pylist()):
        entries.setdefault(bucket, []).append(ipc_table(payload))
    return others


def segment_rows(entries: dict[int, list[pa.Table]], plan: IndexPlan, threads: int = 1) -> pa.RecordBatch | None:
    """Write each bucket's segment (``threads`` buckets at a time); one ``index_segment`` row per bucket
    (None: no entries)."""
    if not entries:
        return None
    io = plan.io
    manifest = plan.index()

    def write(bucket: int) -> tuple[BucketChange, float]:
        started = time.monotonic()
        change = write_change(io, manifest, plan.location, bucket, pa.concat_tables(entries[bucket]), plan.max_deltas)
        return change, time.monotonic() - started

    buckets = sorted(entries)
    if threads > 1 and len(buckets) > 1:
        with ThreadPoolExecutor(min(threads, len(buckets)), thread_name_prefix="floe-index") as pool:
            changes = list(pool.map(write, buckets))
    else:
        changes = [write(bucket) for bucket in buckets]
    return written_rows(
        [INDEX_SEGMENT] * len(buckets),
        [pickle.dumps(written) for written in changes],
        [change.segment.rows for change, _ in changes],
        [change.segment.size_bytes for change, _ in changes],
        buckets,
    )
