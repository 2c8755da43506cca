"""Executor side: one write task turns decoded rows into Iceberg data and delete files.

:func:`write_files` is the body of a ``mapInArrow`` over the rows of one
micro-batch (after reduction in upsert mode, one row per key), repartitioned
by table partition and sorted by it and the table's sort order. For each row:

* an upsert's final image goes to a data file of its partition;
* in upsert mode every touched key (upserts and deletes) goes to an equality
  delete file: in the row's partition when the key determines the partition
  (every partition source column is a key column), else to a global delete
  file (the table's unpartitioned spec). Committed in the same row delta, the
  data and deletes share a sequence number, so a delete removes only older
  rows of its key (spec: "Scan Planning").

Stats rows of the frame (:mod:`ingest.tasks.frame`) are not written: they are
passed on to the output as ``stats`` rows. Files are written with the
table's writer options (roll at ``write.target-file-size-bytes``, deletes at
``write.delete.target-file-size-bytes``) by :mod:`table.parquet.partitioned`'s
fan-out writer. With clustered input a partition's files are closed as soon
as its rows are done, so memory holds one row group buffer, not one per
partition. Only serialized ``DataFile`` metadata leaves
the task (:mod:`ingest.tasks.output`); on failure every file the task wrote is
deleted before the error propagates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tasks.changes import ChangeKind
from ingest.tasks.decode_records import OP_COLUMN
from ingest.tasks.output import stats_batch, take_stats, written_batch
from ingest.tasks.transport import table_batch
from table.arrow_schema import cast_to_schema
from table.deletes.writers import EqualityDeleteWriter
from table.io import FileIO
from table.locations import data_location
from table.manifest import DataFile
from table.metadata import TableMetadata
from table.parquet.partitioned import PartitionedWriter
from table.parquet.writer import DataFileWriter, FileNameFactory, WriterOptions, abort_after, abort_all
from table.partitioning import PartitionSpec, partition_spec_from_json
from table.schema import Schema, schema_from_json

T = TypeVar("T")


@dataclass(frozen=True)
class WriteTask:
    """Everything a write task needs; plain data so it ships small to executors.

    ``equality_ids`` is empty in append mode. ``delete_spec`` is the spec of
    equality delete files: the table's spec when ``keyed_deletes``, else an
    unpartitioned spec of the table. ``sort_order_id`` is set when the input
    is sorted by the table's sort order. ``writer`` holds the table's file
    writing properties (:meth:`table.parquet.writer.WriterOptions.for_table`). ``io`` is the
    table's FileIO, with the storage credentials its catalog vended.
    """

    schema: str
    spec: str
    data_location: str
    io: FileIO
    equality_ids: tuple[int, ...] = ()
    delete_spec: str = ""
    keyed_deletes: bool = False
    clustered: bool = False
    writer: WriterOptions = field(default_factory=WriterOptions)
    sort_order_id: int | None = None

    @classmethod
    def for_table(
        cls,
        metadata: TableMetadata,
        io: FileIO,
        equality_ids: Sequence[int],
        *,
        clustered: bool,
        sorted_by_order: bool,
    ) -> WriteTask:
        """The task for ``metadata``'s current schema, default spec and write properties."""
        schema, spec = metadata.schema(), metadata.spec()
        keyed = keys_determine_partition(spec, equality_ids)
        delete_spec = spec if keyed or not equality_ids else unpartitioned_spec(metadata)
        return cls(
            schema=json.dumps(schema.to_json()),
            spec=json.dumps(spec.to_json()),
            data_location=data_location(metadata),
            io=io,
            equality_ids=tuple(equality_ids),
            delete_spec=json.dumps(delete_spec.to_json()),
            keyed_deletes=keyed,
            clustered=clustered,
            writer=WriterOptions.for_table(metadata),
            sort_order_id=metadata.default_sort_order_id if sorted_by_order else None,
        )


def keys_determine_partition(spec: PartitionSpec, equality_ids: Iterable[int]) -> bool:
    """Whether every partition source column is a key column (then a key has one partition)."""
    ids = set(equality_ids)
    return bool(ids) and all(f.source_id in ids for f in spec.fields)


def unpartitioned_spec(metadata: TableMetadata) -> PartitionSpec:
    """The table's spec without fields: global equality deletes are written with it."""
    for spec in metadata.partition_specs:
        if not spec.fields:
            return spec
    raise ValueError(
        f"table at {metadata.location} has no unpartitioned spec for global equality deletes "
        "(ingest.driver.table_setup adds one when the key does not determine the partition)"
    )


# ---------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------


class TaskWriter:
    """Writes one task's rows; :meth:`finish` returns the written files, :meth:`abort` deletes them."""

    def __init__(self, task: WriteTask, io: FileIO, names: FileNameFactory) -> None:
        self.task = task
        self.schema = schema_from_json(json.loads(task.schema))
        self.spec = partition_spec_from_json(json.loads(task.spec))
        self.deleted_keys = 0
        data_options = task.writer.for_data()
        self.data = PartitionedWriter(
            self.schema,
            self.spec,
            lambda p: DataFileWriter(
                io,
                task.data_location,
                self.schema,
                self.spec,
                p,
                file_name_factory=names,
                sort_order_id=task.sort_order_id,
                **data_options,
            ),
        )
        self.delete_schema: Schema | None = None
        if task.equality_ids:
            self.delete_schema = self.schema.project(task.equality_ids)
            delete_spec = partition_spec_from_json(json.loads(task.delete_spec))
            delete_options = task.writer.for_deletes()
            self.deletes = PartitionedWriter(
                self.delete_schema,
                delete_spec,
                lambda p: EqualityDeleteWriter(
                    io,
                    task.data_location,
                    self.schema,
                    delete_spec,
                    p,
                    task.equality_ids,
                    file_name_factory=names,
                    **delete_options,
                ),
            )

    def write(self, batch: pa.RecordBatch) -> None:
        """Write a batch of transport rows: upserts' images as data, every touched key as a delete."""
        ops = batch.column(OP_COLUMN)
        upserts = pc.equal(ops, pa.scalar(int(ChangeKind.UPSERT), ops.type))
        touched_data = self._write_data(batch.filter(upserts))
        touched_deletes: set[Any] = set()
        if self.delete_schema is not None:
            self.deleted_keys += batch.num_rows - (pc.sum(upserts).as_py() or 0)
            touched_deletes = self._write_deletes(batch)
        if self.task.clustered:
            self.data.close_except(touched_data)
            if self.delete_schema is not None and self.task.keyed_deletes:
                self.deletes.close_except(touched_deletes)

    def _write_data(self, rows: pa.RecordBatch) -> set[Any]:
        if rows.num_rows == 0:
            return set()
        return self.write_table_rows(table_batch(rows, self.schema))

    def write_table_rows(self, rows: pa.RecordBatch) -> set[Any]:
        """Append rows already in the table's Arrow types (by name); the partitions touched."""
        return self.data.write(cast_to_schema(rows, self.schema))

    def _write_deletes(self, rows: pa.RecordBatch) -> set[Any]:
        assert self.delete_schema is not None
        return self.deletes.write(cast_to_schema(table_batch(rows, self.delete_schema), self.delete_schema))

    def finish(self) -> tuple[list[DataFile], list[DataFile]]:
        data = self.data.close()
        deletes = self.deletes.close() if self.delete_schema is not None else []
        return data, deletes

    def abort(self) -> None:
        abort_all([self.data, self.deletes] if self.delete_schema is not None else [self.data])


def write_files(batches: Iterator[pa.RecordBatch], task: WriteTask) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: write every row, then yield one row per file written and the stats rows."""
    writer = task_writer(task)
    (data, deletes), stats = write_all(batches, writer, writer.finish)
    yield written_batch(data, deletes, writer.deleted_keys)
    if stats:
        yield stats_batch(stats)


def write_all(batches: Iterator[pa.RecordBatch], writer: TaskWriter, finish: Callable[[], T]) -> tuple[T, list[bytes]]:
    """Give ``writer`` every row (stats rows kept apart), then ``finish()``; what it returns and the
    stats payloads. On any failure every file the writer wrote is deleted before the error propagates."""
    stats: list[bytes] = []
    try:
        for batch in batches:
            rows = take_stats(batch, stats)
            if rows.num_rows:
                writer.write(rows)
        return finish(), stats
    except BaseException as error:
        abort_after(error, writer)
        raise


def task_writer(task: WriteTask) -> TaskWriter:
    """The writer of the current Spark task (its files are named after the task attempt)."""
    return TaskWriter(task, task.io, FileNameFactory(task_prefix()))


def task_prefix() -> str:
    """``{partition:05d}-{attempt}`` as Java names task output; 00000-0 outside Spark."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
    except ImportError:
        context = None
    if context is None:
        return "00000-0"
    return f"{context.partitionId():05d}-{context.taskAttemptId()}"
