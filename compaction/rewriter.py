"""Rewriting one file group: its live rows in, files of the target size out, and where each row went.

The group's data files are read by the merge-on-read reader (by field id, in
the table's current schema, deletes applied), with each row's original
position alongside (the ``_pos`` metadata column): the compactor needs it to
carry later position deletes over to the new files
(:mod:`commit.position_map`). Rows are written by the table's
partitioned writer in the current partition spec, so data of an older spec
is re-partitioned, and files roll at ``write_max_file_size`` as Iceberg's
rewrite does; every other writer option is the table's own.

The same picklable :func:`run_rewrite_task` runs in-process or as a Spark
task; on executors it imports only ``table/`` and ``compaction/``. It never
raises for a failed group: a Spark job that failed would lose the results
(and strand the files) of every other group in it. The error travels back
in the result instead, and the driver logs and counts it.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from commit.position_map import PositionMapBuilder, write_position_map
from compaction.planner import FileGroup
from table.deletes.equality import DeleteKeyCache
from table.errors import ValidationError
from table.expressions import ALWAYS_TRUE
from table.io import FileIO
from table.manifest import DataFile
from table.parquet.partitioned import PartitionedWriter
from table.parquet.projection import DEFAULT_BATCH_SIZE
from table.parquet.writer import DataFileWriter, FileNameFactory, WriterOptions, abort_after
from table.partitioning import PartitionSpec, partition_key, split_by_partition
from table.reader import DEFAULT_MAX_EQUALITY_KEYS, lineage_schema, positioned_schema, read_tasks
from table.schema import ROW_POSITION, Schema

log = logging.getLogger(__name__)

STOP_CHECK_INTERVAL_S = 1.0


# --------------------------------------------------------------------------
# Stopping between batches
# --------------------------------------------------------------------------


class StopCheck(Protocol):
    """Whether the run was asked to stop (``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


class NeverStop:
    def is_set(self) -> bool:
        return False


NEVER_STOP = NeverStop()


@dataclass
class StopFile:
    """A stop request that reaches Spark executors: the driver writes a marker file.

    Checked at most once per ``interval_s``, so object stores see a few
    requests per minute per task, not one per batch.
    """

    path: str
    io: FileIO  # the table's: the stop file is written beside its metadata
    interval_s: float = STOP_CHECK_INTERVAL_S
    _checked_at: float = field(default=float("-inf"), repr=False)
    _set: bool = field(default=False, repr=False)

    def is_set(self) -> bool:
        now = time.monotonic()
        if not self._set and now - self._checked_at >= self.interval_s:
            self._checked_at = now
            self._set = self.io.exists(self.path)
        return self._set


# --------------------------------------------------------------------------
# Task and result
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupRewriteTask:
    """Everything a rewrite needs, picklable: no catalog, no open file system."""

    group_id: int
    group: FileGroup
    table_location: str
    io: FileIO  # the table's, with the storage credentials its catalog vended
    data_location: str
    schema: Schema
    output_spec: PartitionSpec
    position_map_path: str
    operation_id: str
    writer: WriterOptions
    """The table's writer options, with the target size the rewrite aims at."""
    batch_size: int = DEFAULT_BATCH_SIZE
    max_equality_keys: int = DEFAULT_MAX_EQUALITY_KEYS
    stop_path: str | None = None
    row_lineage: bool = False
    """v3: rows keep their ``_row_id`` and ``_last_updated_sequence_number``, written into the new files."""

    @property
    def write_schema(self) -> Schema:
        return lineage_schema(self.schema) if self.row_lineage else self.schema


class RewriteStatus(str, Enum):
    REWRITTEN = "rewritten"
    ABANDONED = "abandoned"  # stopped halfway; its files are deleted
    NOT_STARTED = "not-started"  # stopped before it began
    FAILED = "failed"


@dataclass(frozen=True)
class GroupError:
    """An exception raised while rewriting, as text (it crosses process boundaries)."""

    error_type: str
    message: str
    traceback: str

    @classmethod
    def of(cls, error: BaseException) -> GroupError:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(f"{type(error).__module__}.{type(error).__qualname__}", str(error), text)


@dataclass(frozen=True)
class GroupRewrite:
    """The outcome of one rewrite: new files and the path of their position map, or why not."""

    group_id: int
    status: RewriteStatus
    added_files: tuple[DataFile, ...] = ()
    position_map_path: str | None = None
    rows_read: int = 0
    rows_written: int = 0
    duration_s: float = 0.0
    error: GroupError | None = None


class GroupAbandoned(Exception):
    """The stop check fired while a group was being written."""


# --------------------------------------------------------------------------
# Rewriting
# --------------------------------------------------------------------------


def rewrite_group(task: GroupRewriteTask, stop: StopCheck = NEVER_STOP) -> GroupRewrite:
    """Rewrite the group; raises :class:`GroupAbandoned` when ``stop`` fires (files deleted).

    On any failure every file written so far (data files and the position
    map) is deleted before the error goes on.
    """
    started = time.monotonic()
    io = task.io
    outputs = _outputs(io, task)
    positions = PositionMapBuilder()
    try:
        rows_read = _copy_rows(io, task, outputs, positions, stop)
        written = outputs.close_by_partition()
        added = [f for _, files in written for f in files]
        position_map = positions.build(
            {_output_key(task, p): [(f.file_path, f.record_count) for f in files] for p, files in written}
        )
        write_position_map(io, task.position_map_path, position_map)
    except BaseException as error:
        _discard(io, outputs, task.position_map_path, error)
        raise
    rows_written = sum(f.record_count for f in added)
    if rows_written != rows_read:
        io.delete_many([*(f.file_path for f in added), task.position_map_path])
        raise ValidationError(f"group {task.group_id}: read {rows_read} live rows but wrote {rows_written}")
    return GroupRewrite(
        task.group_id,
        RewriteStatus.REWRITTEN,
        tuple(added),
        task.position_map_path,
        rows_read,
        rows_written,
        time.monotonic() - started,
    )


def _outputs(io: FileIO, task: GroupRewriteTask) -> PartitionedWriter:
    """One rolling writer per output partition, with the table's writer options."""
    names = FileNameFactory(prefix=f"{task.group_id:05d}-compact", operation_id=task.operation_id)
    options = task.writer.for_data()

    def open_writer(partition: tuple[Any, ...]) -> DataFileWriter:
        return DataFileWriter(
            io, task.data_location, task.write_schema, task.output_spec, partition, file_name_factory=names, **options
        )

    return PartitionedWriter(positioned_schema(task.write_schema), task.output_spec, open_writer)


def _output_key(task: GroupRewriteTask, partition: tuple[Any, ...]) -> Any:
    return partition_key(task.output_spec.spec_id, partition)


def _copy_rows(
    io: FileIO, task: GroupRewriteTask, outputs: PartitionedWriter, positions: PositionMapBuilder, stop: StopCheck
) -> int:
    """Copy every live row of the group into ``outputs``; the number of rows copied."""
    copied = 0
    key_cache = DeleteKeyCache()  # the group's files share their partition's equality deletes
    for scan_task in task.group.tasks:
        if scan_task.residual is not ALWAYS_TRUE:
            raise ValidationError(f"{scan_task.data_file.file_path}: compaction reads whole files, got a row filter")
        old_path = scan_task.data_file.file_path
        positions.add_file(old_path)
        batches = read_tasks(
            io,
            [scan_task],
            task.schema,
            batch_size=task.batch_size,
            max_equality_keys=task.max_equality_keys,
            key_cache=key_cache,
            with_positions=True,
            with_lineage=task.row_lineage,
        )
        for batch in batches:
            if stop.is_set():
                raise GroupAbandoned(f"group {task.group_id}: stop requested while writing")
            for partition, rows in split_by_partition(batch, outputs.schema, task.output_spec):
                first = outputs.write_partition(partition, rows.drop_columns([ROW_POSITION.name]))
                positions.add(old_path, rows.column(ROW_POSITION.name), _output_key(task, partition), first)
            copied += batch.num_rows
    return copied


def _discard(io: FileIO, outputs: PartitionedWriter, map_path: str, error: BaseException) -> None:
    """Delete what a failed or stopped rewrite wrote; note on ``error`` what could not go."""
    abort_after(error, outputs)
    try:
        io.delete(map_path)
    except Exception as cleanup:  # noqa: BLE001 - the original error matters more; keep both
        error.add_note(f"deleting the position map after the failed rewrite failed too (an orphan): {cleanup!r}")


def run_rewrite_task(task: GroupRewriteTask, stop: StopCheck | None = None) -> GroupRewrite:
    """:func:`rewrite_group` with its outcome as a value (see the module docstring)."""
    if stop is None:
        stop = StopFile(task.stop_path, task.io) if task.stop_path else NEVER_STOP
    if stop.is_set():
        return GroupRewrite(task.group_id, RewriteStatus.NOT_STARTED)
    started = time.monotonic()
    try:
        return rewrite_group(task, stop)
    except GroupAbandoned:
        return GroupRewrite(task.group_id, RewriteStatus.ABANDONED, duration_s=time.monotonic() - started)
    except Exception as error:  # noqa: BLE001 - reported to the driver as a value, with its traceback
        return GroupRewrite(
            task.group_id, RewriteStatus.FAILED, duration_s=time.monotonic() - started, error=GroupError.of(error)
        )


# --------------------------------------------------------------------------
# Where groups run
# --------------------------------------------------------------------------


class GroupExecutor(Protocol):
    """Runs rewrite tasks somewhere; one result per task, in order."""

    def run(self, tasks: Sequence[GroupRewriteTask]) -> list[GroupRewrite]: ...


class InProcessExecutor:
    """Rewrites groups one after another in this process, checking ``stop`` between and during them."""

    def __init__(self, stop: StopCheck) -> None:
        self.stop = stop

    def run(self, tasks: Sequence[GroupRewriteTask]) -> list[GroupRewrite]:
        return [run_rewrite_task(task, self.stop) for task in tasks]


class SparkExecutor:
    """Rewrites groups as Spark tasks, at most ``max_concurrent`` at a time.

    ``parallelize(tasks, n)`` with ``n = min(len(tasks), max_concurrent)``:
    each Spark partition rewrites its groups in turn. A stop request is
    passed on through each task's stop file, written by a watcher thread.
    """

    def __init__(self, spark: Any, max_concurrent: int, stop: StopCheck, io: FileIO) -> None:
        self.spark = spark
        self.max_concurrent = max_concurrent
        self.stop = stop
        self.io = io

    def run(self, tasks: Sequence[GroupRewriteTask]) -> list[GroupRewrite]:
        if not tasks:
            return []
        stop_paths = {t.stop_path for t in tasks}
        if len(stop_paths) != 1 or None in stop_paths:
            raise ValidationError("Spark rewrite tasks need one shared stop_path")
        stop_path = stop_paths.pop()
        assert stop_path is not None
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(stop_path, done), name="compaction-stop", daemon=True)
        watcher.start()
        try:
            context = self.spark.sparkContext
            slices = min(len(tasks), self.max_concurrent)
            # Each task carries the table's FileIO, with the storage credentials the catalog vended.
            return context.parallelize(list(tasks), slices).map(run_rewrite_task).collect()
        finally:
            done.set()
            watcher.join()
            self.io.delete(stop_path)

    def _watch(self, stop_path: str, done: threading.Event) -> None:
        """Write the stop file as soon as ``stop`` is set, until the job is done."""
        while not done.wait(0.2):
            if self.stop.is_set():
                self.io.write_bytes(stop_path, b"stop\n")
                log.info("asked running rewrite tasks to stop", extra={"stop_file": stop_path})
                return
