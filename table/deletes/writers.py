"""Position and equality delete file writers, and the v3 deletion vector writer (spec: "Delete Formats").

Both write Parquet through :class:`DataFileWriter`, so delete files roll at
the target size and carry exact metrics, the partition tuple and the spec id
(spec: "Delete File Stats": the metrics describe the deleted rows).

Position deletes must be sorted by ``file_path`` then ``pos``. The writer
buffers what it is given, sorts the buffer and writes it out whenever it
holds ``max_buffered_rows`` rows, so each file is sorted on its own while
memory stays bounded. Their ``file_path`` and ``pos`` metrics are kept in
full, untruncated, as Java's position-delete metrics config does, so that a
planner can match delete files to data files by path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from table.arrow_schema import cast_to_schema
from table.deletes.index import referenced_data_file
from table.deletes.positions import positions_for
from table.deletes.vectors import DVBlob, write_deletion_vectors
from table.errors import SchemaError, ValidationError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, FileFormat
from table.parquet.column_stats import FULL, MetricsConfig
from table.parquet.writer import DEFAULT_TARGET_FILE_SIZE, ArrowData, DataFileWriter, FileNameFactory, abort_all
from table.partitioning import PartitionSpec
from table.schema import DELETE_FILE_PATH, DELETE_FILE_POS, Schema
from table.types import DoubleType, FloatType, NestedField, StructType

POSITION_DELETE_SCHEMA = Schema(DELETE_FILE_PATH, DELETE_FILE_POS)
POSITION_DELETE_METRICS = MetricsConfig(default=FULL)
DEFAULT_MAX_BUFFERED_ROWS = 1_000_000
_PENDING_ROWS = 10_000


class PositionDeleteWriter:
    """Writes ``(file_path, pos)`` deletes of one partition, sorted, to rolling files.

    ``table_schema`` and ``spec`` place the files under the partition's
    directory; the deleted rows are not stored (no ``row`` column).
    """

    def __init__(
        self,
        io: FileIO,
        location_prefix: str,
        table_schema: Schema,
        spec: PartitionSpec,
        partition: tuple,
        *,
        target_file_size_bytes: int = DEFAULT_TARGET_FILE_SIZE,
        max_buffered_rows: int = DEFAULT_MAX_BUFFERED_ROWS,
        file_name_factory: FileNameFactory | None = None,
        **writer_options: Any,
    ) -> None:
        if max_buffered_rows <= 0:
            raise ValidationError(f"max_buffered_rows must be positive, got {max_buffered_rows}")
        self._writer_args = (io, location_prefix, POSITION_DELETE_SCHEMA, spec, partition)
        self._writer_options = dict(
            writer_options,
            target_file_size_bytes=target_file_size_bytes,
            file_name_factory=file_name_factory or FileNameFactory(),
            content=DataFileContent.POSITION_DELETES,
            metrics_config=POSITION_DELETE_METRICS,
            footer_metadata={"delete-type": "position"},
            table_schema=table_schema,
        )
        self._max_rows = max_buffered_rows
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self._pending_paths: list[str] = []
        self._pending_positions: list[int] = []
        self._writers: list[DataFileWriter] = []
        self._closed = False

    def delete(self, file_path: str, pos: int) -> None:
        """Delete row ``pos`` (0-based) of the data file ``file_path``."""
        self._check_open()
        self._pending_paths.append(file_path)
        self._pending_positions.append(pos)
        if len(self._pending_paths) >= min(_PENDING_ROWS, self._max_rows):
            self._add_pending()

    def write(self, data: ArrowData) -> None:
        """Delete many rows at once: Arrow data with ``file_path`` and ``pos`` columns."""
        self._check_open()
        conformed = cast_to_schema(data, POSITION_DELETE_SCHEMA)
        batches = conformed.to_batches() if isinstance(conformed, pa.Table) else [conformed]
        for batch in batches:
            self._add(batch)

    def close(self) -> list[DataFile]:
        """Write what is buffered; the DataFiles of every delete file written."""
        if not self._closed:
            self._add_pending()
            self._flush()
            self._closed = True
        return [f for w in self._writers for f in w.close()]

    def abort(self) -> None:
        """Stop and delete every file written so far."""
        self._closed = True
        self._buffer, self._pending_paths, self._pending_positions = [], [], []
        abort_all(self._writers)

    def _check_open(self) -> None:
        if self._closed:
            raise ValidationError("cannot write to a closed PositionDeleteWriter")

    def _add_pending(self) -> None:
        if not self._pending_paths:
            return
        positions = pa.array(self._pending_positions, pa.int64())
        data = pa.record_batch({"file_path": self._pending_paths, "pos": positions})
        self._pending_paths, self._pending_positions = [], []
        self._add(cast_to_schema(data, POSITION_DELETE_SCHEMA))

    def _add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        negative = pc.sum(pc.less(batch.column("pos"), 0)).as_py()
        if negative:
            raise ValidationError(f"column 'pos' has {negative} negative position(s)")
        self._buffer.append(batch)
        self._buffered_rows += batch.num_rows
        if self._buffered_rows >= self._max_rows:
            self._flush()

    def _flush(self) -> None:
        """Sort the buffer by (file_path, pos) and write it to its own file(s)."""
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer)
        table = table.sort_by([("file_path", "ascending"), ("pos", "ascending")])
        self._buffer, self._buffered_rows = [], 0
        writer = DataFileWriter(*self._writer_args, **self._writer_options)
        self._writers.append(writer)
        writer.write(table)
        writer.close()


class EqualityDeleteWriter:
    """Writes equality deletes of one partition: rows whose ``equality_ids`` columns match.

    The file's schema is ``delete_schema`` (default: the table schema projected
    to the equality columns); it uses the table's field ids.
    """

    def __init__(
        self,
        io: FileIO,
        location_prefix: str,
        table_schema: Schema,
        spec: PartitionSpec,
        partition: tuple,
        equality_ids: Sequence[int],
        *,
        delete_schema: Schema | None = None,
        target_file_size_bytes: int = DEFAULT_TARGET_FILE_SIZE,
        **writer_options: Any,
    ) -> None:
        ids = list(equality_ids)
        schema = delete_schema if delete_schema is not None else table_schema.project(ids)
        check_equality_ids(schema, ids)
        self.delete_schema = schema
        self._writer = DataFileWriter(
            io,
            location_prefix,
            schema,
            spec,
            partition,
            target_file_size_bytes=target_file_size_bytes,
            content=DataFileContent.EQUALITY_DELETES,
            equality_ids=ids,
            footer_metadata={"delete-type": "equality", "delete-field-ids": ", ".join(map(str, ids))},
            table_schema=table_schema,
            **writer_options,
        )

    def write(self, data: ArrowData) -> None:
        """Delete every row equal to one of these rows (conformed to ``delete_schema``)."""
        self._writer.write(data)

    def close(self) -> list[DataFile]:
        return self._writer.close()

    def abort(self) -> None:
        self._writer.abort()


def check_equality_ids(delete_schema: Schema, equality_ids: Sequence[int]) -> None:
    """Equality columns must be distinct primitives outside lists/maps, not float/double."""
    if not equality_ids:
        raise ValidationError("equality deletes need at least one equality field id")
    if len(set(equality_ids)) != len(equality_ids):
        raise ValidationError(f"equality field ids repeat: {list(equality_ids)}")
    reachable = _struct_reachable(delete_schema.as_struct())
    for fid in equality_ids:
        found = reachable.get(fid)
        if found is None:
            raise SchemaError(f"equality field id {fid} is not a column of the delete schema reachable through structs")
        if not found.field_type.is_primitive:
            raise SchemaError(f"equality field {found.name!r} (id {fid}) is a {found.field_type}, not a primitive")
        if isinstance(found.field_type, (FloatType, DoubleType)):
            raise SchemaError(
                f"equality field {found.name!r} (id {fid}) is {found.field_type}: "
                "float columns cannot be delete columns"
            )


def _struct_reachable(struct: StructType) -> dict[int, NestedField]:
    fields: dict[int, NestedField] = {}
    for child in struct.fields:
        fields[child.field_id] = child
        if isinstance(child.field_type, StructType):
            fields.update(_struct_reachable(child.field_type))
    return fields


# --------------------------------------------------------------------------
# Deletion vectors (v3)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    """A data file that rows are deleted from: where its DV entry goes (the data file's partition)."""

    spec_id: int
    partition: tuple


class DeletionVectorWriter:
    """Collects deleted positions per data file and writes them as one Puffin file of deletion
    vectors (spec "Deletion Vectors"): one blob per data file, each a delete file entry.

    A v3 table holds at most one DV per data file, so a data file that already
    has one (or v2 position delete files, in an upgraded table) gets a DV that
    merges them: :meth:`merge_existing` reads the old deletes in, and
    :attr:`replaced` lists the delete files the commit must remove with it.
    """

    def __init__(self, io: FileIO, location_prefix: str, file_name_factory: FileNameFactory | None = None) -> None:
        self._io = io
        self._prefix = location_prefix.rstrip("/")
        self._names = file_name_factory or FileNameFactory()
        self._positions: dict[str, list[np.ndarray]] = {}
        self._targets: dict[str, _Target] = {}
        self.replaced: list[DataFile] = []
        self._written: list[DataFile] | None = None
        self._location: str | None = None

    def delete(self, data_path: str, positions: Any, spec_id: int, partition: tuple) -> None:
        """Delete ``positions`` (int64 array-like) of the data file ``data_path`` (spec and partition given)."""
        if self._written is not None:
            raise ValidationError("cannot write to a closed DeletionVectorWriter")
        target = _Target(spec_id, tuple(partition))
        if self._targets.setdefault(data_path, target) != target:
            raise ValidationError(
                f"data file {data_path} given two partitions: {self._targets[data_path]} and {target}"
            )
        self._positions.setdefault(data_path, []).append(np.asarray(positions, dtype=np.int64))

    def merge_existing(self, data_path: str, old: Sequence[DataFile], spec_id: int, partition: tuple) -> None:
        """Fold the data file's existing DV or position deletes into its new DV; the commit removes them.

        A DV names one data file and goes whole. A position delete file that
        names several stays: its other files still need it (the spec keeps it
        until each has a DV), and readers ignore it for files that have one.
        """
        for delete_file in old:
            self.delete(data_path, positions_for(self._io, delete_file, data_path), spec_id, partition)
            if delete_file.is_deletion_vector or referenced_data_file(delete_file) == data_path:
                self.replaced.append(delete_file)

    @property
    def data_paths(self) -> list[str]:
        return sorted(self._positions)

    def close(self) -> list[DataFile]:
        """Write the Puffin file (none when nothing was deleted); a delete file entry per DV."""
        if self._written is None:
            self._written = self._write() if self._positions else []
        return self._written

    def abort(self) -> None:
        """Delete the Puffin file if it was written."""
        self._written = self._written or []
        if self._location is not None:
            self._io.delete_many([self._location])

    def _write(self) -> list[DataFile]:
        self._location = f"{self._prefix}/{self._names().removesuffix('.parquet')}.puffin"
        vectors = {path: np.concatenate(parts) for path, parts in self._positions.items()}
        blobs = write_deletion_vectors(self._io, self._location, vectors)
        return [self._entry(blob) for blob in blobs]

    def _entry(self, blob: DVBlob) -> DataFile:
        target = self._targets[blob.referenced_data_file]
        return DataFile(
            content=DataFileContent.POSITION_DELETES,
            file_path=blob.location,
            file_format=FileFormat.PUFFIN,
            partition=target.partition,
            record_count=blob.cardinality,
            file_size_in_bytes=blob.file_size_in_bytes,
            spec_id=target.spec_id,
            referenced_data_file=blob.referenced_data_file,
            content_offset=blob.content_offset,
            content_size_in_bytes=blob.content_size_in_bytes,
        )
