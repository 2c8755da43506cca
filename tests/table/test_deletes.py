"""Position and equality delete file writers."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from table.arrow_schema import FIELD_ID_KEY, cast_to_schema
from table.conversions import from_bytes
from table.deletes.writers import EqualityDeleteWriter, PositionDeleteWriter, check_equality_ids
from table.errors import SchemaError, ValidationError
from table.io import FileIO
from table.manifest import DataFileContent
from table.partitioning import PartitionField, PartitionSpec
from table.schema import DELETE_FILE_PATH, DELETE_FILE_POS, Schema
from table.transforms import parse_transform
from table.types import (
    DoubleType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

TABLE = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "category", StringType()),
    NestedField(3, "score", DoubleType()),
    NestedField(4, "tags", ListType(5, StringType())),
    NestedField(6, "meta", StructType(NestedField(7, "source", StringType()))),
)
SPEC = PartitionSpec(2, (PartitionField(2, 1000, parse_transform("identity"), "category"),))
DATA_DIR_LONG = (
    "s3://bucket/warehouse/db/table/data/category=toy/00000-0-0f2c5a3e-aaaa-bbbb-cccc-000000000000"
)


def data_path(i: int) -> str:
    return f"{DATA_DIR_LONG}-{i:05d}.parquet"


def setup(tmp_path):
    return FileIO.for_location(str(tmp_path)), str(tmp_path / "tbl" / "data")


def read_pairs(path: str) -> list[tuple[str, int]]:
    table = pq.ParquetFile(path).read()
    return list(zip(table.column("file_path").to_pylist(), table.column("pos").to_pylist()))


def test_position_deletes_are_sorted_with_full_bounds(tmp_path):
    io, prefix = setup(tmp_path)
    writer = PositionDeleteWriter(io, prefix, TABLE, SPEC, ("toy",))
    deletes = [(data_path(i % 3), p) for i, p in enumerate([9, 1, 5, 0, 7, 3, 2])]
    for path, pos in deletes[:4]:
        writer.delete(path, pos)
    rest = deletes[4:]
    writer.write(pa.record_batch({"file_path": [p for p, _ in rest], "pos": [q for _, q in rest]}))
    [f] = writer.close()

    assert read_pairs(f.file_path) == sorted(deletes)
    assert f.content == DataFileContent.POSITION_DELETES
    assert f.partition == ("toy",) and f.spec_id == 2 and f.sort_order_id is None and f.equality_ids is None
    assert "/tbl/data/category=toy/" in f.file_path
    assert f.record_count == 7
    # Full, untruncated file_path bounds let planners match deletes to data files.
    assert from_bytes(StringType(), f.lower_bounds[DELETE_FILE_PATH.field_id]) == data_path(0)
    assert from_bytes(StringType(), f.upper_bounds[DELETE_FILE_PATH.field_id]) == data_path(2)
    assert from_bytes(LongType(), f.lower_bounds[DELETE_FILE_POS.field_id]) == 0
    assert from_bytes(LongType(), f.upper_bounds[DELETE_FILE_POS.field_id]) == 9
    assert f.value_counts == {DELETE_FILE_PATH.field_id: 7, DELETE_FILE_POS.field_id: 7}
    assert f.null_value_counts == {DELETE_FILE_PATH.field_id: 0, DELETE_FILE_POS.field_id: 0}

    schema = pq.ParquetFile(f.file_path).schema_arrow
    assert [(fld.name, int(fld.metadata[FIELD_ID_KEY]), fld.nullable) for fld in schema] == [
        ("file_path", 2147483546, False),
        ("pos", 2147483545, False),
    ]
    assert pq.read_metadata(f.file_path).metadata[b"delete-type"] == b"position"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10_000)), min_size=1, max_size=200),
    st.integers(min_value=1, max_value=80),
)
def test_buffer_bound_gives_sorted_files_property(tmp_path_factory, deletes, max_rows):
    io, prefix = setup(tmp_path_factory.mktemp("pd"))
    writer = PositionDeleteWriter(io, prefix, TABLE, SPEC, ("toy",), max_buffered_rows=max_rows)
    for i, pos in deletes:
        writer.delete(data_path(i), pos)
    files = writer.close()
    # Every full buffer becomes its own sorted file.
    assert [f.record_count for f in files[:-1]] == [max_rows] * (len(files) - 1)
    assert 0 < files[-1].record_count <= max_rows
    written = []
    for f in files:
        pairs = read_pairs(f.file_path)
        assert pairs == sorted(pairs)
        assert f.record_count == len(pairs)
        written += pairs
    assert sorted(written) == sorted((data_path(i), p) for i, p in deletes)


def test_buffer_and_target_size_roll_files(tmp_path):
    io, prefix = setup(tmp_path)
    rnd = random.Random(7)
    rows = [(data_path(rnd.randrange(50)), rnd.randrange(10**6)) for _ in range(30_000)]
    writer = PositionDeleteWriter(
        io, prefix, TABLE, SPEC, ("toy",), max_buffered_rows=12_000, target_file_size_bytes=16_000
    )
    writer.write(pa.table({"file_path": [p for p, _ in rows], "pos": [q for _, q in rows]}))
    files = writer.close()
    assert len(files) > 3  # at least one file per buffer flush, more from rolling
    total = 0
    for f in files:
        pairs = read_pairs(f.file_path)
        assert pairs == sorted(pairs)
        assert from_bytes(StringType(), f.lower_bounds[DELETE_FILE_PATH.field_id]) == pairs[0][0]
        assert from_bytes(StringType(), f.upper_bounds[DELETE_FILE_PATH.field_id]) == pairs[-1][0]
        total += len(pairs)
    assert total == 30_000


def test_position_delete_input_errors(tmp_path):
    io, prefix = setup(tmp_path)
    writer = PositionDeleteWriter(io, prefix, TABLE, SPEC, ("toy",))
    with pytest.raises(ValidationError, match="'pos' has 1 negative"):
        writer.write(pa.record_batch({"file_path": ["a"], "pos": [-1]}))
    with pytest.raises(ValidationError, match="'file_path' is required"):
        writer.write(pa.record_batch({"file_path": pa.array([None], pa.string()), "pos": [1]}))
    with pytest.raises(SchemaError, match="'row'"):
        writer.write(pa.record_batch({"file_path": ["a"], "pos": [1], "row": [1]}))
    assert writer.close() == []
    with pytest.raises(ValidationError, match="closed"):
        writer.delete("a", 1)
    with pytest.raises(ValidationError, match="max_buffered_rows"):
        PositionDeleteWriter(io, prefix, TABLE, SPEC, ("toy",), max_buffered_rows=0)


def test_position_abort_removes_files(tmp_path):
    io, prefix = setup(tmp_path)
    writer = PositionDeleteWriter(io, prefix, TABLE, SPEC, ("toy",), max_buffered_rows=2)
    for pos in range(5):
        writer.delete(data_path(0), pos)
    writer.write(pa.record_batch({"file_path": [data_path(1)] * 3, "pos": [1, 2, 3]}))
    writer.abort()
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


# ------------------------------------------------------------------ equality


def test_equality_deletes_project_the_equality_columns(tmp_path):
    io, prefix = setup(tmp_path)
    writer = EqualityDeleteWriter(io, prefix, TABLE, SPEC, ("toy",), [1, 7])
    assert [f.field_id for f in writer.delete_schema.fields] == [1, 6]
    batch = cast_to_schema(
        pa.record_batch({"id": [3, 1, 2], "meta": [{"source": "k"}, None, {"source": "a"}]}),
        writer.delete_schema,
    )
    writer.write(batch)
    [f] = writer.close()
    assert f.content == DataFileContent.EQUALITY_DELETES and f.equality_ids == [1, 7]
    assert f.partition == ("toy",) and f.spec_id == 2 and "/category=toy/" in f.file_path
    assert pq.ParquetFile(f.file_path).read().to_pylist() == batch.to_pylist()
    assert from_bytes(LongType(), f.lower_bounds[1]) == 1 and from_bytes(LongType(), f.upper_bounds[1]) == 3
    assert from_bytes(StringType(), f.lower_bounds[7]) == "a"
    assert from_bytes(StringType(), f.upper_bounds[7]) == "k"
    assert f.null_value_counts[7] == 1
    md = pq.read_metadata(f.file_path).metadata
    assert md[b"delete-type"] == b"equality" and md[b"delete-field-ids"] == b"1, 7"
    fields = pq.ParquetFile(f.file_path).schema_arrow
    assert int(fields.field("meta").type.field("source").metadata[FIELD_ID_KEY]) == 7


def test_equality_deletes_with_full_rows(tmp_path):
    io, prefix = setup(tmp_path)
    writer = EqualityDeleteWriter(io, prefix, TABLE, SPEC, ("toy",), [1], delete_schema=TABLE)
    writer.write(cast_to_schema(pa.record_batch({"id": [4], "category": ["toy"], "score": [1.5]}), TABLE))
    [f] = writer.close()
    assert f.equality_ids == [1] and f.record_count == 1
    assert pq.ParquetFile(f.file_path).read().column_names == ["id", "category", "score", "tags", "meta"]


@pytest.mark.parametrize(
    "ids,error,message",
    [
        ([3], SchemaError, "float columns cannot be delete columns"),
        ([5], SchemaError, "id 5 is not a column of the delete schema reachable through structs"),
        ([6], SchemaError, "'meta' .* not a primitive"),
        ([99], SchemaError, "id 99"),
        ([], ValidationError, "at least one"),
        ([1, 1], ValidationError, "repeat"),
    ],
)
def test_equality_id_rules(ids, error, message):
    with pytest.raises(error, match=message):
        check_equality_ids(TABLE, ids)
