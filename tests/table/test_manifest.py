"""Tests of table/manifest.py: Avro layout, round trips, inheritance, pyiceberg oracle."""

from __future__ import annotations

import json
import math
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from table.conversions import from_bytes, to_bytes
from table.errors import MalformedFileError, ValidationError
from table.io import FileIO, MissingFileError
from table.manifest import (
    UNASSIGNED_SEQ,
    DataFile,
    DataFileContent,
    FieldSummary,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _ManifestStats,  # the pure accumulator behind write_manifest
    inherit,
    read_manifest_entries,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from table.partitioning import PartitionField, PartitionSpec
from table.schema import Schema
from table.transforms import parse_transform
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

# pyiceberg (the oracle) imports emit deprecation warnings of its own dependencies.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SNAPSHOT_ID = 8_000_000_000_000_000_001
ADDED = ManifestEntryStatus.ADDED
EXISTING = ManifestEntryStatus.EXISTING
DELETED = ManifestEntryStatus.DELETED


def make_spec(spec_id: int, fields: list[tuple[int, int, str, str]]) -> PartitionSpec:
    """A spec from (source id, field id, name, transform) tuples."""
    return PartitionSpec(spec_id, tuple(PartitionField(s, f, parse_transform(t), n) for s, f, n, t in fields))


# A schema with one column per identity-partitionable type; source id i+1.
COLUMN_TYPES: list[IcebergType] = [
    BooleanType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    DecimalType(9, 2),
    DecimalType(38, 10),
    DateType(),
    TimeType(),
    TimestampType(),
    TimestamptzType(),
    StringType(),
    UUIDType(),
    FixedType(3),
    BinaryType(),
]
SCHEMA = Schema(
    *(NestedField(i + 1, f"c{i + 1}", t, required=False) for i, t in enumerate(COLUMN_TYPES)),
    schema_id=3,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "int": INT32,
    "long": INT64,
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "decimal(9,2)": st.decimals("-9999999.99", "9999999.99", places=2, allow_nan=False, allow_infinity=False),
    "decimal(38,10)": st.decimals(
        Decimal("-" + "9" * 28 + ".9999999999"),
        Decimal("9" * 28 + ".9999999999"),
        places=10,
        allow_nan=False,
        allow_infinity=False,
    ),
    "date": INT32,
    "time": st.integers(0, 86_400_000_000 - 1),
    "timestamp": INT64,
    "timestamptz": INT64,
    "string": st.text(max_size=20),
    "uuid": st.uuids(),
    "fixed[3]": st.binary(min_size=3, max_size=3),
    "binary": st.binary(max_size=20),
}


def identity_spec(source_ids: list[int], spec_id: int = 0) -> PartitionSpec:
    return make_spec(spec_id, [(s, 1000 + i, f"c{s}_p", "identity") for i, s in enumerate(source_ids)])


def data_file(
    partition: tuple[Any, ...] = (),
    path: str = "/data/f.parquet",
    records: int = 10,
    content: DataFileContent = DataFileContent.DATA,
    spec_id: int = 0,
    **kwargs: Any,
) -> DataFile:
    return DataFile(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=records,
        file_size_in_bytes=1024,
        spec_id=spec_id,
        **kwargs,
    )


def added(df: DataFile, seq: Optional[int] = None) -> ManifestEntry:
    return ManifestEntry(ADDED, SNAPSHOT_ID, seq, None, df)


def commit(
    fio: FileIO, directory: Path, manifests: list[ManifestFile], seq: int = 5, snapshot_id: int = SNAPSHOT_ID
) -> list[ManifestFile]:
    """Write a manifest list the way a commit does and read it back."""
    path = str(directory / f"snap-{uuid.uuid4()}.avro")
    write_manifest_list(fio, path, snapshot_id, None, seq, manifests)
    return read_manifest_list(fio, path)


def avro_header(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        return json.loads(reader.metadata["avro.schema"]), dict(reader.metadata)


def field_of(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in record["fields"] if f["name"] == name)


def non_null(avro_type: Any) -> Any:
    return next(t for t in avro_type if t != "null") if isinstance(avro_type, list) else avro_type


@pytest.fixture
def fio(tmp_path: Path) -> FileIO:
    return FileIO.for_location(str(tmp_path))


# ---------------------------------------------------------------- Avro layout


def test_manifest_avro_schema_has_spec_ids_names_and_logical_types(fio: FileIO, tmp_path: Path) -> None:
    spec = identity_spec([8, 11, 6, 13, 14])  # date, timestamptz, decimal(9,2), uuid, fixed[3]
    path = str(tmp_path / "m.avro")
    df = data_file((1, 2, Decimal("1.00"), uuid.UUID(int=1), b"abc"), column_sizes={1: 2})
    write_manifest(fio, path, SCHEMA, spec, SNAPSHOT_ID, [added(df)])
    schema, _ = avro_header(path)

    assert schema["name"] == "manifest_entry"
    ids = {f["name"]: f["field-id"] for f in schema["fields"]}
    assert ids == {
        "status": 0, "snapshot_id": 1, "sequence_number": 3, "file_sequence_number": 4, "data_file": 2
    }  # fmt: skip
    assert field_of(schema, "snapshot_id")["default"] is None
    assert "default" not in field_of(schema, "status")

    df_schema = field_of(schema, "data_file")["type"]
    assert df_schema["name"] == "r2"
    df_ids = {f["name"]: f["field-id"] for f in df_schema["fields"]}
    assert df_ids == {
        "content": 134, "file_path": 100, "file_format": 101, "partition": 102, "record_count": 103,
        "file_size_in_bytes": 104, "column_sizes": 108, "value_counts": 109, "null_value_counts": 110,
        "nan_value_counts": 137, "lower_bounds": 125, "upper_bounds": 128, "key_metadata": 131,
        "split_offsets": 132, "equality_ids": 135, "sort_order_id": 140,
    }  # fmt: skip

    column_sizes = non_null(field_of(df_schema, "column_sizes")["type"])
    assert column_sizes["type"] == "array" and column_sizes["logicalType"] == "map"
    assert column_sizes["items"]["name"] == "k117_v118"
    assert [(f["name"], f["type"], f["field-id"]) for f in column_sizes["items"]["fields"]] == [
        ("key", "int", 117),
        ("value", "long", 118),
    ]
    lower = non_null(field_of(df_schema, "lower_bounds")["type"])["items"]
    assert lower["name"] == "k126_v127" and lower["fields"][1]["type"] == "bytes"
    split_offsets = non_null(field_of(df_schema, "split_offsets")["type"])
    assert split_offsets == {"type": "array", "items": "long", "element-id": 133}
    assert non_null(field_of(df_schema, "equality_ids")["type"])["element-id"] == 136

    partition = field_of(df_schema, "partition")["type"]
    assert partition["name"] == "r102"
    types = {f["field-id"]: non_null(f["type"]) for f in partition["fields"]}
    assert [f["name"] for f in partition["fields"]] == ["c8_p", "c11_p", "c6_p", "c13_p", "c14_p"]
    assert all(f["default"] is None for f in partition["fields"])
    assert types[1000] == {"type": "int", "logicalType": "date"}
    assert types[1001] == {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True}
    assert types[1002] == {
        "type": "fixed", "name": "decimal_9_2", "size": 4,
        "logicalType": "decimal", "precision": 9, "scale": 2,
    }  # fmt: skip
    assert types[1003] == {"type": "fixed", "name": "uuid_fixed", "size": 16, "logicalType": "uuid"}
    assert types[1004] == {"type": "fixed", "name": "fixed_3", "size": 3}


def test_manifest_key_value_metadata(fio: FileIO, tmp_path: Path) -> None:
    spec = make_spec(4, [(3, 1000, "c3_bucket", "bucket[16]")])
    for content, label, file_content in [
        (ManifestContent.DATA, "data", DataFileContent.DATA),
        (ManifestContent.DELETES, "deletes", DataFileContent.POSITION_DELETES),
    ]:
        path = str(tmp_path / f"{label}.avro")
        df = data_file((5,), content=file_content, spec_id=4)
        write_manifest(fio, path, SCHEMA, spec, SNAPSHOT_ID, [added(df)], content)
        _, meta = avro_header(path)
        assert json.loads(meta["schema"]) == SCHEMA.to_json()
        assert meta["schema-id"] == "3"
        assert json.loads(meta["partition-spec"]) == spec.to_json()["fields"]
        assert meta["partition-spec-id"] == "4"
        assert meta["format-version"] == "2"
        assert meta["content"] == label


def test_manifest_list_avro_schema_and_metadata(fio: FileIO, tmp_path: Path) -> None:
    manifest = write_manifest(
        fio, str(tmp_path / "m.avro"), SCHEMA, identity_spec([2]), SNAPSHOT_ID, [added(data_file((1,)))]
    )
    path = str(tmp_path / "list.avro")
    write_manifest_list(fio, path, SNAPSHOT_ID, 42, 7, [manifest])
    schema, meta = avro_header(path)
    assert schema["name"] == "manifest_file"
    ids = {f["name"]: f["field-id"] for f in schema["fields"]}
    assert ids == {
        "manifest_path": 500, "manifest_length": 501, "partition_spec_id": 502, "content": 517,
        "sequence_number": 515, "min_sequence_number": 516, "added_snapshot_id": 503,
        "added_files_count": 504, "existing_files_count": 505, "deleted_files_count": 506,
        "added_rows_count": 512, "existing_rows_count": 513, "deleted_rows_count": 514,
        "partitions": 507, "key_metadata": 519,
    }  # fmt: skip
    partitions = non_null(field_of(schema, "partitions")["type"])
    assert partitions["element-id"] == 508 and partitions["items"]["name"] == "r508"
    summary_ids = {f["name"]: f["field-id"] for f in partitions["items"]["fields"]}
    assert summary_ids == {"contains_null": 509, "contains_nan": 518, "lower_bound": 510, "upper_bound": 511}
    assert meta["snapshot-id"] == str(SNAPSHOT_ID)
    assert meta["parent-snapshot-id"] == "42"
    assert meta["sequence-number"] == "7"
    assert meta["format-version"] == "2"

    write_manifest_list(fio, path, SNAPSHOT_ID, None, 7, [manifest])
    assert avro_header(path)[1]["parent-snapshot-id"] == "null"


def test_repeated_named_types_are_defined_once(fio: FileIO, tmp_path: Path) -> None:
    schema = Schema(
        NestedField(1, "a", DecimalType(9, 2)),
        NestedField(2, "b", DecimalType(9, 2)),
        NestedField(3, "u", UUIDType()),
        NestedField(4, "v", UUIDType()),
    )
    spec = identity_spec([1, 2, 3, 4])
    value = (Decimal("1.10"), None, uuid.UUID(int=7), None)
    path = str(tmp_path / "m.avro")
    manifest = write_manifest(fio, path, schema, spec, SNAPSHOT_ID, [added(data_file(value))])
    [listed] = commit(fio, tmp_path, [manifest])
    entries = list(read_manifest_entries(fio, listed, spec.partition_type(schema)))
    assert entries[0].data_file.partition == value


def test_partition_names_that_avro_forbids_are_sanitized(fio: FileIO, tmp_path: Path) -> None:
    spec = make_spec(0, [(2, 1000, "1st-bucket", "bucket[4]"), (12, 1001, "näme", "identity")])
    path = str(tmp_path / "m.avro")
    manifest = write_manifest(fio, path, SCHEMA, spec, SNAPSHOT_ID, [added(data_file((3, "x")))])
    partition = field_of(field_of(avro_header(path)[0], "data_file")["type"], "partition")["type"]
    assert [(f["name"], f.get("iceberg-field-name")) for f in partition["fields"]] == [
        ("_1st_x2Dbucket", "1st-bucket"),
        ("näme", None),  # Unicode letters are valid, as in Java
    ]
    [entry] = read_manifest_entries(fio, commit(fio, tmp_path, [manifest])[0], spec.partition_type(SCHEMA))
    assert entry.data_file.partition == (3, "x")


# ----------------------------------------------------------------- round trips

partition_columns = st.lists(st.integers(1, len(COLUMN_TYPES)), max_size=4, unique=True)
metric_maps = st.none() | st.dictionaries(INT32, INT64, max_size=5)
bound_maps = st.none() | st.dictionaries(INT32, st.binary(max_size=16), max_size=5)


@st.composite
def files_for(draw: st.DrawFn, columns: list[int]) -> list[DataFile]:
    files = []
    for i in range(draw(st.integers(1, 4))):
        partition = tuple(
            draw(st.none() | VALUES[str(COLUMN_TYPES[c - 1])]) for c in columns
        )
        content = draw(st.sampled_from(list(DataFileContent)))
        files.append(
            DataFile(
                content=content,
                file_path=f"s3://bucket/data/{i}-{draw(st.text(max_size=10))}.parquet",
                file_format=draw(st.sampled_from([f for f in FileFormat if f != FileFormat.PUFFIN])),
                partition=partition,
                # up to 4 files: their sums (a manifest's row counts) must still fit a long
                record_count=draw(st.integers(0, 2**60)),
                file_size_in_bytes=draw(st.integers(0, 2**62)),
                column_sizes=draw(metric_maps),
                value_counts=draw(metric_maps),
                null_value_counts=draw(metric_maps),
                nan_value_counts=draw(metric_maps),
                lower_bounds=draw(bound_maps),
                upper_bounds=draw(bound_maps),
                key_metadata=draw(st.none() | st.binary(max_size=8)),
                split_offsets=draw(st.none() | st.lists(INT64, max_size=4)),
                equality_ids=draw(st.none() | st.lists(INT32, max_size=4)),
                sort_order_id=draw(st.none() | INT32),
                spec_id=7,
            )
        )
    return files


@st.composite
def manifest_cases(draw: st.DrawFn) -> tuple[list[int], list[DataFile]]:
    columns = draw(partition_columns)
    return columns, draw(files_for(columns))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=manifest_cases(), delete_manifest=st.booleans())
def test_data_files_round_trip(
    tmp_path: Path, case: tuple[list[int], list[DataFile]], delete_manifest: bool
) -> None:
    columns, files = case
    content = ManifestContent.DELETES if delete_manifest else ManifestContent.DATA
    wanted = {DataFileContent.DATA} if not delete_manifest else {
        DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES
    }  # fmt: skip
    files = [f for f in files if f.content in wanted]
    fio = FileIO.for_location(str(tmp_path))
    spec = identity_spec(columns, spec_id=7)
    path = f"file:{tmp_path}/{uuid.uuid4()}-m.avro"
    manifest = write_manifest(fio, path, SCHEMA, spec, SNAPSHOT_ID, [added(f) for f in files], content)
    [listed] = commit(fio, tmp_path, [manifest], seq=11)
    entries = list(read_manifest_entries(fio, listed, spec.partition_type(SCHEMA)))
    assert [e.data_file for e in entries] == files
    assert all((e.sequence_number, e.file_sequence_number) == (11, 11) for e in entries)
    assert listed.content == content
    assert manifest.manifest_length == fio.size(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    manifests=st.lists(
        st.builds(
            ManifestFile,
            manifest_path=st.text(min_size=1, max_size=30),
            manifest_length=st.integers(0, 2**62),
            partition_spec_id=st.integers(0, 2**31 - 1),
            content=st.sampled_from(list(ManifestContent)),
            sequence_number=st.integers(0, 2**62),
            min_sequence_number=st.integers(0, 2**62),
            added_snapshot_id=INT64,
            added_files_count=st.integers(0, 2**31 - 1),
            existing_files_count=st.integers(0, 2**31 - 1),
            deleted_files_count=st.integers(0, 2**31 - 1),
            added_rows_count=st.integers(0, 2**62),
            existing_rows_count=st.integers(0, 2**62),
            deleted_rows_count=st.integers(0, 2**62),
            partitions=st.none()
            | st.lists(
                st.builds(
                    FieldSummary,
                    contains_null=st.booleans(),
                    contains_nan=st.none() | st.booleans(),
                    lower_bound=st.none() | st.binary(max_size=8),
                    upper_bound=st.none() | st.binary(max_size=8),
                ),
                max_size=3,
            ),
            key_metadata=st.none() | st.binary(max_size=8),
        ),
        max_size=5,
    )
)
def test_manifest_list_round_trips_assigned_manifests(tmp_path: Path, manifests: list[ManifestFile]) -> None:
    fio = FileIO.for_location(str(tmp_path))
    assert commit(fio, tmp_path, manifests) == manifests


# ----------------------------------------------------------------- inheritance


def test_sequence_numbers_and_snapshot_ids_are_inherited(fio: FileIO, tmp_path: Path) -> None:
    spec = identity_spec([])
    entries = [
        ManifestEntry(ADDED, None, None, None, data_file(path="/a")),  # everything inherited
        ManifestEntry(ADDED, SNAPSHOT_ID, 2, None, data_file(path="/b")),  # older data seq kept
        ManifestEntry(EXISTING, 5, 3, 4, data_file(path="/c")),
        ManifestEntry(DELETED, SNAPSHOT_ID, 1, 1, data_file(path="/d")),
    ]
    manifest = write_manifest(fio, str(tmp_path / "m.avro"), SCHEMA, spec, SNAPSHOT_ID, entries)
    assert manifest.sequence_number == UNASSIGNED_SEQ
    assert manifest.min_sequence_number == 2  # over live entries with a known data sequence number
    [listed] = commit(fio, tmp_path, [manifest], seq=9)
    assert (listed.sequence_number, listed.min_sequence_number) == (9, 2)

    read = list(read_manifest_entries(fio, listed))
    assert [(e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in read] == [
        (ADDED, SNAPSHOT_ID, 9, 9),
        (ADDED, SNAPSHOT_ID, 2, 9),
        (EXISTING, 5, 3, 4),
        (DELETED, SNAPSHOT_ID, 1, 1),
    ]
    assert all(e.data_file.spec_id == 0 for e in read)


def test_null_sequence_numbers_are_stored_as_null(fio: FileIO, tmp_path: Path) -> None:
    path = str(tmp_path / "m.avro")
    write_manifest(fio, path, SCHEMA, identity_spec([]), SNAPSHOT_ID, [added(data_file())])
    with open(path, "rb") as f:
        [raw] = list(fastavro.reader(f))
    assert raw["sequence_number"] is None and raw["file_sequence_number"] is None
    assert raw["snapshot_id"] == SNAPSHOT_ID


def test_uncommitted_manifest_reads_without_inheriting(fio: FileIO, tmp_path: Path) -> None:
    manifest = write_manifest(
        fio, str(tmp_path / "m.avro"), SCHEMA, identity_spec([]), SNAPSHOT_ID, [added(data_file())]
    )
    [entry] = read_manifest_entries(fio, manifest)
    assert entry.sequence_number is None and entry.file_sequence_number is None


def test_spec_id_comes_from_the_manifest_file(fio: FileIO, tmp_path: Path) -> None:
    spec = identity_spec([2], spec_id=3)
    manifest = write_manifest(
        fio, str(tmp_path / "m.avro"), SCHEMA, spec, SNAPSHOT_ID, [added(data_file((1,), spec_id=3))]
    )
    [listed] = commit(fio, tmp_path, [manifest])
    assert listed.partition_spec_id == 3
    assert [e.data_file.spec_id for e in read_manifest_entries(fio, listed)] == [3]


def manifest_file(seq: int, path: str = "/m.avro") -> ManifestFile:
    return ManifestFile(path, 1, 0, ManifestContent.DATA, seq, seq, 77, 0, 0, 0, 0, 0, 0)


@given(status=st.sampled_from(list(ManifestEntryStatus)), seq=st.integers(1, 2**40))
def test_inherit_rules(status: ManifestEntryStatus, seq: int) -> None:
    explicit = ManifestEntry(status, 5, 1, 2, data_file())
    assert inherit(explicit, manifest_file(seq)) == explicit
    null = ManifestEntry(status, None, None, None, data_file())
    if status == ADDED:
        assert inherit(null, manifest_file(seq)) == ManifestEntry(ADDED, 77, seq, seq, data_file())
    else:
        with pytest.raises(MalformedFileError) as info:
            inherit(null, manifest_file(seq, "/bad.avro"))
        assert info.value.field == "sequence_number" and info.value.path == "/bad.avro"


def test_v1_manifests_inherit_sequence_number_zero_for_all_entries() -> None:
    entry = ManifestEntry(EXISTING, 5, None, None, data_file())
    assert inherit(entry, manifest_file(0)) == ManifestEntry(EXISTING, 5, 0, 0, data_file())


# ------------------------------------------------------- counts and summaries


def test_counts_and_partition_summaries(fio: FileIO, tmp_path: Path) -> None:
    spec = identity_spec([5, 12, 2])  # double, string, int
    entries = [
        ManifestEntry(ADDED, SNAPSHOT_ID, None, None, data_file((0.0, "b", None), records=1)),
        ManifestEntry(ADDED, SNAPSHOT_ID, None, None, data_file((-0.0, "a", None), records=2)),
        ManifestEntry(EXISTING, 3, 7, 7, data_file((math.nan, "c", None), records=4)),
        ManifestEntry(DELETED, SNAPSHOT_ID, 1, 1, data_file((None, "z", None), records=8)),
    ]
    m = write_manifest(fio, str(tmp_path / "m.avro"), SCHEMA, spec, SNAPSHOT_ID, entries)
    assert (m.added_files_count, m.existing_files_count, m.deleted_files_count) == (2, 1, 1)
    assert (m.added_rows_count, m.existing_rows_count, m.deleted_rows_count) == (3, 4, 8)
    assert m.min_sequence_number == 7  # the DELETED entry's 1 does not count
    assert (m.added_snapshot_id, m.partition_spec_id, m.content) == (SNAPSHOT_ID, 0, ManifestContent.DATA)
    doubles, strings, ints = m.partitions or []
    assert doubles == FieldSummary(True, True, to_bytes(DoubleType(), -0.0), to_bytes(DoubleType(), 0.0))
    assert math.copysign(1, from_bytes(DoubleType(), doubles.lower_bound)) == -1
    assert strings == FieldSummary(False, False, b"a", b"z")
    assert ints == FieldSummary(True, False, None, None)
    assert commit(fio, tmp_path, [m])[0].partitions == m.partitions


@settings(max_examples=50, deadline=None)
@given(column=st.integers(1, len(COLUMN_TYPES)), data=st.data())
def test_partition_summary_bounds_are_min_and_max(column: int, data: st.DataObject) -> None:
    t = COLUMN_TYPES[column - 1]
    values = data.draw(st.lists(st.none() | VALUES[str(t)], min_size=1, max_size=6))
    spec = identity_spec([column])
    stats = _ManifestStats(spec.partition_type(SCHEMA))
    for v in values:
        stats.add(added(data_file((v,))))
    [summary] = stats.manifest_file("/m", 1, 0, ManifestContent.DATA, 1).partitions or []
    present = [v for v in values if v is not None]
    assert summary.contains_null == (None in values)
    if not present:
        assert summary.lower_bound is None and summary.upper_bound is None
        return
    lower, upper = from_bytes(t, summary.lower_bound), from_bytes(t, summary.upper_bound)
    assert lower == min(present) and upper == max(present)


def test_empty_manifest_has_zero_counts(fio: FileIO, tmp_path: Path) -> None:
    m = write_manifest(fio, str(tmp_path / "m.avro"), SCHEMA, identity_spec([2]), SNAPSHOT_ID, [])
    assert (m.added_files_count, m.existing_files_count, m.deleted_files_count) == (0, 0, 0)
    assert m.partitions == [FieldSummary(False, False, None, None)]
    [listed] = commit(fio, tmp_path, [m], seq=4)
    assert (listed.sequence_number, listed.min_sequence_number) == (4, 4)
    assert list(read_manifest_entries(fio, listed)) == []


# ---------------------------------------------------------- manifest list rules


def test_manifest_list_assigns_only_unassigned_sequence_numbers(fio: FileIO, tmp_path: Path) -> None:
    new = manifest_file(UNASSIGNED_SEQ, "/new.avro")
    new = ManifestFile(**{**new.__dict__, "added_snapshot_id": SNAPSHOT_ID, "min_sequence_number": 3})
    old = manifest_file(2, "/old.avro")
    listed = commit(fio, tmp_path, [new, old], seq=6)
    assert [(m.manifest_path, m.sequence_number, m.min_sequence_number) for m in listed] == [
        ("/new.avro", 6, 3),
        ("/old.avro", 2, 2),
    ]


def test_manifest_list_refuses_unassigned_manifest_of_another_snapshot(fio: FileIO, tmp_path: Path) -> None:
    stray = manifest_file(UNASSIGNED_SEQ, "/stray.avro")  # added by snapshot 77
    path = str(tmp_path / "list.avro")
    with pytest.raises(ValidationError, match="/stray.avro"):
        write_manifest_list(fio, path, SNAPSHOT_ID, None, 3, [stray])
    assert not fio.exists(path)  # no half-written list is left behind


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "entry, message",
    [
        (added(data_file(content=DataFileContent.EQUALITY_DELETES)), "DATA manifest cannot hold"),
        (added(data_file(spec_id=9)), "spec id 9"),
        (added(data_file((1, 2))), "2 values, spec has 0"),
        (ManifestEntry(EXISTING, 1, None, 2, data_file()), "must carry both sequence numbers"),
        (ManifestEntry(DELETED, 1, 2, None, data_file()), "must carry both sequence numbers"),
        (ManifestEntry(ADDED, 12345, None, None, data_file()), "snapshot 12345"),
        (added(data_file(column_sizes={1: "big"})), "cannot write"),
    ],
)
def test_write_manifest_rejects_bad_entries(
    fio: FileIO, tmp_path: Path, entry: ManifestEntry, message: str
) -> None:
    path = str(tmp_path / "m.avro")
    with pytest.raises(ValidationError, match=message):
        write_manifest(fio, path, SCHEMA, identity_spec([]), SNAPSHOT_ID, [added(data_file()), entry])
    assert not fio.exists(path)


def test_write_manifest_rejects_partition_value_of_wrong_type(fio: FileIO, tmp_path: Path) -> None:
    path = str(tmp_path / "m.avro")
    with pytest.raises(ValidationError):
        write_manifest(fio, path, SCHEMA, identity_spec([2]), SNAPSHOT_ID, [added(data_file(("x",)))])
    assert not fio.exists(path)


def test_delete_manifest_rejects_data_files(fio: FileIO, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="DELETES manifest cannot hold DATA"):
        write_manifest(
            fio, str(tmp_path / "m.avro"), SCHEMA, identity_spec([]), SNAPSHOT_ID,
            [added(data_file())], ManifestContent.DELETES,
        )  # fmt: skip


# ---------------------------------------------------------------- malformed files


def test_garbage_file_is_malformed(fio: FileIO, tmp_path: Path) -> None:
    path = str(tmp_path / "garbage.avro")
    fio.write_bytes(path, b"this is not avro at all")
    with pytest.raises(MalformedFileError) as info:
        read_manifest_list(fio, path)
    assert info.value.path == path
    with pytest.raises(MalformedFileError):
        list(read_manifest_entries(fio, manifest_file(1, path)))


def test_truncated_manifest_is_malformed(fio: FileIO, tmp_path: Path) -> None:
    path = str(tmp_path / "m.avro")
    files = [added(data_file((i,), path=f"/data/{i}.parquet")) for i in range(200)]
    m = write_manifest(fio, path, SCHEMA, identity_spec([2]), SNAPSHOT_ID, files, codec="null")
    fio.write_bytes(path, fio.read_bytes(path)[: m.manifest_length - 50])
    with pytest.raises(MalformedFileError) as info:
        list(read_manifest_entries(fio, commit(fio, tmp_path, [m])[0]))
    assert info.value.path == path


def test_missing_required_field_names_the_field(fio: FileIO, tmp_path: Path) -> None:
    path = str(tmp_path / "list.avro")
    schema = {
        "type": "record",
        "name": "manifest_file",
        "fields": [
            {"name": "manifest_path", "type": "string", "field-id": 500},
            {"name": "manifest_length", "type": "long", "field-id": 501},
        ],
    }
    with fio.open_output(path) as out:
        record = {"manifest_path": "/m", "manifest_length": 1}
        fastavro.writer(out, schema, [record], metadata={"format-version": "2"})
    with pytest.raises(MalformedFileError) as info:
        read_manifest_list(fio, path)
    assert info.value.path == path and info.value.field == "partition_spec_id"


def test_missing_partition_field_id_is_malformed(fio: FileIO, tmp_path: Path) -> None:
    m = write_manifest(
        fio, str(tmp_path / "m.avro"), SCHEMA, identity_spec([2]), SNAPSHOT_ID, [added(data_file((1,)))]
    )
    other = StructType(NestedField(1005, "other", IntegerType()))
    with pytest.raises(MalformedFileError) as info:
        list(read_manifest_entries(fio, commit(fio, tmp_path, [m])[0], other))
    assert info.value.field == "data_file.partition.other"


def test_reading_is_lazy_and_missing_file_is_typed(fio: FileIO, tmp_path: Path) -> None:
    entries = read_manifest_entries(fio, manifest_file(1, str(tmp_path / "absent.avro")))
    with pytest.raises(MissingFileError):
        next(entries)
    with pytest.raises(MissingFileError):
        read_manifest_list(fio, str(tmp_path / "absent-list.avro"))


def test_large_manifest_streams(fio: FileIO, tmp_path: Path) -> None:
    spec = identity_spec([3])
    files = (added(data_file((i,), path=f"/data/{i}.parquet", records=i)) for i in range(5000))
    m = write_manifest(fio, str(tmp_path / "m.avro"), SCHEMA, spec, SNAPSHOT_ID, files)
    assert m.added_files_count == 5000 and m.added_rows_count == sum(range(5000))
    entries = read_manifest_entries(fio, commit(fio, tmp_path, [m])[0])
    first = next(entries)
    assert first.data_file.partition == (0,)
    assert sum(1 for _ in entries) == 4999


# ------------------------------------------------------------ pyiceberg oracle

ORACLE_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "d", DateType()),
    NestedField(3, "u", UUIDType()),
    NestedField(4, "dec", DecimalType(9, 2)),
    NestedField(5, "ts", TimestamptzType()),
    NestedField(6, "s", StringType()),
    schema_id=2,
)
ORACLE_SPEC = make_spec(
    3,
    [
        (2, 1000, "d", "identity"),
        (3, 1001, "u", "identity"),
        (4, 1002, "dec", "identity"),
        (5, 1003, "ts_day", "day"),
        (6, 1004, "s_bucket", "bucket[8]"),
    ],
)


def oracle_entries() -> list[ManifestEntry]:
    full = data_file(
        (-5, uuid.UUID(int=2**127 + 5), Decimal("1.25"), 19000, 3),
        path="file:/warehouse/t/data/a.parquet",
        records=10,
        spec_id=3,
        column_sizes={1: 5, 2: 7},
        value_counts={1: 10},
        null_value_counts={1: 0},
        nan_value_counts={},
        lower_bounds={1: to_bytes(LongType(), -3)},
        upper_bounds={1: to_bytes(LongType(), 99)},
        key_metadata=b"k",
        split_offsets=[4, 100],
        sort_order_id=0,
    )
    sparse = data_file(
        (None, None, None, None, 0), path="file:/warehouse/t/data/b.parquet", records=3, spec_id=3
    )
    return [
        ManifestEntry(ADDED, SNAPSHOT_ID, None, None, full),
        ManifestEntry(EXISTING, 12, 2, 2, sparse),
        ManifestEntry(DELETED, SNAPSHOT_ID, 1, 1, replace_path(sparse, "file:/warehouse/t/data/c.parquet")),
    ]


def replace_path(df: DataFile, path: str) -> DataFile:
    return DataFile(**{**df.__dict__, "file_path": path})


def test_pyiceberg_reads_our_manifest_list_and_manifest(fio: FileIO, tmp_path: Path) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import read_manifest_list as pyi_read_manifest_list

    entries = oracle_entries()
    manifest_path = f"file:{tmp_path}/m.avro"
    ours = write_manifest(fio, manifest_path, ORACLE_SCHEMA, ORACLE_SPEC, SNAPSHOT_ID, entries)
    list_path = str(tmp_path / "snap.avro")
    write_manifest_list(fio, list_path, SNAPSHOT_ID, 12, 4, [ours])

    pyi_io = PyArrowFileIO()
    [theirs] = list(pyi_read_manifest_list(pyi_io.new_input(list_path)))
    assert theirs.manifest_path == manifest_path
    assert theirs.manifest_length == ours.manifest_length == fio.size(manifest_path)
    assert (theirs.partition_spec_id, int(theirs.content)) == (3, 0)
    assert (theirs.sequence_number, theirs.min_sequence_number) == (4, 2)
    assert theirs.added_snapshot_id == SNAPSHOT_ID
    assert (theirs.added_files_count, theirs.existing_files_count, theirs.deleted_files_count) == (1, 1, 1)
    assert (theirs.added_rows_count, theirs.existing_rows_count, theirs.deleted_rows_count) == (10, 3, 3)
    assert [
        (s.contains_null, s.contains_nan, s.lower_bound, s.upper_bound) for s in theirs.partitions
    ] == [(s.contains_null, s.contains_nan, s.lower_bound, s.upper_bound) for s in ours.partitions or []]

    read = theirs.fetch_manifest_entry(pyi_io, discard_deleted=False)
    assert [(int(e.status), e.snapshot_id, e.sequence_number, e.file_sequence_number) for e in read] == [
        (1, SNAPSHOT_ID, 4, 4),
        (0, 12, 2, 2),
        (2, SNAPSHOT_ID, 1, 1),
    ]
    for got, want in zip(read, entries):
        df, exp = got.data_file, want.data_file
        assert (int(df.content), df.file_path, df.file_format.value) == (0, exp.file_path, "PARQUET")
        assert tuple(df.partition) == exp.partition
        assert (df.record_count, df.file_size_in_bytes) == (exp.record_count, exp.file_size_in_bytes)
        for name in ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts"):
            got_map = getattr(df, name)
            assert (dict(got_map) if got_map is not None else None) == getattr(exp, name), name
        assert df.lower_bounds == exp.lower_bounds and df.upper_bounds == exp.upper_bounds
        assert (df.key_metadata, df.split_offsets, df.sort_order_id) == (
            exp.key_metadata,
            exp.split_offsets,
            exp.sort_order_id,
        )
        assert df.spec_id == 3


def test_we_read_a_manifest_and_list_written_by_pyiceberg(fio: FileIO, tmp_path: Path) -> None:
    from pyiceberg import partitioning as pyi_part
    from pyiceberg import schema as pyi_schema
    from pyiceberg import transforms as pyi_tf
    from pyiceberg import types as pyi_types
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import DataFile as PyiDataFile
    from pyiceberg.manifest import DataFileContent as PyiContent
    from pyiceberg.manifest import FileFormat as PyiFormat
    from pyiceberg.manifest import ManifestEntry as PyiEntry
    from pyiceberg.manifest import ManifestEntryStatus as PyiStatus
    from pyiceberg.manifest import write_manifest as pyi_write_manifest
    from pyiceberg.manifest import write_manifest_list as pyi_write_manifest_list
    from pyiceberg.typedef import Record

    schema = pyi_schema.Schema(
        pyi_types.NestedField(1, "id", pyi_types.LongType(), required=True),
        pyi_types.NestedField(2, "d", pyi_types.DateType()),
        pyi_types.NestedField(3, "u", pyi_types.UUIDType()),
        pyi_types.NestedField(4, "dec", pyi_types.DecimalType(9, 2)),
        pyi_types.NestedField(5, "ts", pyi_types.TimestamptzType()),
        pyi_types.NestedField(6, "s", pyi_types.StringType()),
        schema_id=2,
    )
    spec = pyi_part.PartitionSpec(
        pyi_part.PartitionField(2, 1000, pyi_tf.IdentityTransform(), "d"),
        pyi_part.PartitionField(3, 1001, pyi_tf.IdentityTransform(), "u"),
        pyi_part.PartitionField(4, 1002, pyi_tf.IdentityTransform(), "dec"),
        pyi_part.PartitionField(5, 1003, pyi_tf.DayTransform(), "ts_day"),
        pyi_part.PartitionField(6, 1004, pyi_tf.BucketTransform(8), "s_bucket"),
        spec_id=3,
    )
    u = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")
    pyi_file = PyiDataFile.from_args(
        content=PyiContent.DATA,
        file_path="file:/warehouse/t/data/a.parquet",
        file_format=PyiFormat.PARQUET,
        partition=Record(-5, u, Decimal("1.25"), 19000, 3),
        record_count=10,
        file_size_in_bytes=100,
        column_sizes={1: 5},
        value_counts={1: 10},
        null_value_counts={1: 0},
        nan_value_counts={},
        lower_bounds={1: b"\0" * 8},
        upper_bounds={1: b"\1" * 8},
        key_metadata=None,
        split_offsets=[4],
        equality_ids=None,
        sort_order_id=0,
    )
    pyi_io = PyArrowFileIO()
    manifest_path = str(tmp_path / "m.avro")
    with pyi_write_manifest(2, spec, schema, pyi_io.new_output(manifest_path), 77, "deflate") as writer:
        writer.add(PyiEntry.from_args(status=PyiStatus.ADDED, snapshot_id=77, data_file=pyi_file))
    list_path = str(tmp_path / "snap.avro")
    with pyi_write_manifest_list(2, pyi_io.new_output(list_path), 77, None, 6, "deflate") as list_writer:
        list_writer.add_manifests([writer.to_manifest_file()])

    [manifest] = read_manifest_list(fio, list_path)
    assert (manifest.manifest_path, manifest.partition_spec_id, manifest.content) == (
        manifest_path,
        3,
        ManifestContent.DATA,
    )
    assert (manifest.sequence_number, manifest.min_sequence_number, manifest.added_snapshot_id) == (6, 6, 77)
    assert (manifest.added_files_count, manifest.added_rows_count) == (1, 10)
    assert manifest.manifest_length == fio.size(manifest_path)
    assert manifest.partitions is not None
    assert manifest.partitions[0].lower_bound == to_bytes(IntegerType(), -5)

    [entry] = read_manifest_entries(fio, manifest)  # partition type from the key-value metadata
    assert (entry.status, entry.snapshot_id, entry.sequence_number, entry.file_sequence_number) == (
        ADDED,
        77,
        6,
        6,
    )
    assert entry.data_file == DataFile(
        content=DataFileContent.DATA,
        file_path="file:/warehouse/t/data/a.parquet",
        file_format=FileFormat.PARQUET,
        partition=(-5, u, Decimal("1.25"), 19000, 3),
        record_count=10,
        file_size_in_bytes=100,
        column_sizes={1: 5},
        value_counts={1: 10},
        null_value_counts={1: 0},
        nan_value_counts={},
        lower_bounds={1: b"\0" * 8},
        upper_bounds={1: b"\1" * 8},
        split_offsets=[4],
        sort_order_id=0,
        spec_id=3,
    )


def test_partition_type_is_read_from_key_value_metadata(fio: FileIO, tmp_path: Path) -> None:
    entries = oracle_entries()
    m = write_manifest(fio, str(tmp_path / "m.avro"), ORACLE_SCHEMA, ORACLE_SPEC, SNAPSHOT_ID, entries)
    [listed] = commit(fio, tmp_path, [m])
    from_metadata = list(read_manifest_entries(fio, listed))
    explicit = list(read_manifest_entries(fio, listed, ORACLE_SPEC.partition_type(ORACLE_SCHEMA)))
    assert from_metadata == explicit
    assert [e.data_file.partition for e in from_metadata] == [e.data_file.partition for e in entries]


def test_missing_key_value_metadata_is_malformed(fio: FileIO, tmp_path: Path) -> None:
    path = str(tmp_path / "m.avro")
    m = write_manifest(fio, path, SCHEMA, identity_spec([2]), SNAPSHOT_ID, [added(data_file((1,)))])
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        schema, records = reader.writer_schema, list(reader)
    with open(path, "wb") as out:
        fastavro.writer(out, schema, records, metadata={"format-version": "2"})
    with pytest.raises(MalformedFileError) as info:
        list(read_manifest_entries(fio, commit(fio, tmp_path, [m])[0]))
    assert info.value.field == "schema"


def test_we_read_v1_files_written_by_pyiceberg_with_spec_defaults(fio: FileIO, tmp_path: Path) -> None:
    from pyiceberg import partitioning as pyi_part
    from pyiceberg import schema as pyi_schema
    from pyiceberg import types as pyi_types
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import DataFile as PyiDataFile
    from pyiceberg.manifest import DataFileContent as PyiContent
    from pyiceberg.manifest import FileFormat as PyiFormat
    from pyiceberg.manifest import ManifestEntry as PyiEntry
    from pyiceberg.manifest import ManifestEntryStatus as PyiStatus
    from pyiceberg.manifest import write_manifest as pyi_write_manifest
    from pyiceberg.manifest import write_manifest_list as pyi_write_manifest_list
    from pyiceberg.typedef import Record

    schema = pyi_schema.Schema(pyi_types.NestedField(1, "id", pyi_types.LongType(), required=True))
    pyi_file = PyiDataFile.from_args(
        content=PyiContent.DATA,
        file_path="/warehouse/t/data/a.parquet",
        file_format=PyiFormat.PARQUET,
        partition=Record(),
        record_count=4,
        file_size_in_bytes=40,
    )
    pyi_io = PyArrowFileIO()
    manifest_path, list_path = str(tmp_path / "m1.avro"), str(tmp_path / "snap1.avro")
    spec = pyi_part.UNPARTITIONED_PARTITION_SPEC
    with pyi_write_manifest(1, spec, schema, pyi_io.new_output(manifest_path), 5, "deflate") as writer:
        writer.add(PyiEntry.from_args(status=PyiStatus.ADDED, snapshot_id=5, data_file=pyi_file))
    with pyi_write_manifest_list(1, pyi_io.new_output(list_path), 5, None, None, "deflate") as list_writer:
        list_writer.add_manifests([writer.to_manifest_file()])

    [manifest] = read_manifest_list(fio, list_path)
    assert (manifest.content, manifest.sequence_number, manifest.min_sequence_number) == (
        ManifestContent.DATA,
        0,
        0,
    )
    [entry] = read_manifest_entries(fio, manifest)
    sequence_numbers = (entry.sequence_number, entry.file_sequence_number)
    assert (entry.status, entry.snapshot_id, sequence_numbers) == (ADDED, 5, (0, 0))
    assert entry.data_file.content == DataFileContent.DATA
    assert (entry.data_file.file_path, entry.data_file.record_count) == ("/warehouse/t/data/a.parquet", 4)


def test_added_entries_carry_the_writer_snapshot_id_so_pyiceberg_reads_them_as_added(
    fio: FileIO, tmp_path: Path
) -> None:
    # pyiceberg 0.10 mis-reads a null snapshot_id (its setter overwrites the
    # status), so ADDED entries are written with the id, as Java writes them.
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import read_manifest_list as pyi_read_manifest_list

    spec = identity_spec([])
    first, second = SNAPSHOT_ID, SNAPSHOT_ID + 1
    m1 = write_manifest(fio, str(tmp_path / "m1.avro"), SCHEMA, spec, first, [added(data_file(path="/a"))])
    [m1] = commit(fio, tmp_path, [m1], seq=1, snapshot_id=first)
    entries = [ManifestEntry(ADDED, None, None, None, data_file(path=p)) for p in ("/b", "/c")]
    m2 = write_manifest(fio, str(tmp_path / "m2.avro"), SCHEMA, spec, second, entries)
    with open(tmp_path / "m2.avro", "rb") as f:
        assert [raw["snapshot_id"] for raw in fastavro.reader(f)] == [second, second]
    list_path = str(tmp_path / "snap-2.avro")
    write_manifest_list(fio, list_path, second, first, 2, [m2, m1])

    pyi_io = PyArrowFileIO()
    theirs = {m.added_snapshot_id: m for m in pyi_read_manifest_list(pyi_io.new_input(list_path))}
    read = theirs[second].fetch_manifest_entry(pyi_io, discard_deleted=False)
    statuses = [(int(e.status), e.snapshot_id, e.data_file.file_path) for e in read]
    assert statuses == [(1, second, "/b"), (1, second, "/c")]
    [older] = theirs[first].fetch_manifest_entry(pyi_io, discard_deleted=False)
    assert (int(older.status), older.snapshot_id) == (1, first)
