"""Scan planning (spec: "Scan Planning", "Snapshot Reference").

A scan picks a snapshot, prunes its manifests and files with the row filter
(partition summaries, partition tuples, column metrics) and pairs every data
file that may hold matching rows with the delete files that apply to it.

Which deletes apply is decided by sequence numbers and partitions alone:

* a position delete applies to data files of the same spec and partition with
  a data sequence number *less than or equal to* its own (a commit may delete
  rows it adds);
* an equality delete applies to data files of the same spec and partition, or
  of any partition when its spec is unpartitioned (a global delete), with a
  data sequence number *strictly less than* its own.

:class:`DeleteFileIndex` keeps the deletes of each scope sorted by sequence
number so that matching a data file costs a dictionary lookup and a binary
search, not a pass over every delete. Planning is pure logic over manifest
entries (:func:`plan_tasks`); only :class:`TableScan` reads manifests.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa

from table.arrow_schema import schema_to_arrow
from table.errors import NotFoundError, SchemaError, ValidationError
from table.evaluators import (
    decode_bound,
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
from table.schema import DELETE_FILE_PATH_ID, DELETE_FILE_POS_ID, Schema
from table.types import NestedField, PrimitiveType, StringType

POSITION_DELETE_FILE_PATH_ID = DELETE_FILE_PATH_ID
POSITION_DELETE_POS_ID = DELETE_FILE_POS_ID


@dataclass(frozen=True)
class FileScanTask:
    """One data file to read, the delete files to merge into it, and the
    filter still to apply to its rows (``residual``, bound to the scan schema)."""

    data_file: DataFile
    delete_files: list[DataFile] = field(default_factory=list)
    data_sequence_number: int = 0
    residual: BooleanExpression = ALWAYS_TRUE

    @property
    def position_deletes(self) -> list[DataFile]:
        return [f for f in self.delete_files if f.content == DataFileContent.POSITION_DELETES]

    @property
    def equality_deletes(self) -> list[DataFile]:
        return [f for f in self.delete_files if f.content == DataFileContent.EQUALITY_DELETES]


# --------------------------------------------------------------------------
# Which deletes apply to which data file
# --------------------------------------------------------------------------


class _BySequence:
    """Delete files of one scope, sorted by data sequence number."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, DataFile]] = []
        self._seqs: list[int] = []
        self._files: list[DataFile] = []

    def add(self, sequence_number: int, delete_file: DataFile) -> None:
        self._pending.append((sequence_number, delete_file))

    def freeze(self) -> None:
        self._pending.sort(key=lambda item: item[0])
        self._seqs = [seq for seq, _ in self._pending]
        self._files = [f for _, f in self._pending]

    def newer_than(self, sequence_number: int, inclusive: bool) -> list[DataFile]:
        """Files whose sequence number is > (or >=, when ``inclusive``) ``sequence_number``."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        return self._files[find(self._seqs, sequence_number) :]


_NAN_KEY = object()


def _partition_key(spec_id: int, partition: Sequence[Any]) -> tuple[Any, ...]:
    """A dictionary key for (spec, partition) in which NaN equals NaN."""
    values = tuple(_NAN_KEY if isinstance(v, float) and math.isnan(v) else v for v in partition)
    return (spec_id, values)


class DeleteFileIndex:
    """The live delete files of a snapshot, indexed for matching data files.

    Equality deletes are also checked against the data file's column metrics:
    when the key ranges of the data file and of the delete file cannot
    overlap, the delete is not returned (Iceberg Java does the same).
    """

    def __init__(
        self,
        deletes: Iterable[tuple[int, DataFile]],
        specs: Mapping[int, PartitionSpec],
        schema: Schema,
    ) -> None:
        self._schema = schema
        self._key_stats = KeyStatsCache()
        self._global_equality = _BySequence()
        self._equality: dict[tuple[Any, ...], _BySequence] = {}
        self._position: dict[tuple[Any, ...], _BySequence] = {}
        self._position_by_path: dict[str, _BySequence] = {}
        for sequence_number, delete_file in deletes:
            self._add(sequence_number, delete_file, specs)
        for scope in self._scopes():
            scope.freeze()

    def _scopes(self) -> Iterator[_BySequence]:
        yield self._global_equality
        for scopes in (self._equality, self._position, self._position_by_path):
            yield from scopes.values()

    def _add(self, sequence_number: int, delete_file: DataFile, specs: Mapping[int, PartitionSpec]) -> None:
        spec = specs.get(delete_file.spec_id)
        if spec is None:
            raise NotFoundError(
                f"delete file {delete_file.file_path}: no partition spec {delete_file.spec_id}"
            )
        key = _partition_key(delete_file.spec_id, delete_file.partition)
        if delete_file.content == DataFileContent.POSITION_DELETES:
            path = referenced_data_file(delete_file)
            if path is None:
                self._position.setdefault(key, _BySequence()).add(sequence_number, delete_file)
            else:
                self._position_by_path.setdefault(path, _BySequence()).add(sequence_number, delete_file)
        elif delete_file.content == DataFileContent.EQUALITY_DELETES:
            _check_equality_ids(delete_file)
            if spec.is_unpartitioned:
                self._global_equality.add(sequence_number, delete_file)
            else:
                self._equality.setdefault(key, _BySequence()).add(sequence_number, delete_file)
        else:
            raise ValidationError(f"{delete_file.file_path} is a data file, not a delete file")

    def for_data_file(self, sequence_number: int, data_file: DataFile) -> list[DataFile]:
        """The delete files to apply to ``data_file`` (data sequence number given)."""
        key = _partition_key(data_file.spec_id, data_file.partition)
        equality = self._global_equality.newer_than(sequence_number, inclusive=False)
        if key in self._equality:
            equality = equality + self._equality[key].newer_than(sequence_number, inclusive=False)
        position = []
        if key in self._position:
            scoped = self._position[key].newer_than(sequence_number, inclusive=True)
            position = [d for d in scoped if position_deletes_may_apply(d, data_file.file_path)]
        if data_file.file_path in self._position_by_path:
            scoped = self._position_by_path[data_file.file_path].newer_than(sequence_number, inclusive=True)
            position = position + [d for d in scoped if _partition_key(d.spec_id, d.partition) == key]
        relevant = [d for d in equality if equality_deletes_may_apply(data_file, d, self._schema, self._key_stats)]
        return position + relevant


def _check_equality_ids(delete_file: DataFile) -> None:
    if not delete_file.equality_ids:
        raise ValidationError(f"equality delete file {delete_file.file_path} has no equality_ids")


def referenced_data_file(delete_file: DataFile) -> Optional[str]:
    """The one data file a position delete file refers to, when its ``file_path``
    bounds are equal; None when it may refer to several."""
    lower = (delete_file.lower_bounds or {}).get(POSITION_DELETE_FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(POSITION_DELETE_FILE_PATH_ID)
    if lower is None or lower != upper:
        return None
    return decode_bound(StringType(), lower, delete_file.file_path, POSITION_DELETE_FILE_PATH_ID)


def position_deletes_may_apply(delete_file: DataFile, data_path: str) -> bool:
    """False when the delete file's ``file_path`` bounds exclude ``data_path``."""
    fid = POSITION_DELETE_FILE_PATH_ID
    lower = decode_bound(StringType(), (delete_file.lower_bounds or {}).get(fid), delete_file.file_path, fid)
    upper = decode_bound(StringType(), (delete_file.upper_bounds or {}).get(fid), delete_file.file_path, fid)
    return (lower is None or lower <= data_path) and (upper is None or data_path <= upper)


class KeyStatsCache:
    """Decoded key-column stats per (file, field id), so that matching N data
    files against M equality delete files decodes N + M bounds, not N x M."""

    def __init__(self) -> None:
        self._stats: dict[tuple[str, int], _KeyStats] = {}

    def get(self, key: NestedField, f: DataFile) -> _KeyStats:
        slot = (f.file_path, key.field_id)
        stats = self._stats.get(slot)
        if stats is None:
            stats = self._stats[slot] = _KeyStats(key, f)
        return stats


def equality_deletes_may_apply(
    data_file: DataFile, delete_file: DataFile, schema: Schema, stats: Optional[KeyStatsCache] = None
) -> bool:
    """False when metrics prove that no row of ``data_file`` has a key that
    ``delete_file`` deletes: for some equality column, null presence or value
    ranges do not overlap. Columns the schema no longer has are not checked."""
    stats = stats or KeyStatsCache()
    for field_id in delete_file.equality_ids or ():
        key_field = _primitive_field(schema, field_id)
        if key_field is not None and not _key_may_overlap(stats.get(key_field, data_file), stats.get(key_field, delete_file)):
            return False
    return True


def _primitive_field(schema: Schema, field_id: int) -> Optional[NestedField]:
    try:
        found = schema.find_field(field_id)
    except SchemaError:
        return None
    return found if isinstance(found.field_type, PrimitiveType) else None


def _key_may_overlap(data: _KeyStats, deletes: _KeyStats) -> bool:
    if data.may_have_null() and deletes.may_have_null():
        return True  # a null key is deleted and may occur
    if (data.all_null() and deletes.no_null()) or (deletes.all_null() and data.no_null()):
        return False  # one side has only nulls, the other none
    if None in (data.lower, data.upper, deletes.lower, deletes.upper):
        return True
    return data.lower <= deletes.upper and deletes.lower <= data.upper


class _KeyStats:
    """Null counts and bounds of one equality column in one file."""

    def __init__(self, key: NestedField, f: DataFile) -> None:
        fid = key.field_id
        self.required = key.required
        self.nulls = (f.null_value_counts or {}).get(fid)
        self.values = (f.value_counts or {}).get(fid)
        t = key.field_type
        assert isinstance(t, PrimitiveType)
        self.lower = decode_bound(t, (f.lower_bounds or {}).get(fid), f.file_path, fid)
        self.upper = decode_bound(t, (f.upper_bounds or {}).get(fid), f.file_path, fid)

    def may_have_null(self) -> bool:
        return not self.required and (self.nulls is None or self.nulls > 0)

    def no_null(self) -> bool:
        return self.required or self.nulls == 0

    def all_null(self) -> bool:
        return not self.required and self.nulls is not None and self.nulls == self.values


# --------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------


class FilePruner:
    """Decides, per partition spec, which manifests and files a bound row
    filter may need: partition summaries, partition tuples, then metrics."""

    def __init__(
        self, row_filter: BooleanExpression, schema: Schema, specs: Mapping[int, PartitionSpec]
    ) -> None:
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
        snapshot_id: Optional[int] = None,
        ref: Optional[str] = None,
        as_of_timestamp_ms: Optional[int] = None,
        case_sensitive: bool = True,
    ) -> None:
        selectors = {"snapshot_id": snapshot_id, "ref": ref, "as_of_timestamp_ms": as_of_timestamp_ms}
        chosen = [name for name, value in selectors.items() if value is not None]
        if len(chosen) > 1:
            raise ValidationError(
                f"give at most one of snapshot_id, ref and as_of_timestamp_ms, got {chosen}"
            )
        if isinstance(selected_fields, str):
            raise ValidationError(
                f"selected_fields must be a sequence of names, got the string {selected_fields!r}"
            )
        self.io = io
        self.metadata = metadata
        self.row_filter = row_filter
        self.selected_fields = tuple(selected_fields)
        self.snapshot_id = snapshot_id
        self.ref = ref
        self.as_of_timestamp_ms = as_of_timestamp_ms
        self.case_sensitive = case_sensitive

    def snapshot(self) -> Optional[Snapshot]:
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
        from table.reader import read_tasks  # the reader builds on this module

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
