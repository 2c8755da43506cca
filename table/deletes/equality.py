"""Equality deletes: reading their keys and matching rows against them
(spec: "Equality Delete Files").

The equality columns of the delete files are read as Arrow, keys outside the
data file's bounds are dropped, the rest are de-duplicated and matched with a
vectorized lookup (``is_in`` for one key column, a semi-join for several;
null equals null). When the delete files of one key set hold more than
``max_equality_keys`` rows, the keys are loaded in chunks of at most that
many, and each chunk is matched in a pass over the data file's key columns
that records the deleted positions (chunking in delete-file order needs no
hash kernel, reads each delete file once, and costs one extra pass over the
data file's key columns per chunk). Memory: at most ``max_equality_keys``
keys per set of equality columns, plus 8 bytes per deleted row of the data
file.

An equality delete file of a streaming table applies to every older data file
of its partition, so a scan would read it once per data file. The tasks of one
scan (or one compaction group) share a :class:`DeleteKeyCache` instead: each
delete file's key columns are read once, within a byte budget (least recently
used out; a file larger than the budget is streamed as before).

An equality column that was dropped from the table still applies: it is read
under a hidden name (:func:`dropped_key_field`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from table.arrow_schema import arrow_value, primitive_from_arrow, type_to_arrow
from table.errors import MalformedFileError, ValidationError
from table.evaluators import decode_bound
from table.io import FileIO
from table.manifest import DataFile
from table.parquet.projection import (
    DEFAULT_BATCH_SIZE,
    ParquetFile,
    column_with_id,
    find_field,
    iter_batches,
    open_parquet,
    require_parquet,
    top_level_columns,
)
from table.schema import Schema
from table.types import NestedField, PrimitiveType


def equality_key_ids(deletes: Sequence[DataFile]) -> set[int]:
    """Every field id that the equality delete files compare on."""
    return {i for ids in group_by_keys(deletes) for i in ids}


def group_by_keys(deletes: Sequence[DataFile]) -> dict[tuple[int, ...], list[DataFile]]:
    """Equality delete files grouped by their (sorted) equality field ids."""
    groups: dict[tuple[int, ...], list[DataFile]] = {}
    for delete_file in deletes:
        if not delete_file.equality_ids:
            raise MalformedFileError(delete_file.file_path, "equality_ids", "missing for an equality delete file")
        groups.setdefault(tuple(sorted(set(delete_file.equality_ids))), []).append(delete_file)
    return groups


HIDDEN_PREFIX = "_floe_eq_"


def dropped_key_field(io: FileIO, field_id: int, deletes: Sequence[DataFile]) -> NestedField:
    delete_file = next(f for f in deletes if field_id in (f.equality_ids or ()))
    with open_parquet(io, delete_file.file_path) as parquet:
        arrow_field = find_field(parquet.schema_arrow, field_id)
    if arrow_field is None:
        raise MalformedFileError(delete_file.file_path, f"equality_ids[{field_id}]", "no column with this field id")
    field_type = primitive_from_arrow(arrow_field.type)
    if field_type is None:
        raise MalformedFileError(delete_file.file_path, arrow_field.name, f"unsupported key type {arrow_field.type}")
    return NestedField(field_id, f"{HIDDEN_PREFIX}{field_id}", field_type, required=False)


def key_columns(batch: pa.RecordBatch, ids: tuple[int, ...], path: str) -> list[pa.Array]:
    return [_key_array(_column_by_id(batch, i, path)) for i in ids]


def _column_by_id(batch: pa.RecordBatch, field_id: int, path: str) -> pa.Array:
    found = column_with_id(batch.columns, list(batch.schema), field_id)
    if found is None:
        raise ValidationError(f"{path}: equality column {field_id} was not read")
    return found


DEFAULT_KEY_CACHE_BYTES = 64 * 1024 * 1024


class DeleteKeyCache:
    """Key columns of equality delete files already read, shared by the tasks of one scan.

    At most ``max_bytes`` of Arrow data is kept, least recently used out.
    Not thread-safe: one per reader.
    """

    def __init__(self, max_bytes: int = DEFAULT_KEY_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValidationError(f"the delete key cache budget must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._tables: OrderedDict[tuple[str, tuple[int, ...], tuple[str, ...]], pa.Table] = OrderedDict()
        self._bytes = 0
        self.reads = 0
        self.hits = 0

    def key_tables(
        self, io: FileIO, delete_file: DataFile, ids: tuple[int, ...], types: list[pa.DataType]
    ) -> Iterator[pa.Table]:
        """The file's keys as :func:`_read_keys` yields them, from memory when read before."""
        slot = (delete_file.file_path, ids, tuple(str(t) for t in types))
        cached = self._tables.get(slot)
        if cached is not None:
            self.hits += 1
            self._tables.move_to_end(slot)
            yield cached
            return
        self.reads += 1
        if not self._may_fit(delete_file, ids):  # too big to keep: stream it, as without a cache
            yield from _read_keys(io, delete_file, ids, types)
            return
        table = _concat(list(_read_keys(io, delete_file, ids, types)), ids, types)
        self._keep(slot, table)
        yield table

    def _may_fit(self, delete_file: DataFile, ids: tuple[int, ...]) -> bool:
        """Whether the file's keys can fit, judged before reading (8 bytes per key value at least)."""
        return (
            delete_file.file_size_in_bytes <= self.max_bytes
            and delete_file.record_count * 8 * len(ids) <= self.max_bytes
        )

    def _keep(self, slot: tuple[str, tuple[int, ...], tuple[str, ...]], table: pa.Table) -> None:
        size = table.nbytes
        if size > self.max_bytes:
            return
        self._tables[slot] = table
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, evicted = self._tables.popitem(last=False)
            self._bytes -= evicted.nbytes


class EqualityKeyLoader:
    """Reads the equality keys of delete files for one data file."""

    def __init__(
        self,
        io: FileIO,
        data_file: DataFile,
        read_schema: Schema,
        data: ParquetFile,
        max_equality_keys: int,
        key_cache: DeleteKeyCache | None = None,
    ) -> None:
        self.io = io
        self.data_file = data_file
        self.read_schema = read_schema
        self.data = data
        self.max_equality_keys = max_equality_keys
        self.key_cache = key_cache

    def key_types(self, ids: tuple[int, ...]) -> list[pa.DataType]:
        return [_key_type(type_to_arrow(self.read_schema.find_field(i).field_type)) for i in ids]

    def load_keys(self, ids: tuple[int, ...], files: list[DataFile]) -> EqualityKeys:
        chunks = list(self.key_tables(ids, files))
        return EqualityKeys(ids, _dedup(_concat(chunks, ids, self.key_types(ids))))

    def key_tables(self, ids: tuple[int, ...], files: list[DataFile]) -> Iterator[pa.Table]:
        """The keys of the delete files, batch by batch, cast to the read types
        and restricted to the data file's key bounds."""
        types = self.key_types(ids)
        bounds_filter = _bounds_filter(self.data_file, self.read_schema, ids)
        for delete_file in files:
            if self.key_cache is not None:
                tables = self.key_cache.key_tables(self.io, delete_file, ids, types)
            else:
                tables = _read_keys(self.io, delete_file, ids, types)
            for keys in tables:
                yield keys.filter(bounds_filter) if bounds_filter is not None else keys

    def chunked_positions(self, ids: tuple[int, ...], files: list[DataFile]) -> pa.Array:
        """Deleted positions of the data file, matching at most
        ``max_equality_keys`` delete keys at a time."""
        key_schema = self.read_schema.project(ids)
        found: list[pa.Array] = []
        for chunk in _chunks(self.key_tables(ids, files), self.max_equality_keys, ids, self.key_types(ids)):
            keys = EqualityKeys(ids, _dedup(chunk))
            for start, batch in self.data.batches(key_schema):
                hits = pc.indices_nonzero(keys.contains(key_columns(batch, ids, self.data.path)))
                found.append(pc.add(hits.cast(pa.int64()), pa.scalar(start, pa.int64())))
        return pa.concat_arrays(found) if found else pa.array([], pa.int64())


def _key_name(field_id: int) -> str:
    return f"k{field_id}"


def _key_type(arrow_type: pa.DataType) -> pa.DataType:
    """Keys are compared on storage: Arrow kernels do not compare extension types (uuid)."""
    return arrow_type.storage_type if isinstance(arrow_type, pa.BaseExtensionType) else arrow_type


def _key_array(array: pa.Array) -> pa.Array:
    return array.storage if isinstance(array.type, pa.BaseExtensionType) else array


def _read_keys(io: FileIO, delete_file: DataFile, ids: tuple[int, ...], types: list[pa.DataType]) -> Iterator[pa.Table]:
    """The equality columns of one delete file, batch by batch, as key tables."""
    require_parquet(delete_file)
    path = delete_file.file_path
    with open_parquet(io, path) as parquet:
        file_schema = parquet.schema_arrow
        for field_id in ids:
            if find_field(file_schema, field_id) is None:
                raise MalformedFileError(path, f"equality_ids[{field_id}]", "no column with this field id")
        columns = top_level_columns(file_schema, ids, path)
        read_fields = [file_schema.field(name) for name in columns]
        for _, raw in iter_batches(parquet, path, DEFAULT_BATCH_SIZE, columns):
            arrays = [column_with_id(raw, read_fields, i) for i in ids]
            keys = [_key_array(a).cast(t) for a, t in zip(arrays, types)]
            yield pa.table(keys, names=[_key_name(i) for i in ids])


def _bounds_filter(data_file: DataFile, read_schema: Schema, ids: tuple[int, ...]) -> pc.Expression | None:
    """Keeps the delete keys that may occur in the data file: null keys, and
    keys inside the data file's [lower, upper] bounds for every key column."""
    condition: pc.Expression | None = None
    for field_id in ids:
        t = read_schema.find_field(field_id).field_type
        assert isinstance(t, PrimitiveType)
        lower = decode_bound(t, (data_file.lower_bounds or {}).get(field_id), data_file.file_path, field_id)
        upper = decode_bound(t, (data_file.upper_bounds or {}).get(field_id), data_file.file_path, field_id)
        if lower is None or upper is None:
            continue
        key = pc.field(_key_name(field_id))
        arrow_type = _key_type(type_to_arrow(t))
        low, high = pa.scalar(arrow_value(lower), arrow_type), pa.scalar(arrow_value(upper), arrow_type)
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


class EqualityKeys:
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
        left = pa.table([*_null_safe(columns), rows], names=[*self._names, "_row"])
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
