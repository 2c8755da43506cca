"""Which rows of given data files a set of position delete files deletes.

A rewrite that lost rows to concurrent position deletes reports them exactly
(:class:`~commit.operations.errors.RewriteConflict`), so that the compactor
can map them to positions in its new files. Columns are found by their
reserved field ids (spec: "Position Delete Files"), not by name.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.arrow_schema import FIELD_ID_KEY
from table.deletes import DELETE_FILE_PATH, DELETE_FILE_POS
from table.errors import MalformedFileError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, FileFormat


def deleted_positions(io: FileIO, delete_files: Iterable[DataFile], data_paths: Iterable[str]) -> dict[str, list[int]]:
    """Data file path -> sorted, distinct positions the delete files delete in it (only ``data_paths``)."""
    wanted = pa.array(sorted(set(data_paths)), pa.string())
    found: dict[str, set[int]] = {}
    for delete_file in delete_files:
        rows = _read(io, delete_file)
        rows = rows.filter(pc.is_in(rows.column(0), value_set=wanted))
        for path, pos in zip(rows.column(0).to_pylist(), rows.column(1).to_pylist()):
            found.setdefault(path, set()).add(pos)
    return {path: sorted(positions) for path, positions in sorted(found.items())}


def _read(io: FileIO, delete_file: DataFile) -> pa.Table:
    """The (file_path, pos) rows of one Parquet position delete file."""
    path = delete_file.file_path
    if delete_file.content != DataFileContent.POSITION_DELETES or delete_file.file_format != FileFormat.PARQUET:
        raise MalformedFileError(path, None, "expected a Parquet position delete file")
    try:
        with io.open_input(path) as f:
            parquet = pq.ParquetFile(f)
            names = {_field_id(field): field.name for field in parquet.schema_arrow}
            columns = [names.get(DELETE_FILE_PATH.field_id), names.get(DELETE_FILE_POS.field_id)]
            if None in columns:
                raise MalformedFileError(path, None, "no file_path/pos columns with the reserved field ids")
            return parquet.read(columns=columns, use_threads=False)
    except (pa.ArrowException, OSError) as e:
        raise MalformedFileError(path, None, f"cannot read position deletes: {e}") from e


def _field_id(field: pa.Field) -> int:
    raw = (field.metadata or {}).get(FIELD_ID_KEY)
    return -1 if raw is None else int(raw)
