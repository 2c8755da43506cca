"""Reading what a position delete file deletes (spec: "Position Delete Files").

A position delete file holds ``(file_path, pos)`` rows, found by their
reserved field ids, never by name. Three readers need them: the merge-on-read
reader (the positions deleted in the one data file it reads), the commit's
rewrite validation (the positions a concurrent delete took from the files a
rewrite replaces) and the compactor's dangling-delete check (which data files
a delete file names at all). All three read through :func:`read_positions`:
row group by row group, skipping the row groups whose ``file_path``
statistics exclude every wanted data file.

``file_path`` is read as a dictionary, as Parquet stores it: a delete file
names few data files, so matching paths compares a few strings per row group
and then integer indices, instead of building and comparing a string per row.

A streaming writer's delete file deletes rows of many data files, and each
of them is read by its own task, so a scan would read such a file once per
data file. The reader's tasks share a :class:`PositionCache` instead: each
row group a task needs is read once, and kept grouped by data file
(:func:`group_by_path`) within a byte budget.

A v3 deletion vector (:mod:`table.deletes.vectors`) is read here too, as the
same ``(file_path, pos)`` rows: its one blob, found by offset and length, so
every reader above handles DVs and position delete files alike.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.deletes.index import referenced_data_file
from table.deletes.vectors import positions_of, read_deletion_vector
from table.errors import MalformedFileError, ValidationError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent
from table.parquet.projection import check_ids, id_of, require_parquet
from table.schema import DELETE_FILE_PATH, DELETE_FILE_POS

FILE_PATH = DELETE_FILE_PATH.name
POS = DELETE_FILE_POS.name
DEFAULT_POSITION_CACHE_BYTES = 64 * 1024 * 1024


def read_positions(
    io: FileIO, delete_file: DataFile, data_paths: Collection[str] | None = None, *, with_pos: bool = True
) -> Iterator[pa.Table]:
    """The ``file_path`` and ``pos`` rows of one position delete file, a row group at a time.

    With ``data_paths``, only rows for those data files, and row groups whose
    ``file_path`` statistics exclude all of them are not read. Columns are
    named ``file_path`` (dictionary-encoded strings) and ``pos`` whatever the
    file calls them; ``with_pos=False`` reads ``file_path`` alone.
    """
    wanted = sorted(set(data_paths)) if data_paths is not None else None
    if delete_file.is_deletion_vector:
        rows = _vector_rows(io, delete_file, with_pos)
        if wanted is None or delete_file.referenced_data_file in wanted:
            yield rows
        return
    with _open_deletes(io, delete_file, with_pos) as deletes:
        for group in deletes.row_groups(wanted):
            rows = deletes.read(group)
            yield rows if wanted is None else rows.filter(_is_wanted(rows.column(FILE_PATH), wanted))


def vector_positions(io: FileIO, delete_file: DataFile) -> pa.Array:
    """The positions a deletion vector deletes in its data file (sorted int64)."""
    assert delete_file.referenced_data_file is not None and delete_file.content_offset is not None
    assert delete_file.content_size_in_bytes is not None
    vector = read_deletion_vector(
        io,
        delete_file.file_path,
        delete_file.content_offset,
        delete_file.content_size_in_bytes,
        delete_file.referenced_data_file,
    )
    if len(vector) != delete_file.record_count:
        raise MalformedFileError(
            delete_file.file_path,
            "record_count",
            f"the deletion vector for {delete_file.referenced_data_file} holds {len(vector)} "
            f"positions, its manifest entry says {delete_file.record_count}",
        )
    return pa.array(positions_of(vector), pa.int64())


def _vector_rows(io: FileIO, delete_file: DataFile, with_pos: bool) -> pa.Table:
    positions = vector_positions(io, delete_file)
    paths = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(len(positions), np.int32)), pa.array([delete_file.referenced_data_file], pa.string())
    )
    return pa.table([paths, positions] if with_pos else [paths], names=[FILE_PATH, POS][: 2 if with_pos else 1])


def positions_for(io: FileIO, delete_file: DataFile, data_path: str) -> pa.Array:
    """Every position one delete file (Parquet or DV) deletes in ``data_path``, as one int64 array."""
    parts = list(positions_in(io, delete_file, data_path))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.int64())


def positions_in(io: FileIO, delete_file: DataFile, data_path: str) -> Iterator[pa.Array]:
    """The positions one delete file deletes in the data file ``data_path`` (unsorted int64 parts)."""
    if delete_file.is_deletion_vector:
        if delete_file.referenced_data_file == data_path:
            yield vector_positions(io, delete_file)
        return
    for rows in read_positions(io, delete_file, (data_path,)):
        yield rows.column(POS).combine_chunks().cast(pa.int64())


_Groups = dict[str, list[pa.Array]]  # data file path -> positions (parts)


def group_by_path(file_paths: pa.Array, positions: pa.Array) -> _Groups:
    """Data file path -> the int64 ``positions`` of the rows naming it (parts, in row order).

    Pure. In a delete file sorted by ``file_path`` (as the spec requires) the
    rows of one path are contiguous: the runs of equal dictionary indices
    (one run-end encoding) give zero-copy slices. Rows out of order are
    grouped too: they are first sorted by path index (stably).
    """
    if len(file_paths) != len(positions):
        raise ValidationError(f"{len(file_paths)} file paths but {len(positions)} positions")
    if not pa.types.is_dictionary(file_paths.type):
        file_paths = pc.dictionary_encode(file_paths)
    indices, positions = file_paths.indices, positions.cast(pa.int64())
    runs = pc.run_end_encode(indices)
    if len(runs.run_ends) > len(file_paths.dictionary):  # some path has several runs: unsorted
        order = pc.array_sort_indices(indices)
        indices, positions = indices.take(order), positions.take(order)
        runs = pc.run_end_encode(indices)
    names = file_paths.dictionary.take(runs.values).to_pylist()
    groups: _Groups = {}
    start = 0
    for name, end in zip(names, runs.run_ends.to_pylist()):
        if name is not None:  # a null file_path names no data file
            groups.setdefault(name, []).append(positions.slice(start, end - start))
        start = end
    return groups


class PositionCache:
    """Row groups of position delete files already read, grouped by data
    file (:func:`group_by_path`), shared by the tasks of one scan.

    A task reads only the row groups whose ``file_path`` statistics may hold
    its data file, and each once: a streaming writer's row group, which
    names many data files, is read by the first of them. At most
    ``max_bytes`` of positions (8 bytes a row) is kept, least recently used
    out. A file that names a single data file (by its bounds) or cannot fit
    is read for the one data file instead, as without a cache. Not
    thread-safe: one per reader.
    """

    def __init__(self, max_bytes: int = DEFAULT_POSITION_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValidationError(f"the position delete cache budget must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self._groups: OrderedDict[tuple[str, int], tuple[_Groups, int]] = OrderedDict()
        # per file, each row group's file_path range: a few hundred bytes a file, as the planner holds
        self._bounds: dict[str, list[tuple[str, str] | None]] = {}
        self._bytes = 0
        self.reads = 0
        self.hits = 0

    def positions(self, io: FileIO, delete_file: DataFile, data_path: str) -> list[pa.Array]:
        """The positions ``delete_file`` deletes in ``data_path`` (unsorted int64 parts)."""
        if referenced_data_file(delete_file) is not None or delete_file.record_count * 8 > self.max_bytes:
            self.reads += 1
            return list(positions_in(io, delete_file, data_path))
        path = delete_file.file_path
        bounds = self._bounds.get(path)
        needed = None if bounds is None else [g for g, b in enumerate(bounds) if _may_hold(b, [data_path])]
        if needed is not None and all((path, g) in self._groups for g in needed):
            self.hits += 1
            found = [self._use((path, g)) for g in needed]
        else:
            self.reads += 1
            found = self._read(io, delete_file, data_path)
        return [part for groups in found for part in groups.get(data_path, [])]

    def _read(self, io: FileIO, delete_file: DataFile, data_path: str) -> list[_Groups]:
        """The needed row groups, grouped: read (and kept) when not kept already."""
        path, found = delete_file.file_path, []
        with _open_deletes(io, delete_file, True) as deletes:
            self._bounds[path] = deletes.bounds
            for group in deletes.row_groups([data_path]):
                key = (path, group)
                if key in self._groups:
                    found.append(self._use(key))
                    continue
                groups: _Groups = {}
                for batch in deletes.read(group).to_batches():
                    for name, parts in group_by_path(batch.column(FILE_PATH), batch.column(POS)).items():
                        groups.setdefault(name, []).extend(parts)
                self._keep(key, groups)
                found.append(groups)
        return found

    def _use(self, key: tuple[str, int]) -> _Groups:
        self._groups.move_to_end(key)
        return self._groups[key][0]

    def _keep(self, key: tuple[str, int], groups: _Groups) -> None:
        size = sum(p.nbytes for parts in groups.values() for p in parts)
        if size > self.max_bytes:
            return
        self._groups[key] = (groups, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, evicted) = self._groups.popitem(last=False)
            self._bytes -= evicted


def deleted_positions(io: FileIO, delete_files: Iterable[DataFile], data_paths: Iterable[str]) -> dict[str, list[int]]:
    """Data file path -> the sorted, distinct positions ``delete_files`` delete in it (only ``data_paths``)."""
    wanted = sorted(set(data_paths))
    found: dict[str, set[int]] = {}
    for delete_file in delete_files:
        for rows in read_positions(io, delete_file, wanted):
            for path, pos in zip(rows.column(FILE_PATH).to_pylist(), rows.column(POS).to_pylist()):
                found.setdefault(path, set()).add(pos)
    return {path: sorted(positions) for path, positions in sorted(found.items())}


def referenced_data_files(io: FileIO, delete_file: DataFile) -> frozenset[str]:
    """The data files a position delete file names: from its bounds when they pin one, else read."""
    single = referenced_data_file(delete_file)
    if single is not None:
        return frozenset({single})
    names: set[str] = set()
    for rows in read_positions(io, delete_file, with_pos=False):
        names.update(pc.unique(rows.column(FILE_PATH)).to_pylist())
    return frozenset(names)


def _check_position_deletes(delete_file: DataFile) -> None:
    if delete_file.content != DataFileContent.POSITION_DELETES:
        raise MalformedFileError(
            delete_file.file_path, "content", f"expected position deletes, got {delete_file.content.name}"
        )
    require_parquet(delete_file)


class _OpenDeletes:
    """An open position delete file: its reserved columns (``file_path`` read
    as a dictionary) and each row group's ``file_path`` [min, max]."""

    def __init__(self, parquet: pq.ParquetFile, columns: list[str], path: str) -> None:
        self.parquet, self.columns, self.path = parquet, columns, path
        leaf = _leaf_index(parquet, columns[0])
        self.bounds = [_group_bounds(parquet, g, leaf) for g in range(parquet.num_row_groups)]

    def row_groups(self, wanted: list[str] | None) -> list[int]:
        """The row groups that may hold a ``wanted`` path (sorted; None: all)."""
        return [g for g, b in enumerate(self.bounds) if wanted is None or _may_hold(b, wanted)]

    def read(self, group: int) -> pa.Table:
        """One row group, columns named ``file_path`` (and ``pos``)."""
        try:
            rows = self.parquet.read_row_group(group, columns=self.columns, use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            raise MalformedFileError(self.path, None, f"cannot read position deletes: {exc}") from exc
        return rows.rename_columns([FILE_PATH, POS][: len(self.columns)])


@contextmanager
def _open_deletes(io: FileIO, delete_file: DataFile, with_pos: bool) -> Iterator[_OpenDeletes]:
    """The delete file, opened. Its reserved columns are named by field id, known
    only once the footer is read: the footer is parsed once, then reused to
    reopen the same stream with ``file_path`` read as a dictionary."""
    _check_position_deletes(delete_file)
    path = delete_file.file_path
    stream = io.open_input(path)
    try:
        try:
            footer = pq.ParquetFile(stream, arrow_extensions_enabled=True)
        except (pa.ArrowException, OSError) as exc:
            raise MalformedFileError(path, None, f"not a readable Parquet file: {exc}") from exc
        columns = _reserved_columns(footer, path, with_pos)
        parquet = pq.ParquetFile(stream, metadata=footer.metadata, read_dictionary=columns[:1])
        yield _OpenDeletes(parquet, columns, path)
    finally:
        stream.close()


def _reserved_columns(parquet: pq.ParquetFile, path: str, with_pos: bool) -> list[str]:
    """The file's names of the ``file_path`` (and ``pos``) columns, found by field id."""
    check_ids(parquet.schema_arrow, path)
    names = {id_of(f): f.name for f in parquet.schema_arrow}
    wanted = (DELETE_FILE_PATH, DELETE_FILE_POS) if with_pos else (DELETE_FILE_PATH,)
    for reserved in wanted:
        if reserved.field_id not in names:
            raise MalformedFileError(path, reserved.name, f"no top-level column with field id {reserved.field_id}")
    return [names[reserved.field_id] for reserved in wanted]


def _is_wanted(file_paths: pa.ChunkedArray, wanted: list[str]) -> pa.ChunkedArray:
    """Rows naming a wanted path: the dictionary is matched, then looked up by index."""
    value_set = pa.array(wanted, pa.string())
    return pa.chunked_array([_dictionary_is_in(chunk, value_set) for chunk in file_paths.chunks], pa.bool_())


def _dictionary_is_in(paths: pa.Array, value_set: pa.Array) -> pa.Array:
    if not pa.types.is_dictionary(paths.type):
        return pc.is_in(paths, value_set=value_set)
    return pc.is_in(paths.dictionary, value_set=value_set).take(paths.indices)


def _leaf_index(parquet: pq.ParquetFile, name: str) -> int | None:
    """The Parquet leaf column of a top-level primitive column (for its statistics)."""
    parquet_schema = parquet.metadata.schema
    return next((i for i in range(len(parquet_schema)) if parquet_schema.column(i).path == name), None)


def _group_bounds(parquet: pq.ParquetFile, group: int, leaf: int | None) -> tuple[str, str] | None:
    """The row group's ``file_path`` [min, max] from its statistics; None when unknown."""
    stats = None if leaf is None else parquet.metadata.row_group(group).column(leaf).statistics
    if stats is None or not stats.has_min_max:
        return None
    return _as_text(stats.min), _as_text(stats.max)


def _may_hold(bounds: tuple[str, str] | None, wanted: list[str]) -> bool:
    """Whether some wanted path (sorted) lies within ``bounds`` (None: unknown, so yes)."""
    if bounds is None:
        return True
    first = bisect.bisect_left(wanted, bounds[0])
    return first < len(wanted) and wanted[first] <= bounds[1]


def _as_text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
