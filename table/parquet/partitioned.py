"""The fan-out writer: rows routed to one rolling file writer per partition.

Ingest's write tasks, the compactor's rewrites and the table's own helpers
all write a stream of rows that spans partitions. :class:`PartitionedWriter`
routes each batch with :func:`table.partitioning.split_by_partition` and
keeps one writer open per partition:

* With *clustered* input (rows arrive grouped by partition, as ingest sorts
  them), :meth:`PartitionedWriter.close_except` finishes the partitions a
  batch did not touch, so memory holds one row-group buffer, not one per
  partition.
* Every partition counts the rows given to it, so :meth:`write_partition`
  can tell the caller where a row lands within its partition's output: the
  compactor's position maps are built from it.

On failure, :meth:`PartitionedWriter.abort` deletes every file written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import pyarrow as pa

from table.io import FileIO
from table.manifest import DataFile
from table.parquet.writer import (
    DEFAULT_TARGET_FILE_SIZE,
    ArrowData,
    DataFileWriter,
    FileNameFactory,
    abort_after,
    abort_all,
)
from table.partitioning import PartitionSpec, partition_key, split_by_partition
from table.schema import Schema

Partition = tuple[Any, ...]


class FileWriter(Protocol):
    """A rolling writer of one partition: data or delete files."""

    def write(self, data: ArrowData) -> None: ...

    def close(self) -> list[DataFile]: ...

    def abort(self) -> None: ...


class PartitionedWriter:
    """Writes rows of ``schema`` to one writer per partition of ``spec``.

    ``open_writer(partition)`` opens the writer of a partition; rows must
    already have the Arrow types the writers expect.
    """

    def __init__(self, schema: Schema, spec: PartitionSpec, open_writer: Callable[[Partition], FileWriter]) -> None:
        self.schema = schema
        self.spec = spec
        self._open_writer = open_writer
        self._open: dict[Any, tuple[Partition, FileWriter]] = {}
        self._every: list[FileWriter] = []
        self._rows: dict[Any, int] = {}
        self._closed: dict[Any, tuple[Partition, list[DataFile]]] = {}

    def write(self, rows: pa.RecordBatch) -> set[Any]:
        """Route ``rows`` to their partitions; the keys of the partitions touched."""
        touched = set()
        for partition, part in split_by_partition(rows, self.schema, self.spec):
            self.write_partition(partition, part)
            touched.add(self._key(partition))
        return touched

    def write_partition(self, partition: Partition, rows: ArrowData) -> int:
        """Write rows of one known partition; the ordinal of the first one in that partition's output."""
        key = self._key(partition)
        found = self._open.get(key)
        if found is None:
            found = self._open[key] = (partition, self._open_writer(partition))
            self._every.append(found[1])
        first = self._rows.get(key, 0)
        found[1].write(rows)
        self._rows[key] = first + rows.num_rows
        return first

    def close_except(self, keep: Iterable[Any]) -> None:
        """Finish every open partition whose key is not in ``keep`` (clustered input)."""
        kept = set(keep)
        for key in [k for k in self._open if k not in kept]:
            partition, writer = self._open.pop(key)
            self._closed.setdefault(key, (partition, []))[1].extend(writer.close())

    def close_by_partition(self) -> list[tuple[Partition, list[DataFile]]]:
        """Finish every partition; each partition's files, in the order its rows were written."""
        self.close_except(())
        return list(self._closed.values())

    def close(self) -> list[DataFile]:
        """Finish every partition; all files written."""
        return [f for _, files in self.close_by_partition() for f in files]

    def abort(self) -> None:
        """Stop and delete every file written, closed partitions included; the writer starts afresh.

        Every partition's writer is aborted even when one fails (:func:`abort_all`).
        """
        writers, self._every = self._every, []
        self._open.clear()
        self._closed.clear()
        self._rows.clear()
        abort_all(writers)

    def _key(self, partition: Partition) -> Any:
        return partition_key(self.spec.spec_id, partition)


def write_partitioned(
    io: FileIO,
    location: str,
    schema: Schema,
    spec: PartitionSpec,
    batches: Iterable[ArrowData],
    target_file_size_bytes: int = DEFAULT_TARGET_FILE_SIZE,
    **writer_options: Any,
) -> list[DataFile]:
    """Write conformed batches under ``<location>/data``, one rolling writer per partition.

    A convenience for tests and benchmarks; on failure every file written so
    far is deleted.
    """
    writer_options.setdefault("file_name_factory", FileNameFactory())
    writer_options["target_file_size_bytes"] = target_file_size_bytes
    data_dir = f"{location.rstrip('/')}/data"
    writer = PartitionedWriter(
        schema, spec, lambda partition: DataFileWriter(io, data_dir, schema, spec, partition, **writer_options)
    )
    try:
        for data in batches:
            for batch in data.to_batches() if isinstance(data, pa.Table) else [data]:
                writer.write(batch)
        return writer.close()
    except BaseException as error:
        abort_after(error, writer)
        raise
