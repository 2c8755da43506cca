"""Parquet data (and delete) file writer with rolling, and the table's writer options.

Files are written the way Iceberg Java writes them where readers care:
Parquet format 2.6 logical types (timestamps as ``TIMESTAMP(MICROS)`` with
``isAdjustedToUTC`` per type, ``UUID``, decimals as INT32/INT64 up to
precision 18), 3-level lists and maps, field ids on every column, the table
schema as ``iceberg.schema`` footer metadata, version 1 data pages.

Rolling follows Java's rolling writers: every 1000 rows the bytes already
written plus an estimate of the buffered row group are compared with the
target size. The estimate scales buffered Arrow bytes by the compression
ratio observed so far; when it reaches the target the buffer is written out
so the comparison is exact, and the file is closed if it really is full.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from table import properties as props
from table.arrow_schema import schema_to_arrow
from table.errors import SchemaError, ValidationError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, FileFormat
from table.metadata import TableMetadata
from table.parquet.column_stats import DEFAULT_METRICS, MetricsConfig, collect_metrics, count_nans
from table.partitioning import PartitionSpec
from table.schema import Schema

DEFAULT_TARGET_FILE_SIZE = props.TARGET_FILE_SIZE.default
DEFAULT_ROW_GROUP_ROWS = 1024 * 1024
DEFAULT_ROW_GROUP_BYTES = props.PARQUET_ROW_GROUP_SIZE.default
CHECK_ROWS = 1_000
"""Rows between two size checks, as in Java's rolling writers; batches are sliced to it."""

ArrowData: TypeAlias = pa.RecordBatch | pa.Table


class FileNameFactory:
    """Unique file names ``{prefix}-{uuid}-{n:05d}.parquet``, n counting from 1.

    One factory per write task: the uuid tells tasks apart and the counter
    tells the files of one task apart (Java's ``OutputFileFactory`` scheme).
    """

    def __init__(self, prefix: str = "00000-0", operation_id: str | None = None) -> None:
        self.prefix = prefix
        self.operation_id = operation_id or str(uuid.uuid4())
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self.prefix}-{self.operation_id}-{next(self._counter):05d}.parquet"


def parquet_writer_options(compression: str = "zstd", compression_level: int | None = None) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` settings that match what Iceberg readers expect."""
    return {
        "version": "2.6",
        "data_page_version": "1.0",
        "use_compliant_nested_type": True,
        "store_decimal_as_integer": True,
        "write_statistics": True,
        "compression": compression,
        "compression_level": compression_level,
    }


@dataclass(frozen=True)
class WriterOptions:
    """How a table wants its files written: its ``write.*`` properties, read once.

    Ingest's write tasks and the compactor both take their options from
    :meth:`for_table`, so the two write files the same way. Plain data: it
    ships to Spark executors with the task.
    """

    target_file_size_bytes: int = props.TARGET_FILE_SIZE.default
    delete_target_file_size_bytes: int = props.DELETE_TARGET_FILE_SIZE.default
    row_group_bytes: int = props.PARQUET_ROW_GROUP_SIZE.default
    compression: str = props.PARQUET_COMPRESSION.default
    compression_level: int | None = None
    metrics_config: MetricsConfig = field(default_factory=MetricsConfig)

    @classmethod
    def for_table(cls, metadata: TableMetadata) -> WriterOptions:
        """The options of ``metadata``'s properties (Iceberg Java's defaults when unset)."""
        properties = metadata.properties
        return cls(
            target_file_size_bytes=props.TARGET_FILE_SIZE.read(properties),
            delete_target_file_size_bytes=props.DELETE_TARGET_FILE_SIZE.read(properties),
            row_group_bytes=props.PARQUET_ROW_GROUP_SIZE.read(properties),
            compression=props.PARQUET_COMPRESSION.read(properties),
            compression_level=_compression_level(properties),
            metrics_config=MetricsConfig.from_properties(properties, metadata.schema()),
        )

    def for_data(self) -> dict[str, Any]:
        """:class:`DataFileWriter` keyword arguments for data files."""
        return dict(
            self._file_options(), target_file_size_bytes=self.target_file_size_bytes, metrics_config=self.metrics_config
        )

    def for_deletes(self) -> dict[str, Any]:
        """Keyword arguments for delete file writers (their own target size; their own metrics)."""
        return dict(self._file_options(), target_file_size_bytes=self.delete_target_file_size_bytes)

    def _file_options(self) -> dict[str, Any]:
        return {
            "row_group_bytes": self.row_group_bytes,
            "compression": self.compression,
            "compression_level": self.compression_level,
        }


def _compression_level(properties: Mapping[str, str]) -> int | None:
    """``write.parquet.compression-level``, for codecs that take one: like Iceberg Java, a level
    set for ``snappy`` or ``uncompressed`` is ignored (pyarrow would refuse every file)."""
    codec = props.PARQUET_COMPRESSION.read(properties)
    level = props.PARQUET_COMPRESSION_LEVEL.read(properties)
    return level if codec != "none" and pa.Codec.supports_compression_level(codec) else None


@dataclass
class _OpenFile:
    """One Parquet file being written: its row-group buffer and size estimate."""

    path: str
    sink: pa.NativeFile
    writer: pq.ParquetWriter
    schema: pa.Schema
    buffer: list[pa.RecordBatch] = field(default_factory=list)
    buffered_rows: int = 0
    buffered_bytes: int = 0
    flushed_bytes: int = 0
    nan_counts: dict[int, int] = field(default_factory=dict)

    def add(self, batch: pa.RecordBatch) -> None:
        self.buffer.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        for fid, count in count_nans(batch).items():
            self.nan_counts[fid] = self.nan_counts.get(fid, 0) + count

    def flush_row_group(self) -> None:
        if not self.buffer:
            return
        table = pa.Table.from_batches(self.buffer, schema=self.schema)
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.flushed_bytes += self.buffered_bytes
        self.buffer, self.buffered_rows, self.buffered_bytes = [], 0, 0

    def estimated_size(self) -> int:
        written = self.sink.tell()
        ratio = written / self.flushed_bytes if self.flushed_bytes else 1.0
        return written + int(self.buffered_bytes * ratio)

    def close(self) -> pq.FileMetaData:
        self.flush_row_group()
        self.writer.close()
        self.sink.close()
        return self.writer.writer.metadata  # the footer just written, without reading it back


class DataFileWriter:
    """Writes conformed Arrow data of one partition to rolling Parquet files.

    ``location_prefix`` is the table's data directory (``<table>/data``);
    files go to ``{location_prefix}/{partition path}/{file name}``. Data must
    already match ``schema_to_arrow(schema)`` (see ``cast_to_schema``).
    ``table_schema`` (default ``schema``) resolves the spec's source columns
    when the file's schema is not the table's, as for delete files.
    :meth:`close` returns one :class:`DataFile` per written file, with exact
    metrics and the file size reported by ``io``.
    """

    def __init__(
        self,
        io: FileIO,
        location_prefix: str,
        schema: Schema,
        spec: PartitionSpec,
        partition: tuple,
        *,
        target_file_size_bytes: int = DEFAULT_TARGET_FILE_SIZE,
        row_group_size: int = DEFAULT_ROW_GROUP_ROWS,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        compression: str = "zstd",
        compression_level: int | None = None,
        file_name_factory: Callable[[], str] | None = None,
        content: DataFileContent = DataFileContent.DATA,
        metrics_config: MetricsConfig = DEFAULT_METRICS,
        equality_ids: Sequence[int] | None = None,
        sort_order_id: int | None = None,
        footer_metadata: Mapping[str, str] | None = None,
        table_schema: Schema | None = None,
    ) -> None:
        _check_positive(
            target_file_size_bytes=target_file_size_bytes,
            row_group_size=row_group_size,
            row_group_bytes=row_group_bytes,
        )
        _check_content(content, equality_ids, sort_order_id)
        self._io = io
        self._schema = schema
        self._spec = spec
        self._partition = tuple(partition)
        self._directory = _partition_directory(location_prefix, table_schema or schema, spec, self._partition)
        self._arrow_schema = schema_to_arrow(schema)
        self._target = target_file_size_bytes
        self._row_group_rows = row_group_size
        self._row_group_bytes = row_group_bytes
        self._options = parquet_writer_options(compression, compression_level)
        self._next_name = file_name_factory or FileNameFactory()
        self._content = content
        self._metrics_config = metrics_config
        self._equality_ids = list(equality_ids) if equality_ids is not None else None
        self._sort_order_id = sort_order_id
        self._footer = {"iceberg.schema": json.dumps(schema.to_json()), **(footer_metadata or {})}
        self._current: _OpenFile | None = None
        self._written: list[DataFile] = []
        self._paths: list[str] = []
        self._closed = False

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema (with field ids) that written data must have."""
        return self._arrow_schema

    def write(self, data: ArrowData) -> None:
        """Append rows; a full row group is written out, a full file is closed."""
        if self._closed:
            raise ValidationError("cannot write to a closed DataFileWriter")
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        for batch in batches:
            batch = relabel(batch, self._arrow_schema)
            for start in range(0, batch.num_rows, CHECK_ROWS):
                self._append(batch.slice(start, CHECK_ROWS))

    def close(self) -> list[DataFile]:
        """Finish the open file; the DataFiles of every file written, in order."""
        if not self._closed:
            if self._current is not None:
                self._finish_file()
            self._closed = True
        return list(self._written)

    def abort(self) -> None:
        """Stop writing and delete every file this writer created."""
        self._closed = True
        current, self._current = self._current, None
        try:
            if current is not None:
                current.writer.close()
                current.sink.close()
        finally:
            self._io.delete_many(self._paths)
            self._written.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    # ------------------------------------------------------------------

    def _append(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        current = self._current or self._open_file()
        current.add(batch)
        full_rows = current.buffered_rows >= self._row_group_rows
        if full_rows or current.buffered_bytes >= self._row_group_bytes:
            current.flush_row_group()
        if current.estimated_size() >= self._target:
            # The estimate of buffered rows is rough (exact only after a flush):
            # write them out and roll only if the real size reached the target.
            current.flush_row_group()
            if current.estimated_size() >= self._target:
                self._finish_file()

    def _open_file(self) -> _OpenFile:
        path = f"{self._directory}/{self._next_name()}"
        if self._io.exists(path):
            raise ValidationError(f"refusing to overwrite existing file {path}")
        sink = self._io.open_output(path)
        self._paths.append(path)
        try:
            writer = pq.ParquetWriter(sink, self._arrow_schema, **self._options)
            writer.add_key_value_metadata(self._footer)
        except Exception:
            sink.close()
            raise
        self._current = _OpenFile(path, sink, writer, self._arrow_schema)
        return self._current

    def _finish_file(self) -> None:
        current, self._current = self._current, None
        assert current is not None
        metadata = current.close()
        metrics = collect_metrics(
            metadata,
            self._schema,
            path=current.path,
            nan_value_counts=current.nan_counts,
            config=self._metrics_config,
        )
        self._written.append(
            DataFile(
                content=self._content,
                file_path=current.path,
                file_format=FileFormat.PARQUET,
                partition=self._partition,
                record_count=metrics.record_count,
                file_size_in_bytes=self._io.size(current.path),
                column_sizes=metrics.column_sizes,
                value_counts=metrics.value_counts,
                null_value_counts=metrics.null_value_counts,
                nan_value_counts=metrics.nan_value_counts,
                lower_bounds=metrics.lower_bounds,
                upper_bounds=metrics.upper_bounds,
                split_offsets=metrics.split_offsets,
                equality_ids=self._equality_ids,
                sort_order_id=self._sort_order_id,
                spec_id=self._spec.spec_id,
            )
        )


def relabel(batch: pa.RecordBatch, arrow_schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` under ``arrow_schema`` (its field ids), if names and types match.

    A batch conformed by :func:`table.arrow_schema.cast_to_schema` already has
    them and is returned as it is."""
    if batch.schema.equals(arrow_schema, check_metadata=True):
        return batch
    if not batch.schema.equals(arrow_schema, check_metadata=False):
        raise SchemaError(
            "batch does not match the table schema (conform it with cast_to_schema):\n"
            f"expected {arrow_schema}\ngot {batch.schema}"
        )
    return pa.RecordBatch.from_arrays(batch.columns, schema=arrow_schema)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValidationError(f"{name} must be positive, got {value}")


def _check_content(content: DataFileContent, equality_ids: Sequence[int] | None, sort_order_id: int | None) -> None:
    if content == DataFileContent.EQUALITY_DELETES and not equality_ids:
        raise ValidationError("equality delete files need equality_ids")
    if content != DataFileContent.EQUALITY_DELETES and equality_ids is not None:
        raise ValidationError(f"equality_ids are only for equality delete files, not {content.name}")
    if content == DataFileContent.POSITION_DELETES and sort_order_id is not None:
        raise ValidationError("position delete files are sorted by file and position, not a sort order")


def _partition_directory(location_prefix: str, schema: Schema, spec: PartitionSpec, partition: tuple) -> str:
    base = location_prefix.rstrip("/")
    if len(partition) != len(spec.fields):
        raise ValidationError(
            f"partition spec {spec.spec_id} has {len(spec.fields)} fields, got partition {partition!r}"
        )
    if not spec.fields:
        return base
    return f"{base}/{spec.partition_path(partition, schema)}"


class Abortable(Protocol):
    """A writer that can delete what it wrote."""

    def abort(self) -> None: ...


def abort_all(writers: Iterable[Abortable]) -> None:
    """Abort every writer, even after one fails: one failed delete must not leave the others' files.

    The first failure is raised afterwards, with the others noted on it.
    """
    failures: list[Exception] = []
    for writer in writers:
        try:
            writer.abort()
        except Exception as error:  # noqa: BLE001 - raised below, after every writer was aborted
            failures.append(error)
    if failures:
        for other in failures[1:]:
            failures[0].add_note(f"aborting another writer failed too: {other}")
        raise failures[0]


def abort_after(error: BaseException, *writers: Abortable) -> None:
    """Abort ``writers`` after ``error``; a failing abort is noted on ``error`` instead of replacing it."""
    try:
        abort_all(writers)
    except Exception as cleanup:  # noqa: BLE001 - the caller re-raises ``error``, which carries this
        error.add_note(f"and deleting the files written failed: {cleanup}")
