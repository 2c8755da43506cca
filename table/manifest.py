"""Avro manifests and manifest lists (spec: "Manifests", "Manifest Lists").

A manifest lists the data or delete files of one partition spec with their
partition tuples and column metrics; a manifest list names the manifests of
one snapshot with summaries that let scan planning skip whole manifests.
Both are Avro files whose schemas carry Iceberg field ids (Appendix A), so
that Iceberg Java, pyiceberg and Floe read each other's files by id; the Avro
schemas and container files themselves are :mod:`table.avro`'s job.

New entries are written with null sequence numbers and inherit the
sequence number of their manifest when read (spec: "Sequence Number
Inheritance"): a manifest is written once and reused across commit retries;
only the manifest list, which assigns :data:`UNASSIGNED_SEQ` manifests the
snapshot's sequence number, is rewritten.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from typing import Any
from uuid import UUID

from table.avro import avro_name, avro_schema, open_avro, record_field_type, write_avro
from table.conversions import to_bytes, unscaled_to_decimal
from table.errors import MalformedFileError, TableError, ValidationError
from table.io import FileIO, removed_on_failure
from table.partitioning import PartitionSpec, partition_spec_from_json
from table.schema import Schema, schema_from_json
from table.types import (
    BinaryType,
    BooleanType,
    DecimalType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    UUIDType,
)

UNASSIGNED_SEQ = -1
"""Sequence number of a manifest not yet committed; the manifest list assigns it."""

FORMAT_VERSION = 2  # the default; v3 manifests add row lineage and deletion vector fields
ROW_LINEAGE_VERSION = 3
DEFAULT_CODEC = "deflate"


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------


class DataFileContent(IntEnum):
    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


class FileFormat(str, Enum):
    PARQUET = "PARQUET"
    AVRO = "AVRO"
    ORC = "ORC"
    PUFFIN = "PUFFIN"  # v3 deletion vectors


class ManifestEntryStatus(IntEnum):
    EXISTING = 0
    ADDED = 1
    DELETED = 2


class ManifestContent(IntEnum):
    DATA = 0
    DELETES = 1


@dataclass(frozen=True)
class DataFile:
    """A data or delete file with its partition tuple and column metrics.

    ``partition`` holds transform results in spec order (docs/table-api.md);
    bounds are Appendix D binary values. ``spec_id`` is not stored in the
    ``data_file`` struct: it is the manifest's spec, carried over on read.
    """

    content: DataFileContent
    file_path: str
    file_format: FileFormat
    partition: tuple[Any, ...]
    record_count: int
    file_size_in_bytes: int
    column_sizes: dict[int, int] | None = None
    value_counts: dict[int, int] | None = None
    null_value_counts: dict[int, int] | None = None
    nan_value_counts: dict[int, int] | None = None
    lower_bounds: dict[int, bytes] | None = None
    upper_bounds: dict[int, bytes] | None = None
    key_metadata: bytes | None = None
    split_offsets: list[int] | None = None
    equality_ids: list[int] | None = None
    sort_order_id: int | None = None
    spec_id: int = 0
    first_row_id: int | None = None  # v3: row id of the file's first row (null when added: inherited)
    referenced_data_file: str | None = None  # the one data file a DV (or position delete file) deletes from
    content_offset: int | None = None  # v3: where a DV blob starts in its Puffin file
    content_size_in_bytes: int | None = None  # v3: the DV blob's length

    @property
    def is_deletion_vector(self) -> bool:
        return self.content == DataFileContent.POSITION_DELETES and self.file_format == FileFormat.PUFFIN

    @property
    def location_key(self) -> str:
        """What tells this file's entry from every other in a snapshot: the path, and for a deletion
        vector, which shares its Puffin file with others, the path and the blob's offset."""
        return f"{self.file_path}#{self.content_offset}" if self.is_deletion_vector else self.file_path


@dataclass(frozen=True)
class ManifestEntry:
    """A file's status in a snapshot; None sequence numbers are inherited on read."""

    status: ManifestEntryStatus
    snapshot_id: int | None
    sequence_number: int | None
    file_sequence_number: int | None
    data_file: DataFile


@dataclass(frozen=True)
class FieldSummary:
    """Null/NaN presence and Appendix D bounds of one partition field in a manifest."""

    contains_null: bool
    contains_nan: bool | None = None
    lower_bound: bytes | None = None
    upper_bound: bytes | None = None


@dataclass(frozen=True)
class ManifestFile:
    """A manifest as tracked by a manifest list."""

    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: ManifestContent
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int
    added_files_count: int
    existing_files_count: int
    deleted_files_count: int
    added_rows_count: int
    existing_rows_count: int
    deleted_rows_count: int
    partitions: list[FieldSummary] | None = None
    key_metadata: bytes | None = None
    first_row_id: int | None = None  # v3 data manifests: assigned by the manifest list that adds them
    unassigned_rows: int | None = field(default=None, compare=False)
    """Rows of live data files without a ``first_row_id`` (they inherit one), known for manifests
    written in this process; not stored. None: estimate as added + existing rows (spec)."""


# --------------------------------------------------------------------------
# Iceberg schemas of the two files (field ids from the spec)
# --------------------------------------------------------------------------


def _opt(field_id: int, name: str, field_type: IcebergType) -> NestedField:
    return NestedField(field_id, name, field_type, required=False)


def _req(field_id: int, name: str, field_type: IcebergType) -> NestedField:
    return NestedField(field_id, name, field_type, required=True)


def _long_map(key_id: int, value_id: int) -> MapType:
    return MapType(key_id, IntegerType(), value_id, LongType())


def _bytes_map(key_id: int, value_id: int) -> MapType:
    return MapType(key_id, IntegerType(), value_id, BinaryType())


def data_file_type(partition_type: StructType, format_version: int = FORMAT_VERSION) -> StructType:
    """The ``data_file`` struct for a spec's partition type (v3 adds row lineage and DV fields)."""
    v3 = (
        (
            _opt(142, "first_row_id", LongType()),
            _opt(143, "referenced_data_file", StringType()),
            _opt(144, "content_offset", LongType()),
            _opt(145, "content_size_in_bytes", LongType()),
        )
        if format_version >= ROW_LINEAGE_VERSION
        else ()
    )
    return StructType(
        _req(134, "content", IntegerType()),
        _req(100, "file_path", StringType()),
        _req(101, "file_format", StringType()),
        _req(102, "partition", _optional_fields(partition_type)),
        _req(103, "record_count", LongType()),
        _req(104, "file_size_in_bytes", LongType()),
        _opt(108, "column_sizes", _long_map(117, 118)),
        _opt(109, "value_counts", _long_map(119, 120)),
        _opt(110, "null_value_counts", _long_map(121, 122)),
        _opt(137, "nan_value_counts", _long_map(138, 139)),
        _opt(125, "lower_bounds", _bytes_map(126, 127)),
        _opt(128, "upper_bounds", _bytes_map(129, 130)),
        _opt(131, "key_metadata", BinaryType()),
        _opt(132, "split_offsets", ListType(133, LongType())),
        _opt(135, "equality_ids", ListType(136, IntegerType())),
        _opt(140, "sort_order_id", IntegerType()),
        *v3,
    )


def manifest_entry_type(partition_type: StructType, format_version: int = FORMAT_VERSION) -> StructType:
    """The ``manifest_entry`` struct for a spec's partition type."""
    return StructType(
        _req(0, "status", IntegerType()),
        _opt(1, "snapshot_id", LongType()),
        _opt(3, "sequence_number", LongType()),
        _opt(4, "file_sequence_number", LongType()),
        _req(2, "data_file", data_file_type(partition_type, format_version)),
    )


FIELD_SUMMARY_TYPE = StructType(
    _req(509, "contains_null", BooleanType()),
    _opt(518, "contains_nan", BooleanType()),
    _opt(510, "lower_bound", BinaryType()),
    _opt(511, "upper_bound", BinaryType()),
)

MANIFEST_FILE_TYPE = StructType(
    _req(500, "manifest_path", StringType()),
    _req(501, "manifest_length", LongType()),
    _req(502, "partition_spec_id", IntegerType()),
    _req(517, "content", IntegerType()),
    _req(515, "sequence_number", LongType()),
    _req(516, "min_sequence_number", LongType()),
    _req(503, "added_snapshot_id", LongType()),
    _req(504, "added_files_count", IntegerType()),
    _req(505, "existing_files_count", IntegerType()),
    _req(506, "deleted_files_count", IntegerType()),
    _req(512, "added_rows_count", LongType()),
    _req(513, "existing_rows_count", LongType()),
    _req(514, "deleted_rows_count", LongType()),
    _opt(507, "partitions", ListType(508, FIELD_SUMMARY_TYPE)),
    _opt(519, "key_metadata", BinaryType()),
)
MANIFEST_FILE_TYPE_V3 = StructType(*MANIFEST_FILE_TYPE.fields, _opt(520, "first_row_id", LongType()))


def manifest_file_type(format_version: int) -> StructType:
    """The ``manifest_file`` struct of a manifest list (v3 adds ``first_row_id``)."""
    return MANIFEST_FILE_TYPE_V3 if format_version >= ROW_LINEAGE_VERSION else MANIFEST_FILE_TYPE


def _optional_fields(struct: StructType) -> StructType:
    """Partition values may be null whatever the spec says, as in Iceberg Java."""
    return StructType(*(replace(f, required=False) for f in struct.fields))


# --------------------------------------------------------------------------
# Python values <-> Avro data of partition fields
# --------------------------------------------------------------------------


def _partition_value_to_avro(value: Any) -> Any:
    """fastavro takes ints for date/time/timestamps but wants uuid as 16 bytes."""
    if isinstance(value, UUID):
        return value.bytes
    return value


def _partition_value_from_avro(t: IcebergType, value: Any) -> Any:
    """Decode the raw Avro value (logical types are not applied on read)."""
    if value is None:
        return None
    if isinstance(t, DecimalType) and isinstance(value, bytes):
        return unscaled_to_decimal(int.from_bytes(value, "big", signed=True), t.scale)
    if isinstance(t, UUIDType):
        return UUID(bytes=value) if isinstance(value, bytes) else UUID(value)
    return value


# --------------------------------------------------------------------------
# Records: dataclasses -> Avro data
# --------------------------------------------------------------------------


def _map_to_avro(values: dict[int, Any] | None) -> list[dict[str, Any]] | None:
    if values is None:
        return None
    return [{"key": k, "value": v} for k, v in sorted(values.items())]


def _data_file_to_avro(df: DataFile, partition: list[tuple[str, NestedField]]) -> dict[str, Any]:
    values = {name: _partition_value_to_avro(v) for (name, _), v in zip(partition, df.partition)}
    return {
        "content": int(df.content),
        "file_path": df.file_path,
        "file_format": FileFormat(df.file_format).value,
        "partition": values,
        "record_count": df.record_count,
        "file_size_in_bytes": df.file_size_in_bytes,
        "column_sizes": _map_to_avro(df.column_sizes),
        "value_counts": _map_to_avro(df.value_counts),
        "null_value_counts": _map_to_avro(df.null_value_counts),
        "nan_value_counts": _map_to_avro(df.nan_value_counts),
        "lower_bounds": _map_to_avro(df.lower_bounds),
        "upper_bounds": _map_to_avro(df.upper_bounds),
        "key_metadata": df.key_metadata,
        "split_offsets": df.split_offsets,
        "equality_ids": df.equality_ids,
        "sort_order_id": df.sort_order_id,
        "first_row_id": df.first_row_id,
        "referenced_data_file": df.referenced_data_file,
        "content_offset": df.content_offset,
        "content_size_in_bytes": df.content_size_in_bytes,
    }


def _entry_to_avro(entry: ManifestEntry, partition: list[tuple[str, NestedField]]) -> dict[str, Any]:
    return {
        "status": int(entry.status),
        "snapshot_id": entry.snapshot_id,
        "sequence_number": entry.sequence_number,
        "file_sequence_number": entry.file_sequence_number,
        "data_file": _data_file_to_avro(entry.data_file, partition),
    }


def _summary_to_avro(s: FieldSummary) -> dict[str, Any]:
    return {
        "contains_null": s.contains_null,
        "contains_nan": s.contains_nan,
        "lower_bound": s.lower_bound,
        "upper_bound": s.upper_bound,
    }


def _manifest_file_to_avro(m: ManifestFile) -> dict[str, Any]:
    return {
        "manifest_path": m.manifest_path,
        "manifest_length": m.manifest_length,
        "partition_spec_id": m.partition_spec_id,
        "content": int(m.content),
        "sequence_number": m.sequence_number,
        "min_sequence_number": m.min_sequence_number,
        "added_snapshot_id": m.added_snapshot_id,
        "added_files_count": m.added_files_count,
        "existing_files_count": m.existing_files_count,
        "deleted_files_count": m.deleted_files_count,
        "added_rows_count": m.added_rows_count,
        "existing_rows_count": m.existing_rows_count,
        "deleted_rows_count": m.deleted_rows_count,
        "partitions": None if m.partitions is None else [_summary_to_avro(s) for s in m.partitions],
        "key_metadata": m.key_metadata,
        "first_row_id": m.first_row_id,
    }


# --------------------------------------------------------------------------
# Records: Avro data -> dataclasses
# --------------------------------------------------------------------------


class _RecordReader:
    """Reads fields of one file's records, naming file and field in every error."""

    def __init__(self, path: str, v1_defaults: dict[str, Any]) -> None:
        self.path = path
        self.v1_defaults = v1_defaults

    def required(self, record: dict[str, Any], name: str, where: str) -> Any:
        value = record.get(name, self.v1_defaults.get(name))
        if value is None:
            raise MalformedFileError(self.path, f"{where}{name}", "required field is missing or null")
        return value

    def enum(self, enum_type: type[Enum], record: dict[str, Any], name: str, where: str) -> Any:
        value = self.required(record, name, where)
        try:
            return enum_type(value.upper() if isinstance(value, str) else value)
        except ValueError as e:
            raise MalformedFileError(self.path, f"{where}{name}", f"unknown value {value!r}") from e


def _map_from_avro(items: list[dict[str, Any]] | None) -> dict[int, Any] | None:
    if items is None:
        return None
    return {item["key"]: item["value"] for item in items}


def _data_file_from_avro(
    r: _RecordReader,
    rec: dict[str, Any],
    partition: list[tuple[str, NestedField]],
    spec_id: int,
) -> DataFile:
    w = "data_file."
    values = r.required(rec, "partition", w)
    return DataFile(
        content=r.enum(DataFileContent, rec, "content", w),
        file_path=r.required(rec, "file_path", w),
        file_format=r.enum(FileFormat, rec, "file_format", w),
        partition=tuple(_partition_value_from_avro(f.field_type, values.get(n)) for n, f in partition),
        record_count=r.required(rec, "record_count", w),
        file_size_in_bytes=r.required(rec, "file_size_in_bytes", w),
        column_sizes=_map_from_avro(rec.get("column_sizes")),
        value_counts=_map_from_avro(rec.get("value_counts")),
        null_value_counts=_map_from_avro(rec.get("null_value_counts")),
        nan_value_counts=_map_from_avro(rec.get("nan_value_counts")),
        lower_bounds=_map_from_avro(rec.get("lower_bounds")),
        upper_bounds=_map_from_avro(rec.get("upper_bounds")),
        key_metadata=rec.get("key_metadata"),
        split_offsets=rec.get("split_offsets"),
        equality_ids=rec.get("equality_ids"),
        sort_order_id=rec.get("sort_order_id"),
        spec_id=spec_id,
        first_row_id=rec.get("first_row_id"),
        referenced_data_file=rec.get("referenced_data_file"),
        content_offset=rec.get("content_offset"),
        content_size_in_bytes=rec.get("content_size_in_bytes"),
    )


def _entry_from_avro(
    r: _RecordReader, rec: dict[str, Any], partition: list[tuple[str, NestedField]], spec_id: int
) -> ManifestEntry:
    return ManifestEntry(
        status=r.enum(ManifestEntryStatus, rec, "status", ""),
        snapshot_id=rec.get("snapshot_id"),
        sequence_number=rec.get("sequence_number"),
        file_sequence_number=rec.get("file_sequence_number"),
        data_file=_data_file_from_avro(r, r.required(rec, "data_file", ""), partition, spec_id),
    )


def _summary_from_avro(r: _RecordReader, rec: dict[str, Any]) -> FieldSummary:
    return FieldSummary(
        contains_null=r.required(rec, "contains_null", "partitions.element."),
        contains_nan=rec.get("contains_nan"),
        lower_bound=rec.get("lower_bound"),
        upper_bound=rec.get("upper_bound"),
    )


def _manifest_file_from_avro(r: _RecordReader, rec: dict[str, Any]) -> ManifestFile:
    partitions = rec.get("partitions")
    return ManifestFile(
        manifest_path=r.required(rec, "manifest_path", ""),
        manifest_length=r.required(rec, "manifest_length", ""),
        partition_spec_id=r.required(rec, "partition_spec_id", ""),
        content=r.enum(ManifestContent, rec, "content", ""),
        sequence_number=r.required(rec, "sequence_number", ""),
        min_sequence_number=r.required(rec, "min_sequence_number", ""),
        added_snapshot_id=r.required(rec, "added_snapshot_id", ""),
        added_files_count=r.required(rec, "added_files_count", ""),
        existing_files_count=r.required(rec, "existing_files_count", ""),
        deleted_files_count=r.required(rec, "deleted_files_count", ""),
        added_rows_count=r.required(rec, "added_rows_count", ""),
        existing_rows_count=r.required(rec, "existing_rows_count", ""),
        deleted_rows_count=r.required(rec, "deleted_rows_count", ""),
        partitions=None if partitions is None else [_summary_from_avro(r, s) for s in partitions],
        key_metadata=rec.get("key_metadata"),
        first_row_id=rec.get("first_row_id"),
    )


# --------------------------------------------------------------------------
# Manifest statistics (pure)
# --------------------------------------------------------------------------


def _order_key(value: Any) -> Any:
    """Sort key putting -0.0 before +0.0, as the spec's bounds require."""
    if isinstance(value, float):
        return (value, math.copysign(1.0, value))
    return value


class _FieldSummaryBuilder:
    """Accumulates one partition field's summary over a manifest's entries."""

    def __init__(self, field: NestedField) -> None:
        self.field = field
        self.contains_null = False
        self.contains_nan = False
        self.lower: Any = None
        self.upper: Any = None

    def add(self, value: Any) -> None:
        if value is None:
            self.contains_null = True
        elif isinstance(value, float) and math.isnan(value):
            self.contains_nan = True
        else:
            key = _order_key(value)
            if self.lower is None or key < _order_key(self.lower):
                self.lower = value
            if self.upper is None or key > _order_key(self.upper):
                self.upper = value

    def build(self) -> FieldSummary:
        return FieldSummary(
            contains_null=self.contains_null,
            contains_nan=self.contains_nan,
            lower_bound=self._to_bytes(self.lower),
            upper_bound=self._to_bytes(self.upper),
        )

    def _to_bytes(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return to_bytes(self.field.field_type, value)
        except ValidationError as e:
            raise ValidationError(f"partition field {self.field.name!r}: {e}") from e


class _ManifestStats:
    """Counts, row counts, min data sequence number and partition summaries."""

    def __init__(self, partition_type: StructType) -> None:
        self.files = dict.fromkeys(ManifestEntryStatus, 0)
        self.rows = dict.fromkeys(ManifestEntryStatus, 0)
        self.min_sequence_number: int | None = None
        self.summaries = [_FieldSummaryBuilder(f) for f in partition_type.fields]
        self.unassigned_rows = 0

    def add(self, entry: ManifestEntry) -> None:
        self.files[entry.status] += 1
        self.rows[entry.status] += entry.data_file.record_count
        if takes_inherited_row_id(entry):
            self.unassigned_rows += entry.data_file.record_count
        seq = entry.sequence_number
        if (
            entry.status != ManifestEntryStatus.DELETED
            and seq is not None
            and (self.min_sequence_number is None or seq < self.min_sequence_number)
        ):
            self.min_sequence_number = seq
        for builder, value in zip(self.summaries, entry.data_file.partition):
            builder.add(value)

    def manifest_file(
        self, path: str, length: int, spec_id: int, content: ManifestContent, snapshot_id: int
    ) -> ManifestFile:
        s = ManifestEntryStatus
        min_seq = self.min_sequence_number
        return ManifestFile(
            manifest_path=path,
            manifest_length=length,
            partition_spec_id=spec_id,
            content=content,
            sequence_number=UNASSIGNED_SEQ,
            min_sequence_number=UNASSIGNED_SEQ if min_seq is None else min_seq,
            added_snapshot_id=snapshot_id,
            added_files_count=self.files[s.ADDED],
            existing_files_count=self.files[s.EXISTING],
            deleted_files_count=self.files[s.DELETED],
            added_rows_count=self.rows[s.ADDED],
            existing_rows_count=self.rows[s.EXISTING],
            deleted_rows_count=self.rows[s.DELETED],
            partitions=[b.build() for b in self.summaries],
            unassigned_rows=self.unassigned_rows if content == ManifestContent.DATA else None,
        )


def takes_inherited_row_id(entry: ManifestEntry) -> bool:
    """Whether a data file gets its ``first_row_id`` from its manifest's (spec "First Row ID
    Inheritance"): a live data file that has none. Deleted entries are skipped, as in Java."""
    return (
        entry.data_file.content == DataFileContent.DATA
        and entry.status != ManifestEntryStatus.DELETED
        and entry.data_file.first_row_id is None
    )


def assign_first_row_ids(manifests: Iterable[ManifestFile], first_row_id: int) -> tuple[list[ManifestFile], int]:
    """Give each data manifest without a ``first_row_id`` the next range of row ids (spec "First
    Row ID Assignment"); the manifests and the ids assigned (the snapshot's ``added-rows``).

    A range is exactly the manifest's rows without ids when this process wrote it, else the spec's
    estimate, its added plus existing rows (a manifest of an upgraded table).
    """
    cursor = first_row_id
    assigned = []
    for m in manifests:
        if m.content != ManifestContent.DATA or m.first_row_id is not None:
            assigned.append(m)
            continue
        assigned.append(replace(m, first_row_id=cursor))
        cursor += m.unassigned_rows if m.unassigned_rows is not None else m.added_rows_count + m.existing_rows_count
    return assigned, cursor - first_row_id


class RowIdInheritance:
    """Fills in data files' ``first_row_id`` while a manifest's entries are read in order."""

    def __init__(self, manifest: ManifestFile) -> None:
        self._next = manifest.first_row_id if manifest.content == ManifestContent.DATA else None

    def apply(self, entry: ManifestEntry) -> ManifestEntry:
        if self._next is None or not takes_inherited_row_id(entry):
            return entry
        first = self._next
        self._next += entry.data_file.record_count
        return replace(entry, data_file=replace(entry.data_file, first_row_id=first))


# --------------------------------------------------------------------------
# Validation of entries before writing (pure)
# --------------------------------------------------------------------------

_CONTENTS = {
    ManifestContent.DATA: {DataFileContent.DATA},
    ManifestContent.DELETES: {DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES},
}


def _check_entry(
    entry: ManifestEntry,
    content: ManifestContent,
    spec_id: int,
    n_fields: int,
    snapshot_id: int,
    format_version: int = FORMAT_VERSION,
) -> None:
    """Reject entries that would make the manifest wrong for every reader."""
    df = entry.data_file
    where = f"entry for {df.file_path}"
    _check_version_fields(entry, format_version, snapshot_id, where)
    if DataFileContent(df.content) not in _CONTENTS[content]:
        kind = DataFileContent(df.content).name
        raise ValidationError(f"{where}: a {content.name} manifest cannot hold {kind} files")
    if df.spec_id != spec_id:
        raise ValidationError(f"{where}: file has spec id {df.spec_id}, manifest has {spec_id}")
    if len(df.partition) != n_fields:
        raise ValidationError(f"{where}: partition has {len(df.partition)} values, spec has {n_fields} fields")
    if entry.status != ManifestEntryStatus.ADDED:
        if entry.sequence_number is None or entry.file_sequence_number is None:
            raise ValidationError(f"{where}: {entry.status.name} entries must carry both sequence numbers")
    elif entry.sequence_number is None and entry.snapshot_id not in (None, snapshot_id):
        raise ValidationError(f"{where}: unassigned sequence number for a file added by snapshot {entry.snapshot_id}")


def _check_version_fields(entry: ManifestEntry, format_version: int, snapshot_id: int, where: str) -> None:
    """The fields a format version allows (spec Appendix E, "Version 3")."""
    df = entry.data_file
    if format_version < ROW_LINEAGE_VERSION:
        extra = [n for n in ("first_row_id", "content_offset", "content_size_in_bytes") if getattr(df, n) is not None]
        if extra or df.file_format == FileFormat.PUFFIN:
            raise ValidationError(f"{where}: {extra or 'a Puffin deletion vector'} needs format-version 3")
        return
    if df.content != DataFileContent.DATA and df.first_row_id is not None:
        raise ValidationError(f"{where}: a delete file's first_row_id must be null")
    new_here = entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot_id
    if new_here and df.content == DataFileContent.POSITION_DELETES and not df.is_deletion_vector:
        raise ValidationError(f"{where}: a v3 table takes no new position delete files; write a deletion vector")
    if df.is_deletion_vector and None in (df.referenced_data_file, df.content_offset, df.content_size_in_bytes):
        raise ValidationError(
            f"{where}: a deletion vector needs referenced_data_file, content_offset and content_size_in_bytes"
        )


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def _manifest_metadata(
    schema: Schema, spec: PartitionSpec, content: ManifestContent, format_version: int = FORMAT_VERSION
) -> dict[str, str]:
    return {
        "schema": json.dumps(schema.to_json()),
        "schema-id": str(schema.schema_id),
        "partition-spec": json.dumps(spec.to_json()["fields"]),
        "partition-spec-id": str(spec.spec_id),
        "format-version": str(format_version),
        "content": "data" if content == ManifestContent.DATA else "deletes",
    }


def write_manifest(
    io: FileIO,
    path: str,
    schema: Schema,
    spec: PartitionSpec,
    snapshot_id: int,
    entries: Iterable[ManifestEntry],
    content: ManifestContent = ManifestContent.DATA,
    codec: str = DEFAULT_CODEC,
    format_version: int = FORMAT_VERSION,
) -> ManifestFile:
    """Write ``entries`` (streamed) as a manifest of ``format_version`` and describe it for a manifest list.

    ADDED entries without a snapshot id are written with ``snapshot_id``. The
    result has :data:`UNASSIGNED_SEQ` as sequence number (and as minimum
    sequence number when no entry has one): :func:`write_manifest_list`
    assigns the snapshot's.
    """
    content = ManifestContent(content)
    partition_type = spec.partition_type(schema)
    entry_schema = avro_schema(manifest_entry_type(partition_type, format_version), "manifest_entry")
    partition = [(avro_name(f.name), f) for f in partition_type.fields]
    stats = _ManifestStats(partition_type)

    def records() -> Iterator[dict[str, Any]]:
        for entry in entries:
            entry = _with_snapshot_id(entry, snapshot_id)
            _check_entry(entry, content, spec.spec_id, len(partition), snapshot_id, format_version)
            stats.add(entry)
            yield _entry_to_avro(entry, partition)

    metadata = _manifest_metadata(schema, spec, content, format_version)
    with removed_on_failure(io, path):
        length = write_avro(io, path, entry_schema, records(), metadata, codec)
        return stats.manifest_file(path, length, spec.spec_id, content, snapshot_id)


def _with_snapshot_id(entry: ManifestEntry, snapshot_id: int) -> ManifestEntry:
    """An ADDED entry with a null snapshot id gets the writer's, as Java writes it.

    Inheritance would give the same id on read, but pyiceberg 0.10 mis-reads a
    null ``snapshot_id`` (its setter overwrites the entry's status).
    """
    if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id is None:
        return replace(entry, snapshot_id=snapshot_id)
    return entry


def write_manifest_list(
    io: FileIO,
    path: str,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    manifests: Iterable[ManifestFile],
    codec: str = DEFAULT_CODEC,
    *,
    first_row_id: int | None = None,
    format_version: int = FORMAT_VERSION,
) -> int:
    """Write a manifest list, giving new manifests the snapshot's sequence number and, in v3,
    row ids from ``first_row_id`` (the snapshot's); the row ids assigned (``added-rows``, 0 in v2)."""
    v3 = format_version >= ROW_LINEAGE_VERSION
    if v3 != (first_row_id is not None):
        raise ValidationError(
            f"manifest list {path}: first-row-id is {first_row_id}, but format-version "
            f"{format_version} needs it {'set' if v3 else 'unset'} (row lineage is v3's)"
        )
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_snapshot_id is None else str(parent_snapshot_id),
        "sequence-number": str(sequence_number),
        "format-version": str(format_version),
    }
    manifests = [assign_sequence_number(m, snapshot_id, sequence_number) for m in manifests]
    added_rows = 0
    if first_row_id is not None:
        metadata["first-row-id"] = str(first_row_id)
        manifests, added_rows = assign_first_row_ids(manifests, first_row_id)
    records = (_manifest_file_to_avro(m) for m in manifests)
    with removed_on_failure(io, path):
        write_avro(io, path, avro_schema(manifest_file_type(format_version), "manifest_file"), records, metadata, codec)
    return added_rows


def assign_sequence_number(manifest: ManifestFile, snapshot_id: int, sequence_number: int) -> ManifestFile:
    """Replace :data:`UNASSIGNED_SEQ` with the committing snapshot's sequence number.

    Only the snapshot that wrote a manifest may assign it a number, as in
    Iceberg Java's ManifestListWriter; anything else is a commit bug.
    """
    seq, min_seq = manifest.sequence_number, manifest.min_sequence_number
    if UNASSIGNED_SEQ not in (seq, min_seq):
        return manifest
    if manifest.added_snapshot_id != snapshot_id:
        raise ValidationError(
            f"manifest {manifest.manifest_path} has an unassigned sequence number but was "
            f"added by snapshot {manifest.added_snapshot_id}, not {snapshot_id}"
        )
    return replace(
        manifest,
        sequence_number=sequence_number if seq == UNASSIGNED_SEQ else seq,
        min_sequence_number=sequence_number if min_seq == UNASSIGNED_SEQ else min_seq,
    )


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------


def read_manifest_list(io: FileIO, path: str) -> list[ManifestFile]:
    """The manifests of a snapshot, in the order the manifest list stores them."""
    with open_avro(io, path) as avro:
        r = _RecordReader(path, _v1_defaults(avro.metadata, _V1_MANIFEST_LIST_DEFAULTS))
        return [_manifest_file_from_avro(r, rec) for rec in avro.records]


def read_manifest_entries(
    io: FileIO, manifest: ManifestFile, partition_type: StructType | None = None
) -> Iterator[ManifestEntry]:
    """Stream a manifest's entries with inherited snapshot ids and sequence numbers.

    ``partition_type`` defaults to the one described by the manifest's own
    ``schema`` and ``partition-spec`` metadata, so files of any writer read.
    """
    path = manifest.manifest_path
    with open_avro(io, path) as avro:
        r = _RecordReader(path, _v1_defaults(avro.metadata, _V1_MANIFEST_DEFAULTS))
        if partition_type is None:
            partition_type = _partition_type_of(path, avro.metadata)
        partition = _partition_fields(path, avro.schema, partition_type)
        row_ids = RowIdInheritance(manifest)
        for rec in avro.records:
            entry = _entry_from_avro(r, rec, partition, manifest.partition_spec_id)
            yield row_ids.apply(inherit(entry, manifest))


def inherit(entry: ManifestEntry, manifest: ManifestFile) -> ManifestEntry:
    """Fill null snapshot id and sequence numbers from the manifest (spec rules).

    Sequence numbers are inherited by ADDED entries only (and by every entry
    of a v1 manifest, whose sequence number is 0). A manifest that is not yet
    committed (:data:`UNASSIGNED_SEQ`) has nothing to give, so nulls stay.
    """
    seq = manifest.sequence_number
    inherits = entry.status == ManifestEntryStatus.ADDED or seq == 0
    if not inherits and (entry.sequence_number is None or entry.file_sequence_number is None):
        field = "sequence_number" if entry.sequence_number is None else "file_sequence_number"
        raise MalformedFileError(manifest.manifest_path, field, f"must be set for {entry.status.name} entries")
    can_fill = inherits and seq != UNASSIGNED_SEQ
    return replace(
        entry,
        snapshot_id=manifest.added_snapshot_id if entry.snapshot_id is None else entry.snapshot_id,
        sequence_number=seq if can_fill and entry.sequence_number is None else entry.sequence_number,
        file_sequence_number=(seq if can_fill and entry.file_sequence_number is None else entry.file_sequence_number),
    )


_V1_MANIFEST_DEFAULTS = {"content": int(DataFileContent.DATA)}
_V1_MANIFEST_LIST_DEFAULTS = {
    "content": int(ManifestContent.DATA),
    "sequence_number": 0,
    "min_sequence_number": 0,
}


def _v1_defaults(metadata: dict[str, str], defaults: dict[str, Any]) -> dict[str, Any]:
    """v1 files lack the v2 fields; the spec gives them these values."""
    return defaults if metadata.get("format-version", "1") == "1" else {}


def _partition_fields(path: str, entry: dict[str, Any], partition_type: StructType) -> list[tuple[str, NestedField]]:
    """Pairs (Avro name, partition field) found by field id in the file's schema."""
    try:
        avro_partition = record_field_type(record_field_type(entry, "data_file"), "partition")
        by_id = {f["field-id"]: f["name"] for f in avro_partition["fields"] if "field-id" in f}
    except (KeyError, TypeError, ValueError, StopIteration) as e:
        raise MalformedFileError(path, "data_file.partition", f"unexpected Avro schema: {e!r}") from e
    for f in partition_type.fields:
        if f.field_id not in by_id:
            field = f"data_file.partition.{f.name}"
            raise MalformedFileError(path, field, f"no Avro field has field-id {f.field_id}")
    return [(by_id[f.field_id], f) for f in partition_type.fields]


def _partition_type_of(path: str, metadata: dict[str, str]) -> StructType:
    """The partition type recorded in a manifest's key-value metadata."""
    for key in ("schema", "partition-spec"):
        if key not in metadata:
            raise MalformedFileError(path, key, "missing from the key-value metadata")
    try:
        schema = schema_from_json(json.loads(metadata["schema"]))
        fields = json.loads(metadata["partition-spec"])
        spec = partition_spec_from_json({"spec-id": 0, "fields": fields})
        return spec.partition_type(schema)
    except (ValueError, TableError) as e:
        raise MalformedFileError(path, "partition-spec", f"cannot derive the partition type: {e}") from e
