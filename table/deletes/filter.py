"""Applying a task's delete files to its data file, while the file streams
batch by batch (spec: "Position Delete Files", "Equality Delete Files").

* Position deletes: the positions that the task's position delete files
  delete in this data file (:mod:`table.deletes.positions`) are kept as one
  sorted Arrow array; each batch drops the rows at those positions. Memory:
  8 bytes per deleted row of the data file being read.
* Equality deletes: each set of equality columns is matched as
  :mod:`table.deletes.equality` describes; key sets too large for memory are
  turned into deleted positions instead.
"""

from __future__ import annotations

import bisect
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from table.deletes.equality import DeleteKeyCache, EqualityKeyLoader, EqualityKeys, group_by_keys, key_columns
from table.deletes.index import position_deletes_may_apply
from table.deletes.positions import positions_in
from table.io import FileIO
from table.manifest import DataFile
from table.parquet.projection import ParquetFile
from table.schema import Schema
from table.tasks import FileScanTask


class DeleteFilter:
    """The deletes of one task, loaded: drops the deleted rows of each batch."""

    def __init__(self, path: str, mask: _PositionMask, keys: list[EqualityKeys]) -> None:
        self._path = path
        self._mask = mask
        self._keys = keys

    @classmethod
    def load(
        cls,
        io: FileIO,
        task: FileScanTask,
        read_schema: Schema,
        data: ParquetFile,
        max_equality_keys: int,
        key_cache: Optional[DeleteKeyCache] = None,
    ) -> DeleteFilter:
        """Read the task's position deletes and equality keys (or, for key sets
        above ``max_equality_keys``, the positions they delete)."""
        loader = EqualityKeyLoader(io, task.data_file, read_schema, data, max_equality_keys, key_cache)
        positions = _deleted_positions(io, task.data_file.file_path, task.position_deletes)
        in_memory: list[EqualityKeys] = []
        for ids, files in group_by_keys(task.equality_deletes).items():
            if sum(f.record_count for f in files) <= max_equality_keys:
                in_memory.append(loader.load_keys(ids, files))
            else:
                positions.append(loader.chunked_positions(ids, files))
        return cls(data.path, _PositionMask(_sorted_unique(positions)), in_memory)

    def apply(self, batch: pa.RecordBatch, start: int) -> pa.RecordBatch:
        """The live rows of ``batch``, whose first row is at position ``start``."""
        return _apply_deletes(batch, start, self._mask, self._keys, self._path)


def _apply_deletes(
    batch: pa.RecordBatch, start: int, mask: _PositionMask, keys: list[EqualityKeys], path: str
) -> pa.RecordBatch:
    keep = mask.keep(start, batch.num_rows)
    for key_set in keys:
        deleted = key_set.contains(key_columns(batch, key_set.ids, path))
        keep = pc.invert(deleted) if keep is None else pc.and_(keep, pc.invert(deleted))
    return batch if keep is None else batch.filter(keep)


def _deleted_positions(io: FileIO, data_path: str, deletes: Sequence[DataFile]) -> list[pa.Array]:
    """The positions that ``deletes`` mark deleted in the data file (unsorted parts)."""
    parts = []
    for delete_file in deletes:
        if position_deletes_may_apply(delete_file, data_path):
            parts.extend(positions_in(io, delete_file, data_path))
    return parts


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


