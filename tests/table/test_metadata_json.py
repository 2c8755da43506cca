"""Tests for table.metadata_json: parsing, errors naming file and field, files and gzip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from table.errors import MalformedFileError
from table.metadata import is_gzip_metadata_name
from table.metadata_json import parse_table_metadata, read_table_metadata, write_table_metadata
from tests.table.helpers import FIRST, JAVA_METADATA, LocalIO, java_metadata

# --------------------------------------------------------------------------
# malformed files
# --------------------------------------------------------------------------


def _mutated(mutate: Callable[[dict[str, Any]], None]) -> str:
    obj = json.loads(JAVA_METADATA)
    mutate(obj)
    return json.dumps(obj)


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    return lambda obj: _set(obj, path, _DELETE)


_DELETE = object()


def _set(obj: Any, path: str, value: Any) -> None:
    *parents, last = path.split("/")
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    if value is _DELETE:
        del obj[int(last) if isinstance(obj, list) else last]
    elif isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


def _put(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda obj: _set(obj, path, value)


MALFORMED = [
    (_delete("snapshots/1/manifest-list"), "snapshots[1].manifest-list", "missing"),
    (_put("snapshots/0/sequence-number", "1"), "snapshots[0].sequence-number", "integer"),
    (_put("snapshots/0/summary/operation", "merge"), "snapshots[0].summary.operation", "'merge'"),
    (_delete("snapshots/0/summary/operation"), "snapshots[0].summary.operation", "None"),
    (_put("snapshots/0/summary/added-records", 10), "snapshots[0].summary.added-records", "string"),
    (_delete("snapshots/0/summary"), "snapshots[0].summary", "missing"),
    (_put("snapshots/1", []), "snapshots[1]", "object"),
    (_put("format-version", 1), "format-version", "version 1"),
    (_put("format-version", 4), "format-version", "version 4"),
    (_put("format-version", 3), "next-row-id", "non-negative next-row-id"),
    (_put("format-version", "2"), "format-version", "integer"),
    (_delete("table-uuid"), "table-uuid", "missing"),
    (_put("table-uuid", "not-a-uuid"), "table-uuid", "UUID"),
    (_delete("last-sequence-number"), "last-sequence-number", "missing"),
    (_put("last-updated-ms", 1.5), "last-updated-ms", "integer"),
    (_put("location", True), "location", "string"),
    (_delete("schemas"), "schemas", "missing"),
    (_put("schemas/1/fields/3/type/element", "varchar"), "schemas[1].fields[3].type.element", "varchar"),
    (_put("schemas/0/fields/0/id", "1"), "schemas[0].fields[0].id", "integer"),
    (_put("current-schema-id", 7), "current-schema-id", "7"),
    (_put("schemas/1/schema-id", 0), "schemas", "more than once"),
    (_put("last-column-id", 4), "last-column-id", "field id 5"),
    (_put("partition-specs/0/fields/0/transform", "week"), "partition-specs[0].fields[0].transform", "week"),
    (_put("partition-specs/0/fields/0/source-id", "1"), "partition-specs[0].fields[0].source-id", "int"),
    (_put("partition-specs/0/spec-id", None), "partition-specs[0].spec-id", "int"),
    (_put("partition-specs/0", 7), "partition-specs[0]", "object"),
    (_put("default-spec-id", 3), "default-spec-id", "3"),
    (_put("last-partition-id", 1000), "last-partition-id", "1001"),
    (_put("sort-orders/1/fields/0/direction", "up"), "sort-orders[1].fields[0].direction", "'up'"),
    (_put("default-sort-order-id", 5), "default-sort-order-id", "5"),
    (_put("properties/commit.retry.num-retries", 4), "properties.commit.retry.num-retries", "string"),
    (_put("current-snapshot-id", 42), "current-snapshot-id", "42"),
    (_put("refs/main/snapshot-id", FIRST), "current-snapshot-id", "main branch"),
    (_put("refs/test/snapshot-id", 5), "refs.test.snapshot-id", "snapshot 5"),
    (_put("refs/test/type", "label"), "refs.test", "'label'"),
    (_put("refs/test/min-snapshots-to-keep", 3), "refs.test", "tags"),
    (_put("refs/audit/min-snapshots-to-keep", 0), "refs.audit", "positive"),
    (_put("snapshot-log/1/snapshot-id", "x"), "snapshot-log[1].snapshot-id", "integer"),
    (_delete("metadata-log/0/metadata-file"), "metadata-log[0].metadata-file", "missing"),
    (_put("statistics/0", 3), "statistics[0]", "object"),
    (_put("last-sequence-number", 1), "snapshots[1].sequence-number", "above last-sequence-number"),
    (_put("snapshots/1/snapshot-id", FIRST), "snapshots", "more than once"),
]


@pytest.mark.parametrize(("mutate", "field", "reason"), MALFORMED)
def test_malformed_metadata_names_file_and_field(mutate: Any, field: str, reason: str) -> None:
    path = "s3://b/t/metadata/00003-x.metadata.json"
    with pytest.raises(MalformedFileError, match=reason) as info:
        parse_table_metadata(_mutated(mutate), path)
    assert info.value.field == field
    assert info.value.path == path
    assert path in str(info.value)


def test_bad_transform_in_a_metadata_file_names_file_and_spec_field(tmp_path: Path) -> None:
    path = str(tmp_path / "00001-x.metadata.json")
    Path(path).write_text(_mutated(_put("partition-specs/0/fields/0/transform", "bucket[x]")))
    with pytest.raises(MalformedFileError, match="bucket") as info:
        read_table_metadata(LocalIO(), path)
    assert info.value.path == path
    assert info.value.field == "partition-specs[0].fields[0].transform"
    assert f"field 'partition-specs[0].fields[0].transform' of {path}" in str(info.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b"\xff\xfe{}", "UTF-8"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (gzip.compress(b"{", mtime=0)[:-4], "gzip"),  # a fixed mtime: the same test id in every process
    ],
)
def test_unparseable_files(data: bytes, reason: str) -> None:
    with pytest.raises(MalformedFileError, match=reason) as info:
        parse_table_metadata(data, "/t/v1.metadata.json")
    assert info.value.path == "/t/v1.metadata.json"


# --------------------------------------------------------------------------
# files and gzip
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["00001-a.metadata.json", "00001-a.gz.metadata.json", "00001-a.metadata.json.gz"])
def test_write_and_read_files(tmp_path: Path, name: str) -> None:
    md = java_metadata()
    path = str(tmp_path / name)
    write_table_metadata(LocalIO(), path, md)
    raw = Path(path).read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == is_gzip_metadata_name(name)
    assert read_table_metadata(LocalIO(), path) == md


def test_gzip_is_detected_by_magic_bytes(tmp_path: Path) -> None:
    path = tmp_path / "v3.metadata.json"
    path.write_bytes(gzip.compress(JAVA_METADATA.encode()))
    assert read_table_metadata(LocalIO(), str(path)) == java_metadata()


def test_read_missing_file_propagates_the_io_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_table_metadata(LocalIO(), str(tmp_path / "missing.metadata.json"))
