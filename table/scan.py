"""Scan planning (spec: "Scan Planning", "Snapshot Reference").

A scan picks a snapshot, prunes its manifests and files with the row filter
(partition summaries, partition tuples, column metrics) and pairs every data
file that may hold matching rows with the delete files that apply to it
(:class:`table.deletes.index.DeleteFileIndex` decides which). Planning is
pure logic over manifest entries (:func:`plan_tasks`); only
:class:`TableScan` reads manifests, and :mod:`table.reader` reads the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa

from table.arrow_schema import schema_to_arrow
from table.deletes.index import DeleteFileIndex
from table.errors import NotFoundError, ValidationError
from table.evaluators import (
    manifest_might_match,
    metrics_might_match,
    partition_might_match,
    project_to_partition,
)
from table.expressions import ALWAYS_TRUE, BooleanExpression, bind
from table.io import FileIO
from table.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_entries,
    read_manifest_list,
)
from table.metadata import TAG, Snapshot, TableMetadata
from table.partitioning import PartitionSpec
from table.reader import read_tasks
from table.schema import Schema
from table.tasks import FileScanTask

# --------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------


class FilePruner:
    """Decides, per partition spec, which manifests and files a bound row
    filter may need: partition summaries, partition tuples, then metrics."""

    def __init__(self, row_filter: BooleanExpression, schema: Schema, specs: Mapping[int, PartitionSpec]) -> None:
        self._filter = row_filter
        self._schema = schema
        self._specs = specs
        self._projections: dict[int, BooleanExpression] = {}

    def _projection(self, spec_id: int) -> BooleanExpression:
        if spec_id not in self._projections:
            spec = self._specs.get(spec_id)
            if spec is None:
                raise NotFoundError(f"no partition spec {spec_id} in the table metadata")
            self._projections[spec_id] = project_to_partition(self._filter, spec, self._schema)
        return self._projections[spec_id]

    def manifest_might_match(self, manifest: ManifestFile) -> bool:
        """Whether the manifest has live files in partitions the filter may match."""
        if manifest.added_files_count == 0 and manifest.existing_files_count == 0:
            return False
        return manifest_might_match(self._projection(manifest.partition_spec_id), manifest.partitions)

    def file_might_match(self, content_file: DataFile) -> bool:
        """Whether a data or delete file may hold (or delete) matching rows."""
        projected = self._projection(content_file.spec_id)
        return partition_might_match(projected, content_file.partition) and metrics_might_match(
            self._filter, content_file
        )


def _live(entries: Iterable[ManifestEntry]) -> Iterator[tuple[int, DataFile]]:
    """(data sequence number, file) of every entry not marked DELETED."""
    for entry in entries:
        if entry.status == ManifestEntryStatus.DELETED:
            continue
        if entry.sequence_number is None:
            raise ValidationError(f"{entry.data_file.file_path}: manifest entry has no data sequence number")
        yield entry.sequence_number, entry.data_file


def plan_tasks(
    data_entries: Iterable[ManifestEntry],
    delete_entries: Iterable[ManifestEntry],
    schema: Schema,
    specs: Mapping[int, PartitionSpec],
    row_filter: BooleanExpression = ALWAYS_TRUE,
    case_sensitive: bool = True,
) -> Iterator[FileScanTask]:
    """Scan tasks for the live data entries that may match ``row_filter``,
    each with the live delete files that apply to it."""
    bound = bind(row_filter, schema, case_sensitive)
    pruner = FilePruner(bound, schema, specs)
    deletes = ((seq, f) for seq, f in _live(delete_entries) if pruner.file_might_match(f))
    index = DeleteFileIndex(deletes, specs, schema)
    for seq, data_file in _live(data_entries):
        if data_file.content != DataFileContent.DATA:
            raise ValidationError(f"{data_file.file_path} is a delete file listed in a data manifest")
        if pruner.file_might_match(data_file):
            yield FileScanTask(data_file, index.for_data_file(seq, data_file), seq, bound)


# --------------------------------------------------------------------------
# The scan
# --------------------------------------------------------------------------


class TableScan:
    """A read of one snapshot of a table: which snapshot, columns and rows.

    The snapshot is the current one, or the one given by id, by branch or
    tag name (``ref``), or current at a time (``as_of_timestamp_ms``); at
    most one of these may be given. A scan of a snapshot by id, time or tag
    reads with the schema of that snapshot; a branch scan with the current
    schema (as Iceberg Java does).
    """

    def __init__(
        self,
        io: FileIO,
        metadata: TableMetadata,
        row_filter: BooleanExpression = ALWAYS_TRUE,
        selected_fields: Sequence[str] = ("*",),
        snapshot_id: int | None = None,
        ref: str | None = None,
        as_of_timestamp_ms: int | None = None,
        case_sensitive: bool = True,
    ) -> None:
        selectors = {"snapshot_id": snapshot_id, "ref": ref, "as_of_timestamp_ms": as_of_timestamp_ms}
        chosen = [name for name, value in selectors.items() if value is not None]
        if len(chosen) > 1:
            raise ValidationError(f"give at most one of snapshot_id, ref and as_of_timestamp_ms, got {chosen}")
        if isinstance(selected_fields, str):
            raise ValidationError(f"selected_fields must be a sequence of names, got the string {selected_fields!r}")
        self.io = io
        self.metadata = metadata
        self.row_filter = row_filter
        self.selected_fields = tuple(selected_fields)
        self.snapshot_id = snapshot_id
        self.ref = ref
        self.as_of_timestamp_ms = as_of_timestamp_ms
        self.case_sensitive = case_sensitive

    def snapshot(self) -> Snapshot | None:
        """The snapshot to read; None for a table that has none yet."""
        md = self.metadata
        if self.snapshot_id is not None:
            return md.snapshot_by_id(self.snapshot_id)
        if self.ref is not None:
            snapshot = md.snapshot_for_ref(self.ref)
            if snapshot is None:
                raise NotFoundError(f"table {md.location} has no branch or tag {self.ref!r}")
            return snapshot
        if self.as_of_timestamp_ms is not None:
            return md.snapshot_as_of(self.as_of_timestamp_ms)
        return md.current_snapshot()

    def schema(self) -> Schema:
        """The schema rows are read with (see the class docstring)."""
        snapshot = self.snapshot()
        if snapshot is not None and snapshot.schema_id is not None and self._is_time_travel():
            return self.metadata.schema_by_id(snapshot.schema_id)
        return self.metadata.schema()

    def _is_time_travel(self) -> bool:
        if self.snapshot_id is not None or self.as_of_timestamp_ms is not None:
            return True
        ref = self.metadata.refs.get(self.ref) if self.ref is not None else None
        return ref is not None and ref.type == TAG

    def projected_schema(self) -> Schema:
        """The selected columns of :meth:`schema`, in schema order."""
        schema = self.schema()
        if "*" in self.selected_fields:
            return schema
        return schema.select(*self.selected_fields, case_sensitive=self.case_sensitive)

    def bound_filter(self) -> BooleanExpression:
        return bind(self.row_filter, self.schema(), self.case_sensitive)

    def plan_files(self) -> Iterator[FileScanTask]:
        """A task per data file that may hold matching rows, with its deletes."""
        snapshot = self.snapshot()
        if snapshot is None:
            return iter(())
        schema, bound = self.schema(), self.bound_filter()
        specs = {spec.spec_id: spec for spec in self.metadata.partition_specs}
        pruner = FilePruner(bound, schema, specs)
        listed = read_manifest_list(self.io, snapshot.manifest_list)
        manifests = [m for m in listed if pruner.manifest_might_match(m)]
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
        return plan_tasks(self._entries(data), self._entries(deletes), schema, specs, bound)

    def _entries(self, manifests: list[ManifestFile]) -> Iterator[ManifestEntry]:
        for manifest in manifests:
            yield from read_manifest_entries(self.io, manifest)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The matching rows, merged with their deletes, batch by batch."""
        return read_tasks(
            self.io,
            self.plan_files(),
            self.projected_schema(),
            self.bound_filter(),
            table_schema=self.schema(),
        )

    def to_arrow(self) -> pa.Table:
        """The matching rows, merged with their deletes, as one Arrow table."""
        return pa.Table.from_batches(list(self.to_batches()), schema=schema_to_arrow(self.projected_schema()))
