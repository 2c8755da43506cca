"""The merge-on-read reader (spec: "Column Projection", "Position Delete
Files", "Equality Delete Files").

Data files are read by field id, never by name: a column may have been
renamed, reordered, promoted (int -> long, float -> double, wider decimal)
or added after the file was written; an added column reads as its
``initial-default`` (or null).

Deletes are merged while streaming the data file batch by batch:

* Position deletes: only the rows of each delete file whose ``file_path`` is
  this data file are read (row groups are skipped by their ``file_path``
  statistics), and the deleted positions are kept as one sorted Arrow array.
  Memory: 8 bytes per deleted row of the data file being read.
* Equality deletes: the equality columns of the delete files are read as
  Arrow, keys outside the data file's bounds are dropped, the rest are
  de-duplicated and matched with a vectorized lookup (``is_in`` for one key
  column, a semi-join for several; null equals null). When the delete files of
  one key set hold more than ``max_equality_keys`` rows, the keys are loaded
  in chunks of at most that many, and each chunk is matched in a pass over the
  data file's key columns that records the deleted positions (chunking in
  delete-file order needs no hash kernel, reads each delete file once, and
  costs one extra pass over the data file's key columns per chunk). Memory: at most
  ``max_equality_keys`` keys per set of equality columns, plus 8 bytes per
  deleted row of the data file.

Columns needed only for deletes or the filter are read and dropped before the
batch is returned. The row filter is applied after the deletes.
"""

from __future__ import annotations

import bisect
import uuid
from decimal import Decimal
from typing import Any, Iterable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.arrow_schema import (
    FIELD_ID_KEY,
    can_promote,
    field_id_of,
    field_to_arrow,
    primitive_from_arrow,
    type_to_arrow,
)
from table.errors import MalformedFileError, ValidationError
from table.expressions import (
    ALWAYS_TRUE,
    BooleanExpression,
    and_,
    bind,
    decode_bound,
    referenced_field_ids,
    to_arrow_filter,
)
from table.io import FileIO
from table.manifest import DataFile, FileFormat
from table.scan import (
    POSITION_DELETE_FILE_PATH_ID,
    POSITION_DELETE_POS_ID,
    FileScanTask,
    position_deletes_may_apply,
)
from table.schema import Schema
from table.types import ListType, MapType, NestedField, PrimitiveType, StructType

DEFAULT_BATCH_SIZE = 65_536
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
) -> Iterator[pa.RecordBatch]:
    """The live rows of every task that match ``row_filter`` (and the task's
    residual), as batches of ``projected_schema``.

    ``table_schema`` is the schema the scan reads with (default: the projected
    one); the filter and equality delete columns may use any of its columns.
    """
    schema = table_schema if table_schema is not None else projected_schema
    if batch_size <= 0 or max_equality_keys <= 0:
        raise ValidationError("batch_size and max_equality_keys must be positive")
    bound = bind(row_filter, schema)
    for task in tasks:
        residual = bound
        if task.residual not in (ALWAYS_TRUE, bound):
            residual = and_(bound, bind(task.residual, schema))
        task_reader = _TaskReader(io, task, schema, projected_schema, residual, batch_size, max_equality_keys)
        yield from task_reader.batches()


# --------------------------------------------------------------------------
# One task
# --------------------------------------------------------------------------


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
    ) -> None:
        self.io = io
        self.task = task
        self.projected = projected
        self.residual = residual
        self.max_equality_keys = max_equality_keys
        self.equality_groups = _group_by_keys(task.equality_deletes)
        key_ids = {i for ids in self.equality_groups for i in ids}
        self.read_schema = _read_schema(schema, projected, residual, key_ids, task.equality_deletes, io)
        self.data = _ParquetFile(io, task.data_file, batch_size)

    def batches(self) -> Iterator[pa.RecordBatch]:
        positions = _deleted_positions(self.io, self.task.data_file.file_path, self.task.position_deletes)
        in_memory: list[_EqualityKeys] = []
        for ids, files in self.equality_groups.items():
            if sum(f.record_count for f in files) <= self.max_equality_keys:
                in_memory.append(self._load_keys(ids, files))
            else:
                positions.append(self._chunked_equality_positions(ids, files))
        mask = _PositionMask(_sorted_unique(positions))
        arrow_filter = None if self.residual is ALWAYS_TRUE else to_arrow_filter(self.residual)
        for start, batch in self.data.batches(self.read_schema):
            batch = _apply_deletes(batch, start, mask, in_memory, self.data.path)
            if arrow_filter is not None:
                batch = batch.filter(arrow_filter)
            if batch.num_rows:
                yield _project_batch(batch, self.projected, self.data.path)

    def _key_types(self, ids: tuple[int, ...]) -> list[pa.DataType]:
        return [_key_type(type_to_arrow(self.read_schema.find_field(i).field_type)) for i in ids]

    def _load_keys(self, ids: tuple[int, ...], files: list[DataFile]) -> "_EqualityKeys":
        chunks = list(self._key_tables(ids, files))
        return _EqualityKeys(ids, _dedup(_concat(chunks, ids, self._key_types(ids))))

    def _key_tables(self, ids: tuple[int, ...], files: list[DataFile]) -> Iterator[pa.Table]:
        """The keys of the delete files, batch by batch, cast to the read types
        and restricted to the data file's key bounds."""
        types = self._key_types(ids)
        bounds_filter = _bounds_filter(self.task.data_file, self.read_schema, ids)
        for delete_file in files:
            for keys in _read_keys(self.io, delete_file, ids, types):
                yield keys.filter(bounds_filter) if bounds_filter is not None else keys

    def _chunked_equality_positions(self, ids: tuple[int, ...], files: list[DataFile]) -> pa.Array:
        """Deleted positions of the data file, matching at most
        ``max_equality_keys`` delete keys at a time."""
        key_schema = self.read_schema.project(ids)
        found: list[pa.Array] = []
        for chunk in _chunks(self._key_tables(ids, files), self.max_equality_keys, ids, self._key_types(ids)):
            keys = _EqualityKeys(ids, _dedup(chunk))
            for start, batch in self.data.batches(key_schema):
                hits = pc.indices_nonzero(keys.contains(_key_columns(batch, ids, self.data.path)))
                found.append(pc.add(hits.cast(pa.int64()), pa.scalar(start, pa.int64())))
        return pa.concat_arrays(found) if found else pa.array([], pa.int64())


def _apply_deletes(
    batch: pa.RecordBatch, start: int, mask: "_PositionMask", keys: list["_EqualityKeys"], path: str
) -> pa.RecordBatch:
    keep = mask.keep(start, batch.num_rows)
    for key_set in keys:
        deleted = key_set.contains(_key_columns(batch, key_set.ids, path))
        keep = pc.invert(deleted) if keep is None else pc.and_(keep, pc.invert(deleted))
    return batch if keep is None else batch.filter(keep)


def _group_by_keys(deletes: Sequence[DataFile]) -> dict[tuple[int, ...], list[DataFile]]:
    """Equality delete files grouped by their (sorted) equality field ids."""
    groups: dict[tuple[int, ...], list[DataFile]] = {}
    for delete_file in deletes:
        if not delete_file.equality_ids:
            raise MalformedFileError(
                delete_file.file_path, "equality_ids", "missing for an equality delete file"
            )
        groups.setdefault(tuple(sorted(set(delete_file.equality_ids))), []).append(delete_file)
    return groups


# --------------------------------------------------------------------------
# Which columns to read
# --------------------------------------------------------------------------

_HIDDEN_PREFIX = "_floe_eq_"


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
    extra = [_dropped_key_field(io, field_id, equality_deletes) for field_id in dropped]
    return Schema(*base.fields, *extra) if extra else base


def _dropped_key_field(io: FileIO, field_id: int, deletes: Sequence[DataFile]) -> NestedField:
    delete_file = next(f for f in deletes if field_id in (f.equality_ids or ()))
    with _open_parquet(io, delete_file.file_path) as parquet:
        arrow_field = _find_field(parquet.schema_arrow, field_id)
    if arrow_field is None:
        raise MalformedFileError(
            delete_file.file_path, f"equality_ids[{field_id}]", "no column with this field id"
        )
    field_type = primitive_from_arrow(arrow_field.type)
    if field_type is None:
        raise MalformedFileError(
            delete_file.file_path, arrow_field.name, f"unsupported key type {arrow_field.type}"
        )
    return NestedField(field_id, f"{_HIDDEN_PREFIX}{field_id}", field_type, required=False)


# --------------------------------------------------------------------------
# Parquet access by field id
# --------------------------------------------------------------------------


class _open_parquet:
    """A ``pq.ParquetFile`` whose open and parse errors name the file."""

    def __init__(self, io: FileIO, path: str) -> None:
        self.path = path
        self._stream = io.open_input(path)

    def __enter__(self) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(self._stream, arrow_extensions_enabled=True)
        except (pa.ArrowException, OSError) as exc:
            self._stream.close()
            raise MalformedFileError(self.path, None, f"not a readable Parquet file: {exc}") from exc

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


class _ParquetFile:
    """A data file read batch by batch, projected by field id to a schema."""

    def __init__(self, io: FileIO, data_file: DataFile, batch_size: int) -> None:
        _require_parquet(data_file)
        self.io = io
        self.path = data_file.file_path
        self.batch_size = batch_size

    def batches(self, schema: Schema) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(position of the first row, batch) for the whole file, as ``schema``."""
        target = pa.schema([field_to_arrow(f) for f in schema.fields])
        with _open_parquet(self.io, self.path) as parquet:
            file_schema = parquet.schema_arrow
            columns = _top_level_columns(file_schema, [f.field_id for f in schema.fields], self.path)
            start = 0
            read_fields = [file_schema.field(name) for name in columns]
            for rows, raw in _iter_batches(parquet, self.path, self.batch_size, columns):
                arrays = _project_children(raw, read_fields, schema.fields, rows, self.path)
                yield start, pa.RecordBatch.from_arrays(arrays, schema=target)
                start += rows


def _require_parquet(content_file: DataFile) -> None:
    if content_file.file_format != FileFormat.PARQUET:
        kind = content_file.file_format.value
        raise ValidationError(f"{content_file.file_path}: {kind} files are not supported by the reader")


def _iter_batches(
    parquet: pq.ParquetFile, path: str, batch_size: int, columns: list[str]
) -> Iterator[tuple[int, list[pa.Array]]]:
    """(row count, arrays) of the named columns, batch by batch. The count
    matters when no stored column is needed: deletes need row positions."""
    try:
        if not columns:
            yield from _row_counts(parquet, batch_size)
            return
        for batch in parquet.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
            yield batch.num_rows, batch.columns
    except (pa.ArrowException, OSError) as exc:
        raise MalformedFileError(path, None, f"cannot read Parquet data: {exc}") from exc


def _row_counts(parquet: pq.ParquetFile, batch_size: int) -> Iterator[tuple[int, list[pa.Array]]]:
    for group in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        for offset in range(0, rows, batch_size):
            yield min(batch_size, rows - offset), []


def _id_of(arrow_field: pa.Field) -> Optional[int]:
    """The Iceberg field id of an Arrow field read from a file, or None."""
    if FIELD_ID_KEY not in (arrow_field.metadata or {}):
        return None
    return field_id_of(arrow_field, arrow_field.name)


def _check_ids(file_fields: Iterable[pa.Field], path: str) -> None:
    """Columns are matched by id, so every column needs one (no name mapping)."""
    for arrow_field in file_fields:
        if _id_of(arrow_field) is None:
            raise MalformedFileError(
                path, arrow_field.name, "has no field id; files without field ids are not supported"
            )


def _find_field(file_fields: Iterable[pa.Field], field_id: int) -> Optional[pa.Field]:
    """The Arrow field with this id, at this level or nested in structs."""
    for arrow_field in file_fields:
        if _id_of(arrow_field) == field_id:
            return arrow_field
        if pa.types.is_struct(arrow_field.type):
            found = _find_field(arrow_field.type, field_id)
            if found is not None:
                return found
    return None


def _column_with_id(
    columns: Sequence[pa.Array], file_fields: Sequence[pa.Field], field_id: int
) -> Optional[pa.Array]:
    """The column with this id, at this level or nested in structs (a field may
    sit deeper than expected only when it was dropped from the schema)."""
    for column, arrow_field in zip(columns, file_fields):
        if _id_of(arrow_field) == field_id:
            return column
    for column, arrow_field in zip(columns, file_fields):
        if pa.types.is_struct(arrow_field.type):
            found = _column_with_id(column.flatten(), list(arrow_field.type), field_id)
            if found is not None:
                return found
    return None


def _top_level_columns(file_schema: pa.Schema, field_ids: Iterable[int], path: str) -> list[str]:
    """Names of the file's top-level columns that hold the wanted fields."""
    _check_ids(file_schema, path)
    wanted = set(field_ids)
    return [f.name for f in file_schema if any(_find_field([f], i) is not None for i in wanted)]


# --------------------------------------------------------------------------
# Projection by field id (spec "Column Projection")
# --------------------------------------------------------------------------


def _project_children(
    columns: Sequence[pa.Array],
    file_fields: Sequence[pa.Field],
    targets: Sequence[NestedField],
    length: int,
    path: str,
) -> list[pa.Array]:
    """The ``targets`` fields, found by id among the columns of one struct level."""
    _check_ids(file_fields, path)
    return [
        _project_column(_column_with_id(columns, file_fields, target.field_id), target, length, path)
        for target in targets
    ]


def _project_column(array: Optional[pa.Array], target: NestedField, length: int, path: str) -> pa.Array:
    if array is None:
        return _default_column(target, length, path)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    t = target.field_type
    if isinstance(t, StructType):
        return _project_struct(array, t, path)
    if isinstance(t, ListType):
        return _project_list(array, t, path)
    if isinstance(t, MapType):
        return _project_map(array, t, path)
    assert isinstance(t, PrimitiveType)
    return _cast_primitive(array, target, path)


def _project_struct(array: pa.Array, t: StructType, path: str) -> pa.Array:
    children = [array.field(i) for i in range(array.type.num_fields)]
    projected = _project_children(children, list(array.type), t.fields, len(array), path)
    fields = [field_to_arrow(f) for f in t.fields]
    return pa.StructArray.from_arrays(projected, fields=fields, mask=_null_mask(array))


def _project_list(array: pa.Array, t: ListType, path: str) -> pa.Array:
    offsets, (values,) = _rebased(array, array.values)
    element = _project_column(values, t.element_field, len(values), path)
    return pa.ListArray.from_arrays(offsets, element, type=type_to_arrow(t), mask=_null_mask(array))


def _project_map(array: pa.Array, t: MapType, path: str) -> pa.Array:
    offsets, (keys, items) = _rebased(array, array.keys, array.items)
    keys = _project_column(keys, t.key_field, len(keys), path)
    items = _project_column(items, t.value_field, len(items), path)
    return pa.MapArray.from_arrays(offsets, keys, items, type=type_to_arrow(t), mask=_null_mask(array))


def _rebased(array: pa.Array, *children: pa.Array) -> tuple[pa.Array, list[pa.Array]]:
    """Zero-based offsets of a (possibly sliced) list or map and the children spanned."""
    offsets = array.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(first, offsets.type))
    return rebased, [c.slice(first, last - first) for c in children]


def _null_mask(array: pa.Array) -> Optional[pa.Array]:
    return array.is_null() if array.null_count else None


def _cast_primitive(array: pa.Array, target: NestedField, path: str) -> pa.Array:
    """The stored values as the field's current type (an allowed promotion)."""
    arrow_type = type_to_arrow(target.field_type)
    if array.type == arrow_type:
        return array
    if isinstance(arrow_type, pa.UuidType) and array.type == pa.binary(16):
        return pa.ExtensionArray.from_storage(arrow_type, array)
    stored = primitive_from_arrow(array.type)
    if stored is None or not can_promote(stored, target.field_type):
        reason = f"stored as {array.type}, cannot be read as {target.field_type}"
        raise MalformedFileError(path, target.name, reason)
    return pc.cast(array, arrow_type, safe=True)


def _default_column(target: NestedField, length: int, path: str) -> pa.Array:
    """A column the file does not have: its initial-default, else null."""
    arrow_type = type_to_arrow(target.field_type)
    default = target.initial_default
    if default is None:
        if target.required:
            reason = "required column is missing and has no initial-default"
            raise MalformedFileError(path, target.name, reason)
        return pa.nulls(length, arrow_type)
    if isinstance(target.field_type, StructType):
        values = dict(zip((f.name for f in target.field_type.fields), default))
        return pa.array([values] * length, type=arrow_type)
    if isinstance(target.field_type, MapType) and isinstance(default, dict):
        default = list(default.items())
    return pa.repeat(pa.scalar(_arrow_value(default), type=arrow_type), length)


def _arrow_value(value: Any) -> Any:
    """A Python value as ``pa.scalar`` takes it (uuids as their 16 bytes)."""
    return value.bytes if isinstance(value, uuid.UUID) else value


def _project_batch(batch: pa.RecordBatch, projected: Schema, path: str) -> pa.RecordBatch:
    """The projected columns of a batch read with the (wider) read schema."""
    arrays = _project_children(batch.columns, list(batch.schema), projected.fields, batch.num_rows, path)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([field_to_arrow(f) for f in projected.fields]))


def _key_columns(batch: pa.RecordBatch, ids: tuple[int, ...], path: str) -> list[pa.Array]:
    return [_key_array(_column_by_id(batch, i, path)) for i in ids]


def _column_by_id(batch: pa.RecordBatch, field_id: int, path: str) -> pa.Array:
    found = _column_with_id(batch.columns, list(batch.schema), field_id)
    if found is None:
        raise ValidationError(f"{path}: equality column {field_id} was not read")
    return found


# --------------------------------------------------------------------------
# Position deletes
# --------------------------------------------------------------------------


def _deleted_positions(io: FileIO, data_path: str, deletes: Sequence[DataFile]) -> list[pa.Array]:
    """The positions that ``deletes`` mark deleted in the data file (unsorted parts)."""
    parts = []
    for delete_file in deletes:
        if position_deletes_may_apply(delete_file, data_path):
            parts.extend(_positions_in(io, delete_file, data_path))
    return parts


def _positions_in(io: FileIO, delete_file: DataFile, data_path: str) -> Iterator[pa.Array]:
    """Positions for ``data_path`` in one delete file, a row group at a time;
    row groups whose ``file_path`` statistics exclude it are not read."""
    _require_parquet(delete_file)
    path = delete_file.file_path
    with _open_parquet(io, path) as parquet:
        _check_ids(parquet.schema_arrow, path)
        ids = {_id_of(f): f.name for f in parquet.schema_arrow}
        for needed, name in ((POSITION_DELETE_FILE_PATH_ID, "file_path"), (POSITION_DELETE_POS_ID, "pos")):
            if needed not in ids:
                raise MalformedFileError(path, name, f"no top-level column with field id {needed}")
        path_col, pos_col = ids[POSITION_DELETE_FILE_PATH_ID], ids[POSITION_DELETE_POS_ID]
        leaf = _leaf_index(parquet, path_col)
        for group in range(parquet.num_row_groups):
            if leaf is not None and not _group_may_hold(parquet, group, leaf, data_path):
                continue
            try:
                rows = parquet.read_row_group(group, columns=[path_col, pos_col], use_threads=False)
            except (pa.ArrowException, OSError) as exc:
                raise MalformedFileError(path, None, f"cannot read Parquet data: {exc}") from exc
            matching = rows.filter(pc.equal(rows.column(path_col), pa.scalar(data_path)))
            yield matching.column(pos_col).combine_chunks().cast(pa.int64())


def _leaf_index(parquet: pq.ParquetFile, name: str) -> Optional[int]:
    """The Parquet leaf column of a top-level primitive column (for its statistics)."""
    parquet_schema = parquet.metadata.schema
    return next((i for i in range(len(parquet_schema)) if parquet_schema.column(i).path == name), None)


def _group_may_hold(parquet: pq.ParquetFile, group: int, leaf: int, data_path: str) -> bool:
    stats = parquet.metadata.row_group(group).column(leaf).statistics
    if stats is None or not stats.has_min_max:
        return True
    low, high = _as_text(stats.min), _as_text(stats.max)
    return low <= data_path <= high


def _as_text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _sorted_unique(parts: list[pa.Array]) -> pa.Array:
    if not parts:
        return pa.array([], pa.int64())
    unique = pc.unique(pa.concat_arrays([p.cast(pa.int64()) for p in parts]))
    return unique.take(pc.array_sort_indices(unique))


class _PositionMask:
    """Keeps the rows of a batch whose positions are not deleted."""

    def __init__(self, positions: pa.Array) -> None:
        self._positions = positions
        self._seq = _ArrowInts(positions)

    def keep(self, start: int, length: int) -> Optional[pa.Array]:
        """A filter for rows ``start .. start+length-1``; None when none is deleted."""
        low = bisect.bisect_left(self._seq, start)
        high = bisect.bisect_left(self._seq, start + length)
        if low == high:
            return None
        deleted = self._positions.slice(low, high - low)
        return pc.invert(pc.is_in(pa.arange(start, start + length), value_set=deleted))


class _ArrowInts:
    """A sorted Arrow integer array as a sequence for :mod:`bisect`."""

    def __init__(self, array: pa.Array) -> None:
        self._array = array

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index: int) -> int:
        return self._array[index].as_py()


# --------------------------------------------------------------------------
# Equality deletes
# --------------------------------------------------------------------------


def _key_name(field_id: int) -> str:
    return f"k{field_id}"


def _key_type(arrow_type: pa.DataType) -> pa.DataType:
    """Keys are compared on storage: Arrow kernels do not compare extension types (uuid)."""
    return arrow_type.storage_type if isinstance(arrow_type, pa.BaseExtensionType) else arrow_type


def _key_array(array: pa.Array) -> pa.Array:
    return array.storage if isinstance(array.type, pa.BaseExtensionType) else array


def _read_keys(
    io: FileIO, delete_file: DataFile, ids: tuple[int, ...], types: list[pa.DataType]
) -> Iterator[pa.Table]:
    """The equality columns of one delete file, batch by batch, as key tables."""
    _require_parquet(delete_file)
    path = delete_file.file_path
    with _open_parquet(io, path) as parquet:
        file_schema = parquet.schema_arrow
        for field_id in ids:
            if _find_field(file_schema, field_id) is None:
                raise MalformedFileError(path, f"equality_ids[{field_id}]", "no column with this field id")
        columns = _top_level_columns(file_schema, ids, path)
        read_fields = [file_schema.field(name) for name in columns]
        for _, raw in _iter_batches(parquet, path, DEFAULT_BATCH_SIZE, columns):
            arrays = [_column_with_id(raw, read_fields, i) for i in ids]
            keys = [_key_array(a).cast(t) for a, t in zip(arrays, types)]
            yield pa.table(keys, names=[_key_name(i) for i in ids])


def _bounds_filter(data_file: DataFile, read_schema: Schema, ids: tuple[int, ...]) -> Optional[pc.Expression]:
    """Keeps the delete keys that may occur in the data file: null keys, and
    keys inside the data file's [lower, upper] bounds for every key column."""
    condition: Optional[pc.Expression] = None
    for field_id in ids:
        t = read_schema.find_field(field_id).field_type
        assert isinstance(t, PrimitiveType)
        lower = decode_bound(t, (data_file.lower_bounds or {}).get(field_id), data_file.file_path, field_id)
        upper = decode_bound(t, (data_file.upper_bounds or {}).get(field_id), data_file.file_path, field_id)
        if lower is None or upper is None:
            continue
        key = pc.field(_key_name(field_id))
        arrow_type = _key_type(type_to_arrow(t))
        low, high = pa.scalar(_arrow_value(lower), arrow_type), pa.scalar(_arrow_value(upper), arrow_type)
        inside = (key >= low) & (key <= high)
        term = key.is_null() | inside
        condition = term if condition is None else condition & term
    return condition


def _concat(tables: list[pa.Table], ids: tuple[int, ...], types: list[pa.DataType]) -> pa.Table:
    if not tables:
        return pa.table([pa.array([], t) for t in types], names=[_key_name(i) for i in ids])
    return pa.concat_tables(tables)


def _dedup(keys: pa.Table) -> pa.Table:
    return keys.group_by(keys.column_names, use_threads=False).aggregate([])


def _chunks(
    tables: Iterator[pa.Table], limit: int, ids: tuple[int, ...], types: list[pa.DataType]
) -> Iterator[pa.Table]:
    """Key tables regrouped into chunks of at most ``limit`` rows."""
    pending: list[pa.Table] = []
    size = 0
    for table in tables:
        while table.num_rows:
            take = table.slice(0, limit - size)
            pending.append(take)
            size += take.num_rows
            table = table.slice(take.num_rows)
            if size == limit:
                yield _concat(pending, ids, types)
                pending, size = [], 0
    if size:
        yield _concat(pending, ids, types)


class _EqualityKeys:
    """De-duplicated delete keys of one set of equality columns."""

    def __init__(self, ids: tuple[int, ...], keys: pa.Table) -> None:
        self.ids = ids
        self.size = keys.num_rows
        self._names = _null_safe_names(len(ids))
        if len(ids) == 1:
            self._values = keys.column(0).combine_chunks()
        else:
            self._encoded = pa.table(_null_safe(keys.columns), names=self._names)

    def contains(self, columns: list[pa.Array]) -> pa.Array:
        """For every row, whether its key is deleted (null equals null)."""
        length = len(columns[0])
        if self.size == 0:
            return pa.repeat(pa.scalar(False), length)
        if len(self.ids) == 1:
            # is_in matches a null value to a null in the value set
            return pc.is_in(columns[0], value_set=self._values)
        return self._contains_composite(columns, length)

    def _contains_composite(self, columns: list[pa.Array], length: int) -> pa.Array:
        """A semi-join on (is-null flag, value) pairs, so that nulls match."""
        rows = pa.arange(0, length)
        left = pa.table(_null_safe(columns) + [rows], names=self._names + ["_row"])
        joined = left.join(self._encoded, keys=self._names, join_type="left semi", use_threads=False)
        return pc.is_in(rows, value_set=joined.column("_row").combine_chunks())


def _null_safe_names(count: int) -> list[str]:
    return [f"{kind}{i}" for i in range(count) for kind in ("n", "v")]


def _null_safe(columns: Sequence[Any]) -> list[pa.Array]:
    result = []
    for column in columns:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        result.append(array.is_null())
        result.append(array.fill_null(_placeholder(array.type)) if array.null_count else array)
    return result


def _placeholder(arrow_type: pa.DataType) -> pa.Scalar:
    """Any non-null value of the type, to stand in for null next to its flag."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.scalar("", arrow_type)
    if pa.types.is_fixed_size_binary(arrow_type):
        return pa.scalar(bytes(arrow_type.byte_width), arrow_type)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.scalar(b"", arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.scalar(False)
    if pa.types.is_decimal(arrow_type):
        return pa.scalar(Decimal(0), arrow_type)
    return pa.scalar(0, arrow_type)
