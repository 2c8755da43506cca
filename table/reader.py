"""The merge-on-read reader: live rows of planned scan tasks (spec "Scan Planning").

For each task the data file is read by field id (:mod:`table.parquet.projection`),
its delete files are applied while it streams (:mod:`table.deletes.filter`),
then the row filter and the task's residual. Columns needed only for deletes
or the filter are read and dropped before the batch is returned. Reading runs
one stage ahead on a helper thread (:func:`read_ahead`): the data files'
batches and the tasks' deletes are read there, the deletes applied here.

With ``with_positions`` every batch also carries the ``_pos`` metadata column
(:data:`table.schema.ROW_POSITION`): each live row's position in its data
file, which compaction needs to map deletes onto the files it writes.

With ``with_lineage`` (v3, spec "Row Lineage") every batch also carries
``_row_id`` and ``_last_updated_sequence_number``: the value the file stores,
else the inherited one (the file's ``first_row_id`` plus the row's position,
and its data sequence number), else null when the file has no row ids yet.
Compaction copies them into the files it writes, so rows keep their ids.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from table.arrow_schema import field_to_arrow
from table.deletes.equality import DEFAULT_KEY_CACHE_BYTES, DeleteKeyCache, dropped_key_field, equality_key_ids
from table.deletes.filter import DeleteFilter
from table.deletes.positions import DEFAULT_POSITION_CACHE_BYTES, PositionCache
from table.errors import ValidationError
from table.evaluators import to_arrow_filter
from table.expressions import ALWAYS_TRUE, BooleanExpression, and_, bind, referenced_field_ids
from table.io import FileIO
from table.manifest import DataFile
from table.parquet.projection import DEFAULT_BATCH_SIZE, ParquetFile, project_batch
from table.schema import LINEAGE_FIELDS, ROW_POSITION, Schema
from table.tasks import FileScanTask

DEFAULT_MAX_EQUALITY_KEYS = 1_000_000
T = TypeVar("T")
_ITEM, _END, _ERROR = object(), object(), object()


def read_tasks(
    io: FileIO,
    tasks: Iterable[FileScanTask],
    projected_schema: Schema,
    row_filter: BooleanExpression = ALWAYS_TRUE,
    *,
    table_schema: Schema | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_equality_keys: int = DEFAULT_MAX_EQUALITY_KEYS,
    key_cache_bytes: int = DEFAULT_KEY_CACHE_BYTES,
    key_cache: DeleteKeyCache | None = None,
    with_positions: bool = False,
    position_cache_bytes: int = DEFAULT_POSITION_CACHE_BYTES,
    position_cache: PositionCache | None = None,
    with_lineage: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The live rows of every task that match ``row_filter`` (and the task's
    residual), as batches of ``projected_schema`` (then ``_row_id`` and
    ``_last_updated_sequence_number`` when ``with_lineage``, then ``_pos`` when
    ``with_positions``), in file order.

    ``table_schema`` is the schema the scan reads with (default: the projected
    one); the filter and equality delete columns may use any of its columns.
    The tasks share a :class:`DeleteKeyCache` (``key_cache``, else a new one
    of ``key_cache_bytes``), so an equality delete file that applies to many
    data files is read once. Likewise position delete files, through a
    :class:`PositionCache` (``position_cache``, else a new one of
    ``position_cache_bytes``): a streaming writer's delete file names many
    data files, each read by its own task.
    """
    schema = table_schema if table_schema is not None else projected_schema
    if batch_size <= 0 or max_equality_keys <= 0:
        raise ValidationError("batch_size and max_equality_keys must be positive")
    bound = bind(row_filter, schema)
    shared = key_cache if key_cache is not None else DeleteKeyCache(key_cache_bytes)
    positions = position_cache if position_cache is not None else PositionCache(position_cache_bytes)
    output = lineage_schema(projected_schema) if with_lineage else projected_schema
    output = positioned_schema(output) if with_positions else output
    readers = (
        _TaskReader(
            io,
            task,
            schema,
            output,
            _residual(bound, task, schema),
            batch_size,
            max_equality_keys,
            shared,
            positions,
            with_positions,
        )
        for task in tasks
    )
    for reader, deletes, start, batch in read_ahead(_decoded(readers)):
        live = reader.live(deletes, start, batch)
        if live is not None:
            yield live


def _residual(bound: BooleanExpression, task: FileScanTask, schema: Schema) -> BooleanExpression:
    """The scan's filter, and the task's residual when it adds to it."""
    if task.residual in (ALWAYS_TRUE, bound):
        return bound
    return and_(bound, bind(task.residual, schema))


def _decoded(readers: Iterable[_TaskReader]) -> Iterator[tuple[_TaskReader, DeleteFilter, int, pa.RecordBatch]]:
    """The read stage, which :func:`read_ahead` runs on its helper thread: for
    each task its deletes, loaded, then its data file's batches (each with its
    first row's position)."""
    for reader in readers:
        deletes = reader.load_deletes()
        for start, batch in reader.data.batches(reader.read_schema):
            yield reader, deletes, start, batch


def lineage_schema(schema: Schema) -> Schema:
    """``schema`` plus the v3 row lineage columns, last."""
    return Schema(*schema.fields, *LINEAGE_FIELDS, schema_id=schema.schema_id)


def positioned_schema(schema: Schema) -> Schema:
    """``schema`` plus the ``_pos`` metadata column, last."""
    return Schema(*schema.fields, ROW_POSITION, schema_id=schema.schema_id)


class _TaskReader:
    """Reads one data file and merges the deletes of its task into it."""

    def __init__(
        self,
        io: FileIO,
        task: FileScanTask,
        schema: Schema,
        output: Schema,
        residual: BooleanExpression,
        batch_size: int,
        max_equality_keys: int,
        key_cache: DeleteKeyCache,
        position_cache: PositionCache,
        with_positions: bool,
    ) -> None:
        self.io = io
        self.task = task
        self.key_cache = key_cache
        self.position_cache = position_cache
        self.output = output
        self.max_equality_keys = max_equality_keys
        key_ids = equality_key_ids(task.equality_deletes)
        self.read_schema = _read_schema(schema, output, residual, key_ids, task.equality_deletes, io)
        self.data = ParquetFile(io, task.data_file, batch_size)
        self.with_positions = with_positions
        self.lineage = LINEAGE_FIELDS[0].field_id in self.read_schema.field_ids
        self.arrow_filter = None if residual is ALWAYS_TRUE else to_arrow_filter(residual)

    def load_deletes(self) -> DeleteFilter:
        return DeleteFilter.load(
            self.io,
            self.task,
            self.read_schema,
            self.data,
            self.max_equality_keys,
            self.key_cache,
            self.position_cache,
        )

    def live(self, deletes: DeleteFilter, start: int, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The rows of ``batch`` (the data file's, from position ``start``) that
        are live and match the residual, as the output schema; None when none is."""
        if self.lineage:
            batch = _with_lineage(batch, start, self.task)
        if self.with_positions:
            batch = _with_positions(batch, start)
        batch = deletes.apply(batch, start)
        if self.arrow_filter is not None:
            batch = batch.filter(self.arrow_filter)
        return project_batch(batch, self.output, self.data.path) if batch.num_rows else None


def read_ahead(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items`` in order, produced on a helper thread up to ``depth`` ahead of the caller.

    Why: Parquet decoding and delete application both run in Arrow with the
    GIL released, so the next batches decode (and the next task's deletes
    load) while the caller applies this batch's deletes and consumes it; on
    two cores a scan with deletes then costs about what one without does.
    An error raised producing an item is raised here, in its place. Closing
    this iterator early stops the helper and closes ``items`` on it (a
    generator is closed by the thread that runs it).
    """
    handoff: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                handoff.put((_ITEM, item))
                if stop.is_set():
                    return
            handoff.put((_END, None))
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised there
            handoff.put((_ERROR, error))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    helper = threading.Thread(target=produce, name="floe-read-ahead", daemon=True)
    helper.start()
    try:
        while True:
            kind, value = handoff.get()
            if kind is _ITEM:
                yield value
            elif kind is _ERROR:
                raise value
            else:
                return
    finally:
        stop.set()
        while helper.is_alive():  # unblock a put waiting for room, until the helper is gone
            with contextlib.suppress(queue.Empty):
                handoff.get(timeout=0.05)


def _with_positions(batch: pa.RecordBatch, start: int) -> pa.RecordBatch:
    positions = pa.arange(start, start + batch.num_rows)
    fields = [*batch.schema, field_to_arrow(ROW_POSITION)]
    return pa.RecordBatch.from_arrays([*batch.columns, positions], schema=pa.schema(fields))


def _with_lineage(batch: pa.RecordBatch, start: int, task: FileScanTask) -> pa.RecordBatch:
    """The lineage columns with stored nulls replaced by inherited values (spec "Row Lineage")."""
    first = task.data_file.first_row_id
    row_id, sequence = (batch.schema.get_field_index(f.name) for f in LINEAGE_FIELDS)
    columns = list(batch.columns)
    if first is None:  # no row ids yet (a file of an upgraded table not yet given one): null
        columns[row_id] = pa.nulls(batch.num_rows, pa.int64())
        columns[sequence] = pa.nulls(batch.num_rows, pa.int64())
    else:
        columns[row_id] = pc.coalesce(columns[row_id], pa.arange(first + start, first + start + batch.num_rows))
        columns[sequence] = pc.coalesce(columns[sequence], pa.scalar(task.data_sequence_number, pa.int64()))
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _read_schema(
    schema: Schema,
    output: Schema,
    residual: BooleanExpression,
    key_ids: set[int],
    equality_deletes: Sequence[DataFile],
    io: FileIO,
) -> Schema:
    """The output columns plus those the filter and the deletes need (``_pos`` is not read).

    An equality column that was dropped from the table is still applied (spec
    "Equality Delete Files"): it is read under a hidden top-level name with
    the type the delete file stores.
    """
    lineage = [f for f in LINEAGE_FIELDS if f.field_id in output.field_ids]
    stored = set(output.field_ids) - {ROW_POSITION.field_id} - {f.field_id for f in lineage}
    wanted = stored | referenced_field_ids(residual) | (key_ids & schema.field_ids)
    base = schema.project(wanted)
    dropped = sorted(key_ids - schema.field_ids)
    extra = [dropped_key_field(io, field_id, equality_deletes) for field_id in dropped] + lineage
    return Schema(*base.fields, *extra, schema_id=schema.schema_id) if extra else base
