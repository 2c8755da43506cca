"""Applying a task's delete files to its data file, while the file streams
batch by batch (spec: "Position Delete Files", "Equality Delete Files").

* Position deletes: the positions that the task's position delete files
  delete in this data file (:mod:`table.deletes.positions`, through the
  scan's :class:`PositionCache`) are kept as one sorted array; each batch
  drops the rows at those positions (:func:`keep_mask`, :func:`filter_rows`).
  Memory: 8 bytes per deleted row of the data file being read, a byte per
  row of the batch, plus the cache's budget.
* Equality deletes: each set of equality columns is matched as
  :mod:`table.deletes.equality` describes; key sets too large for memory are
  turned into deleted positions instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.deletes.equality import DeleteKeyCache, EqualityKeyLoader, EqualityKeys, group_by_keys, key_columns
from table.deletes.index import position_deletes_may_apply
from table.deletes.positions import PositionCache, positions_in
from table.io import FileIO
from table.manifest import DataFile
from table.parquet.projection import ParquetFile
from table.schema import Schema
from table.tasks import FileScanTask


class DeleteFilter:
    """The deletes of one task, loaded: drops the deleted rows of each batch."""

    def __init__(self, path: str, positions: np.ndarray, keys: list[EqualityKeys]) -> None:
        self._path = path
        self._positions = positions
        self._keys = keys

    @classmethod
    def load(
        cls,
        io: FileIO,
        task: FileScanTask,
        read_schema: Schema,
        data: ParquetFile,
        max_equality_keys: int,
        key_cache: DeleteKeyCache | None = None,
        position_cache: PositionCache | None = None,
    ) -> DeleteFilter:
        """Read the task's position deletes and equality keys (or, for key sets
        above ``max_equality_keys``, the positions they delete)."""
        loader = EqualityKeyLoader(io, task.data_file, read_schema, data, max_equality_keys, key_cache)
        positions = _deleted_positions(io, task.data_file.file_path, task.position_deletes, position_cache)
        in_memory: list[EqualityKeys] = []
        for ids, files in group_by_keys(task.equality_deletes).items():
            if sum(f.record_count for f in files) <= max_equality_keys:
                in_memory.append(loader.load_keys(ids, files))
            else:
                positions.append(loader.chunked_positions(ids, files))
        return cls(data.path, sorted_positions(positions), in_memory)

    def apply(self, batch: pa.RecordBatch, start: int) -> pa.RecordBatch:
        """The live rows of ``batch``, whose first row is at position ``start``."""
        keep = keep_mask(self._positions, start, batch.num_rows)
        for key_set in self._keys:
            deleted = key_set.contains(key_columns(batch, key_set.ids, self._path))
            keep = pc.invert(deleted) if keep is None else pc.and_(keep, pc.invert(deleted))
        return batch if keep is None else filter_rows(batch, keep)


def _deleted_positions(
    io: FileIO, data_path: str, deletes: Sequence[DataFile], cache: PositionCache | None
) -> list[pa.Array]:
    """The positions that ``deletes`` mark deleted in the data file (unsorted parts)."""
    parts: list[pa.Array] = []
    for delete_file in deletes:
        if not position_deletes_may_apply(delete_file, data_path):
            continue
        if cache is not None:
            parts.extend(cache.positions(io, delete_file, data_path))
        else:
            parts.extend(positions_in(io, delete_file, data_path))
    return parts


def sorted_positions(parts: Sequence[pa.Array]) -> np.ndarray:
    """The integers of ``parts`` as one sorted int64 array, for :func:`keep_mask`
    (nulls dropped; repeats kept, as the scatter does not mind them). Pure."""
    arrays = [p.drop_null().cast(pa.int64()).to_numpy() for p in parts]
    merged = np.concatenate(arrays) if arrays else np.empty(0, np.int64)
    merged.sort()
    return merged


def keep_mask(deleted: np.ndarray, start: int, length: int) -> pa.Array | None:
    """A filter for the rows ``start .. start+length-1``: false at the
    positions in ``deleted`` (sorted int64); None when none of them is
    deleted. Pure.

    A binary search finds the batch's positions and a scatter clears them
    (pyarrow has neither: a hash lookup of every row, ``is_in``, costs ten
    times this). int64, because numpy compares Python ints with a narrower
    array by copying it, on every call. The bitmap is handed to Arrow without
    a validity bitmap, which :func:`filter_rows` needs for its fast path.
    """
    low, high = np.searchsorted(deleted, (start, start + length))
    if low == high:
        return None
    keep = np.ones(length, dtype=bool)
    keep[deleted[low:high] - start] = False
    return pa.Array.from_buffers(pa.bool_(), length, [None, pa.py_buffer(np.packbits(keep, bitorder="little"))])


def filter_rows(batch: pa.RecordBatch, keep: pa.Array) -> pa.RecordBatch:
    """The rows of ``batch`` where ``keep`` is true (a null drops the row), column by column.

    Faster than ``batch.filter``, which turns the filter into indices and
    gathers every column (strings at about three times the cost): each
    column is filtered by the bitmap itself, given without a validity
    bitmap (with one, even all valid, Arrow takes a slower path), and an
    all-null column is made, not filtered (optional columns often are).
    """
    if keep.null_count:
        keep = pc.fill_null(keep, False)
    bits = pa.Array.from_buffers(pa.bool_(), len(keep), [None, keep.buffers()[1]], null_count=0, offset=keep.offset)
    count = bits.true_count
    columns = [pa.nulls(count, c.type) if c.null_count == len(c) else c.filter(bits) for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
