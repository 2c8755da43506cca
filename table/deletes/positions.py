"""Reading what a position delete file deletes (spec: "Position Delete Files").

A position delete file holds ``(file_path, pos)`` rows, found by their
reserved field ids, never by name. Three readers need them: the merge-on-read
reader (the positions deleted in the one data file it reads), the commit's
rewrite validation (the positions a concurrent delete took from the files a
rewrite replaces) and the compactor's dangling-delete check (which data files
a delete file names at all). All three read through :func:`read_positions`:
row group by row group, skipping the row groups whose ``file_path``
statistics exclude every wanted data file.
"""

from __future__ import annotations

import bisect
from typing import Any, Collection, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.deletes.index import referenced_data_file
from table.errors import MalformedFileError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent
from table.parquet.projection import check_ids, id_of, open_parquet, require_parquet
from table.schema import DELETE_FILE_PATH, DELETE_FILE_POS

FILE_PATH = DELETE_FILE_PATH.name
POS = DELETE_FILE_POS.name


def read_positions(
    io: FileIO, delete_file: DataFile, data_paths: Optional[Collection[str]] = None, *, with_pos: bool = True
) -> Iterator[pa.Table]:
    """The ``file_path`` and ``pos`` rows of one position delete file, a row group at a time.

    With ``data_paths``, only rows for those data files, and row groups whose
    ``file_path`` statistics exclude all of them are not read. Columns are
    named ``file_path`` and ``pos`` whatever the file calls them;
    ``with_pos=False`` reads ``file_path`` alone.
    """
    _check_position_deletes(delete_file)
    path = delete_file.file_path
    wanted = sorted(set(data_paths)) if data_paths is not None else None
    with open_parquet(io, path) as parquet:
        columns = _reserved_columns(parquet, path, with_pos)
        leaf = _leaf_index(parquet, columns[0])
        for group in range(parquet.num_row_groups):
            if wanted is not None and leaf is not None and not _group_may_hold(parquet, group, leaf, wanted):
                continue
            rows = _read_group(parquet, group, columns, path).rename_columns([FILE_PATH, POS][: len(columns)])
            if wanted is not None:
                rows = rows.filter(_is_wanted(rows.column(FILE_PATH), wanted))
            yield rows


def positions_in(io: FileIO, delete_file: DataFile, data_path: str) -> Iterator[pa.Array]:
    """The positions one delete file deletes in the data file ``data_path`` (unsorted int64 parts)."""
    for rows in read_positions(io, delete_file, (data_path,)):
        yield rows.column(POS).combine_chunks().cast(pa.int64())


def deleted_positions(
    io: FileIO, delete_files: Iterable[DataFile], data_paths: Iterable[str]
) -> dict[str, list[int]]:
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
        raise MalformedFileError(delete_file.file_path, "content", f"expected position deletes, got {delete_file.content.name}")
    require_parquet(delete_file)


def _reserved_columns(parquet: pq.ParquetFile, path: str, with_pos: bool) -> list[str]:
    """The file's names of the ``file_path`` (and ``pos``) columns, found by field id."""
    check_ids(parquet.schema_arrow, path)
    names = {id_of(f): f.name for f in parquet.schema_arrow}
    wanted = (DELETE_FILE_PATH, DELETE_FILE_POS) if with_pos else (DELETE_FILE_PATH,)
    for reserved in wanted:
        if reserved.field_id not in names:
            raise MalformedFileError(path, reserved.name, f"no top-level column with field id {reserved.field_id}")
    return [names[reserved.field_id] for reserved in wanted]


def _read_group(parquet: pq.ParquetFile, group: int, columns: list[str], path: str) -> pa.Table:
    try:
        return parquet.read_row_group(group, columns=columns, use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise MalformedFileError(path, None, f"cannot read position deletes: {exc}") from exc


def _is_wanted(file_paths: pa.ChunkedArray, wanted: list[str]) -> pa.ChunkedArray:
    if len(wanted) == 1:
        return pc.equal(file_paths, pa.scalar(wanted[0]))
    return pc.is_in(file_paths, value_set=pa.array(wanted, pa.string()))


def _leaf_index(parquet: pq.ParquetFile, name: str) -> Optional[int]:
    """The Parquet leaf column of a top-level primitive column (for its statistics)."""
    parquet_schema = parquet.metadata.schema
    return next((i for i in range(len(parquet_schema)) if parquet_schema.column(i).path == name), None)


def _group_may_hold(parquet: pq.ParquetFile, group: int, leaf: int, wanted: list[str]) -> bool:
    """Whether some wanted path (sorted) lies within the row group's ``file_path`` [min, max]."""
    stats = parquet.metadata.row_group(group).column(leaf).statistics
    if stats is None or not stats.has_min_max:
        return True
    low, high = _as_text(stats.min), _as_text(stats.max)
    first = bisect.bisect_left(wanted, low)
    return first < len(wanted) and wanted[first] <= high


def _as_text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
