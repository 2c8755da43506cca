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

from typing import Sequence

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
        files = files.unify_dictionaries().combine_chunks() if pa.types.is_dictionary(files.type) \
            else files.combine_chunks()
    if pa.types.is_dictionary(files.type):
        return files.cast(FILE_TYPE)
    return pc.dictionary_encode(files.cast(pa.string())).cast(FILE_TYPE)


def lookup(keys: pa.Table, segments: Sequence[pa.Table]) -> tuple[pa.Array, pa.Array]:
    """The entry of each row of ``keys`` in a bucket's ``segments`` (oldest first).

    Returns ``file`` and ``pos`` aligned with ``keys``; ``file`` is null for
    a key that has no entry or whose newest entry is a tombstone.
    """
    count = keys.num_rows
    files = np.full(count, None, dtype=object)
    positions = np.zeros(count, dtype=np.int64)
    for segment in segments:
        rows, found_files, found_positions = _matches(keys, segment)
        files[rows] = found_files
        positions[rows] = found_positions
    valid = np.array([f is not None for f in files], dtype=bool)
    return pa.array(files, pa.string()), pa.array(positions, pa.int64(), mask=~valid)


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


def _matches(keys: pa.Table, segment: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row of ``keys``, file, pos) of every key found in ``segment``."""
    if segment.num_rows == 0 or keys.num_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
    integral = _integral_key(keys, segment)
    if integral is not None:
        return _sorted_matches(*integral, segment)
    probe = keys.append_column(_ROW, pa.array(np.arange(keys.num_rows), pa.int64()))
    hits = segment.join(probe, keys=keys.column_names, join_type="inner")
    return (
        hits.column(_ROW).to_numpy(),
        np.array(hits.column(FILE).to_pylist(), dtype=object),
        hits.column(POS).fill_null(0).to_numpy(),
    )


def _integral_key(keys: pa.Table, segment: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides' single integral key as int64 arrays, for a binary search; None otherwise."""
    if keys.num_columns != 1:
        return None
    wanted, held = keys.column(0), segment.column(keys.column_names[0])
    if not (pa.types.is_integer(wanted.type) and pa.types.is_integer(held.type)):
        return None
    as_long = lambda c: c.cast(pa.int64()).combine_chunks().to_numpy(zero_copy_only=False)  # noqa: E731
    return as_long(wanted), as_long(held)


def _sorted_matches(wanted: np.ndarray, held: np.ndarray, segment: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    at = np.searchsorted(held, wanted)
    inside = at < len(held)
    found = np.zeros(len(wanted), dtype=bool)
    found[inside] = held[at[inside]] == wanted[inside]
    rows = np.flatnonzero(found).astype(np.int64)
    take = pa.array(at[found], pa.int64())
    files = np.array(segment.column(FILE).take(take).to_pylist(), dtype=object)
    return rows, files, segment.column(POS).take(take).fill_null(0).to_numpy()


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
