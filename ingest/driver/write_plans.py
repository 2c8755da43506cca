"""How a micro-batch is written: the write plans, and the one place that chooses among them.

Each plan is the batch's one Spark job. It returns a
:class:`~ingest.driver.batch_write.BatchWrite`, which owns the files until the
commit takes them:

* :class:`DirectAppend` (``direct``): an append into a table that wants its
  rows neither clustered nor sorted; the decode tasks write
  (:mod:`ingest.tasks.direct`).
* :class:`Exchange` (``exchange``): decode; in upsert mode reduce each key to
  its last change (:mod:`ingest.driver.reduction`); repartition by table
  partition, sort by it and the table's sort order, and write, upserts with
  equality deletes (:mod:`ingest.tasks.writer`).
* :class:`IndexedUpsert`: an upsert under the position strategy, which finds
  each key's previous row through the key index
  (:mod:`ingest.tasks.indexed_writer`). It writes in one of three ways. Where
  the index is small, the table wants no exchange and the batch is small, the
  decode tasks reduce, look up and write (``direct-upsert``), unless a key's
  changes turn out to span two tasks. Otherwise a small index is looked up
  map-side, with one exchange. A big one is looked up after an exchange by
  index bucket. After a small batch the driver writes the index segments.

:class:`PlanChooser` picks the plan from the table, its metadata, the batch's
size and what earlier batches showed. Those observations are the only state
kept between batches.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from commit.catalog.base import LoadedTable
from ingest.arrow_udf import map_in_arrow
from ingest.driver.batch_write import BatchIndex, BatchWrite, delete_uncommitted
from ingest.driver.key_index_steps import (
    IndexStart,
    keys_in_two_tasks,
    plan_index,
    read_index_changes,
    read_referenced,
    write_batch_vectors,
    write_index_segments_here,
)
from ingest.driver.offset_accounting import batch_stats
from ingest.driver.reduction import key_column, reduce_to_latest
from ingest.job import TableSpec
from ingest.kafka_source.rows import KafkaRows
from ingest.tasks.direct import DirectTask, DirectUpsertTask, decode_and_write, decode_reduce_and_write
from ingest.tasks.frame import BUCKET_COLUMN, PKEY_COLUMN, FrameSpec, decode_frame, frame_spark_schema
from ingest.tasks.indexed_writer import decode_and_look_up, lookup_previous_rows, write_index_segments, write_indexed
from ingest.tasks.output import OUTPUT_DDL, read_stats, read_written
from ingest.tasks.writer import WriteTask, keys_determine_partition, write_files
from table import properties
from table.io import FileIO
from table.metadata import TableMetadata
from table.sort_order import NullOrder, SortDirection

log = logging.getLogger("floe.ingest")

DRIVER_INDEX_WRITE_MAX_CHANGES = 200_000
"""A position-strategy batch whose predecessor changed at most this many keys writes its index
segments on the driver (a few MB of entries, one Spark stage fewer, which is faster: see
docs/performance.md); bigger batches (back-fills) write them in a stage of their own, spread
over the executors."""


@dataclass(frozen=True)
class BatchSource:
    """The batch's records, and whether its decode tasks need their headers (slow to ship)."""

    rows: KafkaRows
    headers: bool


class WritePlan(Protocol):
    def write(self, source: BatchSource) -> BatchWrite:
        """Run the batch's Spark job; its files, aggregate and (position strategy) index change."""
        ...


@dataclass(frozen=True)
class DirectAppend:
    table: TableSpec
    metadata: TableMetadata
    io: FileIO

    def task(self) -> DirectTask:
        """What the decode tasks of this table do: decode, write, and the bad-record policy."""
        write = WriteTask.for_table(self.metadata, self.io, (), clustered=False, sorted_by_order=False)
        return DirectTask(self.table.decode, write, self.table.identifier, _fails(self.table))

    def write(self, source: BatchSource) -> BatchWrite:
        task = self.task()
        out = source.rows.map(partial(decode_and_write, task=task), OUTPUT_DDL, source.headers).toArrow()
        return BatchWrite(read_written(out), batch_stats(read_stats(out)), "direct", self.io)


@dataclass(frozen=True)
class Exchange:
    table: TableSpec
    metadata: TableMetadata
    io: FileIO

    def write(self, source: BatchSource) -> BatchWrite:
        from pyspark.sql import functions as F

        spec, equality_ids = self.metadata.spec(), equality_ids_of(self.table, self.metadata)
        frame = FrameSpec(
            self.table.decode,
            json.dumps(spec.to_json()) if spec.fields else "",
            keys_determine_partition(spec, equality_ids),
            _fails(self.table),
            self.table.identifier,
        )
        schema = frame_spark_schema(self.table.decode.table_schema())
        rows = source.rows.map(partial(decode_frame, frame=frame), schema, source.headers)
        clustered = False
        if self.table.mode == "upsert":
            if spec.fields and frame.keyed_deletes:  # one exchange serves the reduction and the writer
                rows = reduce_to_latest(rows.repartition(F.col(PKEY_COLUMN)), self.table.key_fields(), [PKEY_COLUMN])
                clustered = True
            else:
                rows = reduce_to_latest(rows, self.table.key_fields())
        if spec.fields and not clustered:
            rows = rows.repartition(F.col(PKEY_COLUMN))
        rows, sorted_by_order = _sorted_for_writing(rows, self.metadata)
        task = WriteTask.for_table(
            self.metadata, self.io, equality_ids, clustered=bool(spec.fields), sorted_by_order=sorted_by_order
        )
        out = map_in_arrow(rows, partial(write_files, task=task), OUTPUT_DDL).toArrow()
        return BatchWrite(read_written(out), batch_stats(read_stats(out)), "exchange", self.io)


@dataclass(frozen=True)
class IndexedUpsert:
    """An upsert under the position strategy, starting from the key index ``start``."""

    table: TableSpec
    metadata: TableMetadata
    io: FileIO
    start: IndexStart
    try_direct: bool  # the decode tasks may write (see PlanChooser)
    segments_on_driver: bool  # a small batch: the driver writes the index segments

    def write(self, source: BatchSource) -> BatchWrite:
        try:
            out, path, spanned = self._run(source)
        except BaseException as error:
            delete_uncommitted(self.io, self.start.paths, error)
            raise
        changes, update_s = read_index_changes(out)
        index = BatchIndex(self.start, changes, read_referenced(out), update_s)
        written = BatchWrite(read_written(out), batch_stats(read_stats(out)), path, self.io, index, spanned)
        return self._with_vectors(written, out) if self.start.plan.deletion_vectors else written

    def _run(self, source: BatchSource) -> tuple[Any, str, bool]:
        """The job's output, how it was written, and whether a direct pass found a key in two tasks."""
        frame = self._frame_spec()
        if self.try_direct:
            out = self._direct(source, frame)
            if out is not None:
                return out, "direct-upsert", False
        return self._linear(source, frame), "exchange", self.try_direct

    def _frame_spec(self) -> FrameSpec:
        spec = self.metadata.spec()
        return FrameSpec(
            self.table.decode,
            json.dumps(spec.to_json()) if spec.fields else "",
            True,
            _fails(self.table),
            self.table.identifier,
            index_buckets=self.start.manifest.buckets,
            key_ids=self.start.plan.key_ids,
        )

    def _direct(self, source: BatchSource, frame: FrameSpec) -> Any | None:
        """The batch written by its decode tasks; None (its files deleted) when a key was in two tasks."""
        write = WriteTask.for_table(self.metadata, self.io, (), clustered=False, sorted_by_order=False)
        task = DirectUpsertTask(frame, write, self.start.plan)
        out = source.rows.map(partial(decode_reduce_and_write, task=task), OUTPUT_DDL, source.headers).toArrow()
        repeated = keys_in_two_tasks(out)
        if repeated == 0:
            return write_index_segments_here(out, self.start.plan)
        log.info(
            "%d keys had changes in two tasks (records of one key in two Kafka partitions, or a partition "
            "split over tasks): the batch is written again with an exchange by key, and so are later ones",
            repeated,
            extra={"table": self.table.identifier},
        )
        paths = read_written(out).paths
        try:
            delete_uncommitted(self.io, paths)
        except Exception as error:  # noqa: BLE001 - uncommitted files: orphans, not a reason to fail the batch
            log.warning(
                "could not delete the %d files of the discarded pass: %s (uncommitted: orphan removal takes them)",
                len(paths),
                error,
                extra={"table": self.table.identifier},
            )
        return None

    def _linear(self, source: BatchSource, frame: FrameSpec) -> Any:
        """One linear plan: decode, look up and reduce, write, and write the index segments."""
        from pyspark.sql import functions as F

        spec, plan = self.metadata.spec(), self.start.plan
        schema = frame_spark_schema(self.table.decode.table_schema())
        if map_side_lookup(self.start, self.metadata):
            # a small index: the decode tasks look each change's key up themselves, and one exchange
            # serves the reduction and the writer when the key determines the partition
            rows = source.rows.map(partial(decode_and_look_up, frame=frame, plan=plan), schema, source.headers)
            by = PKEY_COLUMN if spec.fields and keys_determine_partition(spec, plan.key_ids) else BUCKET_COLUMN
            rows = reduce_to_latest(rows.repartition(F.col(by)), self.table.key_fields(), [by])
            if spec.fields and by != PKEY_COLUMN:
                rows = rows.repartition(F.col(PKEY_COLUMN))
        else:
            rows = source.rows.map(partial(decode_frame, frame=frame), schema, source.headers)
            rows = reduce_to_latest(rows.repartition(F.col(BUCKET_COLUMN)), self.table.key_fields(), [BUCKET_COLUMN])
            rows = map_in_arrow(rows, partial(lookup_previous_rows, plan=plan), schema)
            if spec.fields:
                rows = rows.repartition(F.col(PKEY_COLUMN))
        rows, sorted_by_order = _sorted_for_writing(rows, self.metadata)
        task = WriteTask.for_table(
            self.metadata, self.io, (), clustered=bool(spec.fields), sorted_by_order=sorted_by_order
        )
        written = map_in_arrow(rows, partial(write_indexed, task=task, plan=plan), OUTPUT_DDL)
        if self.segments_on_driver:
            return write_index_segments_here(written.toArrow(), plan)
        by_bucket = written.repartition(F.col("bucket"))
        return map_in_arrow(by_bucket, partial(write_index_segments, plan=plan), OUTPUT_DDL).toArrow()

    def _with_vectors(self, written: BatchWrite, out: Any) -> BatchWrite:
        """v3: the batch's deletion vectors, written on the driver from the tasks' deleted positions."""
        try:
            vectors, replaced = write_batch_vectors(self.io, self.start, out, f"{self.metadata.location}/data")
        except BaseException as error:
            written.discard(error)
            raise
        files = written.files
        files = files._replace(delete_files=files.delete_files + vectors, replaced_deletes=tuple(replaced))
        return BatchWrite(files, written.stats, written.path, self.io, written.index, written.keys_spanned_tasks)


class PlanChooser:
    """Chooses each batch's write plan, learning from the batches written before it."""

    def __init__(self, table: TableSpec) -> None:
        self._table = table
        self._last_changes = 0  # keys the last position-strategy batch changed (0: none yet)
        self._keys_span_tasks = False  # a batch had a key in two tasks: upserts take the exchange from then on

    def choose(self, loaded: LoadedTable, size: int | None) -> WritePlan:
        """``size``: the offsets the batch holds, where known (:func:`ingest.driver.offset_accounting.batch_size`)."""
        table, metadata, io = self._table, loaded.metadata, loaded.io
        if direct_path(metadata, table.mode):
            return DirectAppend(table, metadata, io)
        if not position_deletes(metadata, table.mode):
            return Exchange(table, metadata, io)
        start = plan_index(io, metadata, equality_ids_of(table, metadata), table.identifier)
        direct = self._direct_upsert_fits(metadata, start, size)
        segments_on_driver = 0 < self._last_changes <= DRIVER_INDEX_WRITE_MAX_CHANGES
        return IndexedUpsert(table, metadata, io, start, direct, segments_on_driver)

    def learn(self, written: BatchWrite) -> None:
        """What a written batch shows about the next: its changed keys, and keys that spanned tasks."""
        if written.index is not None:
            self._last_changes = written.files.records_committed()
        self._keys_span_tasks = self._keys_span_tasks or written.keys_spanned_tasks

    def _direct_upsert_fits(self, metadata: TableMetadata, start: IndexStart, size: int | None) -> bool:
        """A small index looked up map-side, a table that wants no exchange, a batch known to be small
        (its tasks hold their rows), and no batch yet that had a key in two tasks."""
        return (
            not self._keys_span_tasks
            and map_side_lookup(start, metadata)
            and wants_no_exchange(metadata)
            and size is not None
            and size <= properties.UPSERT_DIRECT_MAX_RECORDS.read(metadata.properties)
        )


def _fails(table: TableSpec) -> bool:
    """Whether the decode tasks raise at the first bad record (policy ``fail``)."""
    return table.bad_records == "fail"


def equality_ids_of(table: TableSpec, metadata: TableMetadata) -> tuple[int, ...]:
    """The key's field ids in the table's current schema (none for an append)."""
    if table.mode != "upsert":
        return ()
    schema = metadata.schema()
    return tuple(schema.find_field(p).field_id for p in table.key_fields())


def position_deletes(metadata: TableMetadata, mode: str) -> bool:
    """Whether an upsert deletes previous rows by position (``floe.upsert.delete-strategy``)."""
    return mode == "upsert" and properties.UPSERT_DELETE_STRATEGY.read(metadata.properties) == "position"


def map_side_lookup(start: IndexStart, metadata: TableMetadata) -> bool:
    """Whether the decode tasks look keys up (an index within ``floe.key-index.map-side-lookup-max-bytes``)
    instead of a lookup stage after an exchange by index bucket."""
    return start.manifest.size_bytes <= properties.KEY_INDEX_MAP_SIDE_MAX_BYTES.read(metadata.properties)


def direct_path(metadata: TableMetadata, mode: str) -> bool:
    """Append into a table that wants its rows neither clustered nor sorted (see :mod:`ingest.tasks.direct`)."""
    return mode == "append" and wants_no_exchange(metadata)


def wants_no_exchange(metadata: TableMetadata) -> bool:
    """A table whose rows need neither clustering by partition (``write.distribution-mode`` none, the
    default only when unpartitioned) nor sorting: its decode tasks may write."""
    spec = metadata.spec()
    distribution = properties.DISTRIBUTION_MODE.read(metadata.properties) or ("hash" if spec.fields else "none")
    return metadata.sort_order().is_unsorted and distribution == "none"


def _sorted_for_writing(rows: Any, metadata: TableMetadata) -> tuple[Any, bool]:
    """``rows`` sorted by table partition and the table's sort order; whether that realizes the order."""
    from pyspark.sql import functions as F

    order, sortable = sort_columns(metadata)
    keys = ([F.col(PKEY_COLUMN)] if metadata.spec().fields else []) + order
    if keys:
        rows = rows.sortWithinPartitions(*keys)  # Spark drops it when the window already sorted so
    return rows, sortable and bool(order)


def sort_columns(metadata: TableMetadata) -> tuple[list[Any], bool]:
    """Spark sort expressions for the table's sort order, and whether they realize it.

    Sorting by a source column realizes an order-preserving transform of it
    (identity, day, truncate...); a bucket order cannot be realized that way,
    so then nothing is sorted and no file claims the order.
    """
    from pyspark.sql import functions as F

    order = metadata.sort_order()
    if order.is_unsorted or not all(f.transform.preserves_order for f in order.fields):
        return [], False
    schema = metadata.schema()
    columns = []
    for field in order.fields:
        column = F.col(key_column(schema.find_column_name(field.source_id)))
        ascending = field.direction is SortDirection.ASC
        nulls_first = field.null_order is NullOrder.NULLS_FIRST
        if ascending:
            columns.append(column.asc_nulls_first() if nulls_first else column.asc_nulls_last())
        else:
            columns.append(column.desc_nulls_first() if nulls_first else column.desc_nulls_last())
    return columns, True
