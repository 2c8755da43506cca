"""Tests for table.avro: Iceberg types as Avro schemas and raw container files."""

from __future__ import annotations

from pathlib import Path

import pytest

from table.avro import avro_name, avro_schema, decimal_required_bytes, open_avro, record_field_type, write_avro
from table.errors import MalformedFileError, ValidationError
from table.io import FileIO
from table.types import DateType, DecimalType, LongType, NestedField, StructType, TimestamptzType


@pytest.mark.parametrize(
    ("name", "expected"),
    [("ok_name", "ok_name"), ("1st", "_1st"), ("a-b", "a_x2Db"), ("é", "é"), ("x.y", "x_x2Ey")],
)
def test_avro_name_renames_like_iceberg_java(name: str, expected: str) -> None:
    assert avro_name(name) == expected


@pytest.mark.parametrize(("precision", "size"), [(1, 1), (2, 1), (3, 2), (9, 4), (18, 8), (38, 16)])
def test_decimal_required_bytes(precision: int, size: int) -> None:
    assert decimal_required_bytes(precision) == size


def _struct() -> StructType:
    return StructType(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "day", DateType()),
        NestedField(3, "ts", TimestamptzType()),
        NestedField(4, "a-b", DecimalType(9, 2)),
    )


def test_schema_carries_field_ids_and_iceberg_names() -> None:
    schema = avro_schema(_struct(), "rec")
    fields = {f["name"]: f for f in schema["fields"]}
    assert [f["field-id"] for f in schema["fields"]] == [1, 2, 3, 4]
    assert fields["id"]["type"] == "long"
    assert fields["a_x2Db"]["iceberg-field-name"] == "a-b"
    assert fields["day"]["type"] == ["null", {"type": "int", "logicalType": "date"}]
    assert record_field_type({"fields": [{"name": "r", "type": ["null", schema]}]}, "r") is schema


def test_written_records_read_back_without_logical_types(tmp_path: Path) -> None:
    io = FileIO.for_location(str(tmp_path))
    path = str(tmp_path / "f.avro")
    records = [{"id": 1, "day": 19000, "ts": 1_700_000_000_000_000, "a_x2Db": None}]
    length = write_avro(io, path, avro_schema(_struct(), "rec"), records, {"k": "v"}, "deflate")
    assert length == io.size(path)
    with open_avro(io, path) as avro:
        assert avro.metadata["k"] == "v"
        assert avro.schema["name"] == "rec"
        assert list(avro.records) == records  # dates and timestamps stay ints


def test_unwritable_records_are_a_validation_error(tmp_path: Path) -> None:
    io = FileIO.for_location(str(tmp_path))
    with pytest.raises(ValidationError, match="cannot write"):
        write_avro(io, str(tmp_path / "f.avro"), avro_schema(_struct(), "rec"), [{"id": "x"}], {}, "null")


@pytest.mark.parametrize(("data", "reason"), [(b"not avro", "not an Avro"), (b"Obj\x01\x02", "cannot read Avro")])
def test_unreadable_files_name_the_path(tmp_path: Path, data: bytes, reason: str) -> None:
    path = tmp_path / "bad.avro"
    path.write_bytes(data)
    with pytest.raises(MalformedFileError, match=reason) as info:
        with open_avro(FileIO.for_location(str(tmp_path)), str(path)) as avro:
            list(avro.records)
    assert info.value.path == str(path)
