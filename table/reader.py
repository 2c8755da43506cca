"""The merge-on-read reader: live rows of planned scan tasks (spec "Scan Planning").

For each task the data file is read by field id (:mod:`table.projection`),
its delete files are applied while it streams (:mod:`table.delete_filter`),
then the row filter and the task's residual. Columns needed only for deletes
or the filter are read and dropped before the batch is returned.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Sequence

import pyarrow as pa

from table.delete_filter import (
    DEFAULT_KEY_CACHE_BYTES,
    DeleteFilter,
    DeleteKeyCache,
    dropped_key_field,
    equality_key_ids,
)
from table.errors import ValidationError
from table.evaluators import to_arrow_filter
from table.expressions import ALWAYS_TRUE, BooleanExpression, and_, bind, referenced_field_ids
from table.io import FileIO
from table.manifest import DataFile
from table.projection import DEFAULT_BATCH_SIZE, ParquetFile, project_batch
from table.scan import FileScanTask
from table.schema import Schema

DEFAULT_MAX_EQUALITY_KEYS = 1_000_000


def read_tasks(
    io: FileIO,
    tasks: Iterable[FileScanTask],
    projected_schema: Schema,
    row_filter: BooleanExpression = ALWAYS_TRUE,
    *,
    table_schema: Optional[Schema] = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_equality_keys: int = DEFAULT_MAX_EQUALITY_KEYS,
    key_cache_bytes: int = DEFAULT_KEY_CACHE_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The live rows of every task that match ``row_filter`` (and the task's
    residual), as batches of ``projected_schema``.

    ``table_schema`` is the schema the scan reads with (default: the projected
    one); the filter and equality delete columns may use any of its columns.
    The tasks share a :class:`DeleteKeyCache` of ``key_cache_bytes``, so an
    equality delete file that applies to many data files is read once.
    """
    schema = table_schema if table_schema is not None else projected_schema
    if batch_size <= 0 or max_equality_keys <= 0:
        raise ValidationError("batch_size and max_equality_keys must be positive")
    bound = bind(row_filter, schema)
    key_cache = DeleteKeyCache(key_cache_bytes)
    for task in tasks:
        residual = bound
        if task.residual not in (ALWAYS_TRUE, bound):
            residual = and_(bound, bind(task.residual, schema))
        task_reader = _TaskReader(
            io, task, schema, projected_schema, residual, batch_size, max_equality_keys, key_cache
        )
        yield from task_reader.batches()


class _TaskReader:
    """Reads one data file and merges the deletes of its task into it."""

    def __init__(
        self,
        io: FileIO,
        task: FileScanTask,
        schema: Schema,
        projected: Schema,
        residual: BooleanExpression,
        batch_size: int,
        max_equality_keys: int,
        key_cache: DeleteKeyCache,
    ) -> None:
        self.io = io
        self.task = task
        self.key_cache = key_cache
        self.projected = projected
        self.residual = residual
        self.max_equality_keys = max_equality_keys
        key_ids = equality_key_ids(task.equality_deletes)
        self.read_schema = _read_schema(schema, projected, residual, key_ids, task.equality_deletes, io)
        self.data = ParquetFile(io, task.data_file, batch_size)

    def batches(self) -> Iterator[pa.RecordBatch]:
        deletes = DeleteFilter.load(
            self.io, self.task, self.read_schema, self.data, self.max_equality_keys, self.key_cache
        )
        arrow_filter = None if self.residual is ALWAYS_TRUE else to_arrow_filter(self.residual)
        for start, batch in self.data.batches(self.read_schema):
            batch = deletes.apply(batch, start)
            if arrow_filter is not None:
                batch = batch.filter(arrow_filter)
            if batch.num_rows:
                yield project_batch(batch, self.projected, self.data.path)


def _read_schema(
    schema: Schema,
    projected: Schema,
    residual: BooleanExpression,
    key_ids: set[int],
    equality_deletes: Sequence[DataFile],
    io: FileIO,
) -> Schema:
    """The projected columns plus those the filter and the deletes need.

    An equality column that was dropped from the table is still applied (spec
    "Equality Delete Files"): it is read under a hidden top-level name with
    the type the delete file stores.
    """
    wanted = set(projected.field_ids) | referenced_field_ids(residual) | (key_ids & schema.field_ids)
    base = schema.project(wanted)
    dropped = sorted(key_ids - schema.field_ids)
    extra = [dropped_key_field(io, field_id, equality_deletes) for field_id in dropped]
    return Schema(*base.fields, *extra) if extra else base
