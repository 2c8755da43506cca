"""Segments of the key index and how a key's entry is found in them.

A *segment* is one table of one bucket: the key columns (named ``k<field
id>``), ``file`` and ``pos``, sorted by key, one row per key. A null
``file`` is a tombstone: the key was deleted. A bucket is a list of
segments, oldest first (a base, then deltas); a key's entry is the one in the
newest segment that holds it. Then the compactor's rewrites (*remaps*,
:meth:`commit.position_map.PositionMap.relocate`) move entries that still
point at a rewritten file.

Everything here is pure: Arrow tables in, Arrow tables out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commit.position_map import PositionMap
from table.arrow_schema import type_to_arrow
from table.schema import Schema

FILE, POS = "file", "pos"
FILE_TYPE = pa.dictionary(pa.int32(), pa.string())
"""``file`` in memory: a segment names few files for many keys (a plain string column
of 30 M paths is gigabytes; as a dictionary it is 4 bytes a key)."""
_ROW = "_row"


def key_name(field_id: int) -> str:
    """The column of key field ``field_id`` in a segment."""
    return f"k{field_id}"


def key_arrow_type(schema: Schema, field_id: int) -> pa.DataType:
    """The Arrow type of key field ``field_id`` in the index: the table's, an extension type as its storage.

    Keys are sorted, grouped, joined and hashed, and Arrow does none of that on an extension type: a
    ``uuid`` key is its 16 bytes (``fixed_size_binary(16)``), which Iceberg's bucket hash also reads.
    """
    kind = type_to_arrow(schema.find_field(field_id).field_type)
    return kind.storage_type if isinstance(kind, pa.BaseExtensionType) else kind


def segment_schema(key_fields: Sequence[pa.Field]) -> pa.Schema:
    """Key columns (already named by :func:`key_name`), then ``file`` and ``pos``."""
    return pa.schema([*key_fields, pa.field(FILE, FILE_TYPE), pa.field(POS, pa.int64())])


def make_segment(keys: pa.Table, files: pa.Array, positions: pa.Array) -> pa.Table:
    """A segment from aligned keys and locations (null file: tombstone), sorted by key.

    Keys must be distinct: a batch reduces each key to one change before it
    reaches the index.
    """
    table = keys.append_column(FILE, as_file_column(files)).append_column(POS, _as(positions, pa.int64()))
    return table.sort_by([(name, "ascending") for name in keys.column_names])


def as_file_column(files: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``files`` as :data:`FILE_TYPE`."""
    if isinstance(files, pa.ChunkedArray):
        files = (
            files.unify_dictionaries().combine_chunks()
            if pa.types.is_dictionary(files.type)
            else files.combine_chunks()
        )
    if pa.types.is_dictionary(files.type):
        return files.cast(FILE_TYPE)
    return pc.dictionary_encode(files.cast(pa.string())).cast(FILE_TYPE)


def lookup(keys: pa.Table, segments: Sequence[pa.Table]) -> tuple[pa.Array, pa.Array]:
    """The entry of each row of ``keys`` in a bucket's ``segments`` (oldest first).

    Returns ``file`` and ``pos`` aligned with ``keys``; ``file`` is null for
    a key that has no entry or whose newest entry is a tombstone. Files travel
    as codes into the segments' few paths, never as a Python string per key
    (that was most of a lookup's cost: docs/performance.md).
    """
    count = keys.num_rows
    codes = np.full(count, -1, dtype=np.int64)  # into ``paths``; -1: no entry, or a tombstone
    positions = np.zeros(count, dtype=np.int64)
    paths: dict[str, int] = {}
    for segment in segments:
        rows, local_codes, dictionary, found_positions = _matches(keys, segment)
        if not len(rows):
            continue
        to_global = np.array(
            [paths.setdefault(path, len(paths)) for path in dictionary.to_pylist()] + [-1], dtype=np.int64
        )
        codes[rows] = to_global[local_codes]  # a tombstone's code is -1, the extra last slot
        positions[rows] = found_positions
    missing = codes < 0
    files = pa.DictionaryArray.from_arrays(
        pa.array(codes, pa.int32(), mask=missing), pa.array(list(paths), pa.string())
    )
    return files.cast(pa.string()), pa.array(positions, pa.int64(), mask=missing)


def resolve(segments: Sequence[pa.Table]) -> pa.Table:
    """Every live entry of a bucket: the newest per key, tombstones dropped, sorted by key."""
    live = [s for s in segments if s.num_rows]
    if not live:
        return segments[0].slice(0, 0) if segments else pa.table({})
    combined = pa.concat_tables([s.select(live[0].column_names) for s in live]).unify_dictionaries()
    keys = [n for n in combined.column_names if n not in (FILE, POS)]
    ordered = combined.append_column(_ROW, pa.array(np.arange(combined.num_rows), pa.int64()))
    newest = ordered.group_by(keys).aggregate([(_ROW, "max")]).column(f"{_ROW}_max")
    latest = combined.take(newest)
    latest = latest.filter(pc.is_valid(latest.column(FILE)))
    return latest.sort_by([(name, "ascending") for name in keys])


def remap(files: pa.Array, positions: pa.Array, maps: Sequence[PositionMap]) -> tuple[pa.Array, pa.Array]:
    """Locations after the rewrites ``maps`` (in commit order); a row no rewrite wrote out becomes null."""
    for position_map in maps:
        if len(files) == 0:
            break
        files, positions = position_map.relocate(files, positions)
    return files, positions


def remap_segment(segment: pa.Table, maps: Sequence[PositionMap]) -> pa.Table:
    """``segment`` with its entries moved by ``maps``; entries of rows no longer anywhere dropped."""
    if not maps or not segment.num_rows:
        return segment
    live = segment.filter(pc.is_valid(segment.column(FILE)))
    files, positions = remap(live.column(FILE).combine_chunks(), live.column(POS).combine_chunks(), maps)
    moved = live.set_column(live.schema.get_field_index(FILE), FILE, as_file_column(files))
    moved = moved.set_column(moved.schema.get_field_index(POS), POS, positions)
    return moved.filter(pc.is_valid(moved.column(FILE)))


# ---------------------------------------------------------------------------


def _matches(keys: pa.Table, segment: pa.Table) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray]:
    """Every key found in ``segment``: (row of ``keys``, file code, the codes' paths, pos); a tombstone's
    code is -1."""
    if segment.num_rows == 0 or keys.num_rows == 0:
        nothing = np.zeros(0, dtype=np.int64)
        return nothing, nothing, pa.array([], pa.string()), nothing
    integral = _integral_key(keys, segment)
    if integral is not None:
        rows, at = _sorted_matches(*integral)
        found = segment.select([FILE, POS]).take(pa.array(at, pa.int64()))
    else:
        probe = keys.append_column(_ROW, pa.array(np.arange(keys.num_rows), pa.int64()))
        found = segment.join(probe, keys=keys.column_names, join_type="inner")
        rows = found.column(_ROW).to_numpy()
    codes, dictionary = _file_codes(found.column(FILE))
    return rows, codes, dictionary, found.column(POS).fill_null(0).to_numpy()


def _file_codes(files: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """``files`` as codes into a dictionary of paths (-1: null)."""
    files = as_file_column(files)
    codes = files.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, files.dictionary


def _integral_key(keys: pa.Table, segment: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides' single integral key as int64 arrays, for a binary search; None otherwise."""
    if keys.num_columns != 1:
        return None
    wanted, held = keys.column(0), segment.column(keys.column_names[0])
    if not (pa.types.is_integer(wanted.type) and pa.types.is_integer(held.type)):
        return None
    return _as_int64(wanted), _as_int64(held)


def _as_int64(column: pa.ChunkedArray) -> np.ndarray:
    return column.cast(pa.int64()).combine_chunks().to_numpy(zero_copy_only=False)


def _sorted_matches(wanted: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in ``wanted``, position in ``held``) of every wanted key that the sorted ``held`` holds."""
    at = np.searchsorted(held, wanted)
    inside = at < len(held)
    found = np.zeros(len(wanted), dtype=bool)
    found[inside] = held[at[inside]] == wanted[inside]
    return np.flatnonzero(found).astype(np.int64), at[found]


def key_column(values: pa.Array | pa.ChunkedArray, schema: Schema, field_id: int) -> pa.Array:
    """``values`` of key field ``field_id`` in the index's Arrow type (:func:`key_arrow_type`)."""
    return _as(values, key_arrow_type(schema, field_id))


def _as(values: pa.Array, kind: pa.DataType) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values.type, pa.BaseExtensionType) and not isinstance(kind, pa.BaseExtensionType):
        values = values.storage
    return values.cast(kind) if values.type != kind else values


def keys_of(rows: pa.RecordBatch | pa.Table, schema: Schema, key_ids: Sequence[int]) -> pa.Table:
    """The key columns of rows in the index's Arrow types (:func:`key_arrow_type`), named for a segment
    (nested keys followed)."""
    columns = {}
    for field_id in key_ids:
        names = schema.find_column_name(field_id).split(".")
        column = rows.column(names[0])
        for name in names[1:]:
            column = pc.struct_field(column, name)
        columns[key_name(field_id)] = key_column(column, schema, field_id)
    return pa.table(columns)
