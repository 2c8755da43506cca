"""Reading a Parquet data file by field id (spec "Column Projection").

Columns are matched by Iceberg field id, never by name: since the file was
written a column may have been renamed or reordered (found by id), promoted
(int -> long, float -> double, wider decimal: cast on read), or added (read
as its ``initial-default``, or null). Files without field ids are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.arrow_schema import (
    FIELD_ID_KEY,
    arrow_value,
    can_promote,
    field_id_of,
    field_to_arrow,
    null_mask,
    primitive_from_arrow,
    rebased,
    type_to_arrow,
)
from table.errors import MalformedFileError, ValidationError
from table.io import FileIO
from table.manifest import DataFile, FileFormat
from table.schema import Schema
from table.types import ListType, MapType, NestedField, PrimitiveType, StructType

DEFAULT_BATCH_SIZE = 65_536


# --------------------------------------------------------------------------
# Parquet access by field id
# --------------------------------------------------------------------------


class open_parquet:
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


class ParquetFile:
    """A data file read batch by batch, projected by field id to a schema."""

    def __init__(self, io: FileIO, data_file: DataFile, batch_size: int) -> None:
        require_parquet(data_file)
        self.io = io
        self.path = data_file.file_path
        self.batch_size = batch_size

    def batches(self, schema: Schema) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(position of the first row, batch) for the whole file, as ``schema``."""
        target = pa.schema([field_to_arrow(f) for f in schema.fields])
        with open_parquet(self.io, self.path) as parquet:
            file_schema = parquet.schema_arrow
            columns = top_level_columns(file_schema, [f.field_id for f in schema.fields], self.path)
            start = 0
            read_fields = [file_schema.field(name) for name in columns]
            for rows, raw in iter_batches(parquet, self.path, self.batch_size, columns):
                arrays = _project_children(raw, read_fields, schema.fields, rows, self.path)
                yield start, pa.RecordBatch.from_arrays(arrays, schema=target)
                start += rows


def require_parquet(content_file: DataFile) -> None:
    if content_file.file_format != FileFormat.PARQUET:
        kind = content_file.file_format.value
        raise ValidationError(f"{content_file.file_path}: {kind} files are not supported by the reader")


def iter_batches(
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


def id_of(arrow_field: pa.Field) -> int | None:
    """The Iceberg field id of an Arrow field read from a file, or None."""
    if FIELD_ID_KEY not in (arrow_field.metadata or {}):
        return None
    return field_id_of(arrow_field, arrow_field.name)


def check_ids(file_fields: Iterable[pa.Field], path: str) -> None:
    """Columns are matched by id, so every column needs one (no name mapping)."""
    for arrow_field in file_fields:
        if id_of(arrow_field) is None:
            raise MalformedFileError(
                path, arrow_field.name, "has no field id; files without field ids are not supported"
            )


def find_field(file_fields: Iterable[pa.Field], field_id: int) -> pa.Field | None:
    """The Arrow field with this id, at this level or nested in structs."""
    for arrow_field in file_fields:
        if id_of(arrow_field) == field_id:
            return arrow_field
        if pa.types.is_struct(arrow_field.type):
            found = find_field(arrow_field.type, field_id)
            if found is not None:
                return found
    return None


def column_with_id(columns: Sequence[pa.Array], file_fields: Sequence[pa.Field], field_id: int) -> pa.Array | None:
    """The column with this id, at this level or nested in structs (a field may
    sit deeper than expected only when it was dropped from the schema)."""
    for column, arrow_field in zip(columns, file_fields):
        if id_of(arrow_field) == field_id:
            return column
    for column, arrow_field in zip(columns, file_fields):
        if pa.types.is_struct(arrow_field.type):
            found = column_with_id(column.flatten(), list(arrow_field.type), field_id)
            if found is not None:
                return found
    return None


def top_level_columns(file_schema: pa.Schema, field_ids: Iterable[int], path: str) -> list[str]:
    """Names of the file's top-level columns that hold the wanted fields."""
    check_ids(file_schema, path)
    wanted = set(field_ids)
    return [f.name for f in file_schema if any(find_field([f], i) is not None for i in wanted)]


# --------------------------------------------------------------------------
# Projection by field id
# --------------------------------------------------------------------------


def project_batch(batch: pa.RecordBatch, projected: Schema, path: str) -> pa.RecordBatch:
    """The projected columns of a batch read with the (wider) read schema."""
    arrays = _project_children(batch.columns, list(batch.schema), projected.fields, batch.num_rows, path)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([field_to_arrow(f) for f in projected.fields]))


def _project_children(
    columns: Sequence[pa.Array],
    file_fields: Sequence[pa.Field],
    targets: Sequence[NestedField],
    length: int,
    path: str,
) -> list[pa.Array]:
    """The ``targets`` fields, found by id among the columns of one struct level."""
    check_ids(file_fields, path)
    return [
        _project_column(column_with_id(columns, file_fields, target.field_id), target, length, path)
        for target in targets
    ]


def _project_column(array: pa.Array | None, target: NestedField, length: int, path: str) -> pa.Array:
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
    return pa.StructArray.from_arrays(projected, fields=fields, mask=null_mask(array))


def _project_list(array: pa.Array, t: ListType, path: str) -> pa.Array:
    offsets, (values,) = rebased(array, array.values)
    element = _project_column(values, t.element_field, len(values), path)
    return pa.ListArray.from_arrays(offsets, element, type=type_to_arrow(t), mask=null_mask(array))


def _project_map(array: pa.Array, t: MapType, path: str) -> pa.Array:
    offsets, (keys, items) = rebased(array, array.keys, array.items)
    keys = _project_column(keys, t.key_field, len(keys), path)
    items = _project_column(items, t.value_field, len(items), path)
    return pa.MapArray.from_arrays(offsets, keys, items, type=type_to_arrow(t), mask=null_mask(array))


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
    return pa.repeat(pa.scalar(arrow_value(default), type=arrow_type), length)
