"""Tests of table.reader: projection by field id, position and equality
deletes (in memory and chunked), the row filter, and end-to-end reads of
hand-written tables, checked against pyiceberg where it can read them."""

from __future__ import annotations

import threading
import uuid
from decimal import Decimal
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from table.arrow_schema import schema_to_arrow
from table.deletes.equality import DeleteKeyCache, EqualityKeyLoader, group_by_keys
from table.deletes.writers import EqualityDeleteWriter, PositionDeleteWriter
from table.errors import MalformedFileError, ValidationError
from table.expressions import ALWAYS_TRUE, BooleanExpression, col
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, FileFormat
from table.metadata_json import write_table_metadata
from table.parquet.projection import ParquetFile
from table.parquet.writer import DataFileWriter
from table.partitioning import PartitionField, PartitionSpec
from table.reader import read_ahead, read_tasks
from table.scan import TableScan
from table.schema import Schema
from table.tasks import FileScanTask
from table.transforms import IdentityTransform
from table.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    UUIDType,
)
from tests.table.helpers import HandTable

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "category", StringType()),
    NestedField(3, "value", IntegerType()),
)
UNPARTITIONED = PartitionSpec(0, ())
BY_CATEGORY = PartitionSpec(1, (PartitionField(2, 1000, IdentityTransform(), "category"),))


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _batch(schema: Schema, rows: Sequence[Sequence[Any]]) -> pa.Table:
    arrow = schema_to_arrow(schema)
    columns = list(zip(*rows)) if rows else [[] for _ in arrow]
    return pa.table([pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)], schema=arrow)


class _Table(HandTable):
    """A hand-written table (:class:`HandTable`) whose data and delete files
    come from Floe's writers, with a metadata file per commit."""

    def __init__(self, tmp_path: Any, schema: Schema = SCHEMA, spec: PartitionSpec = UNPARTITIONED) -> None:
        super().__init__(str(tmp_path / "table"), schema, spec)
        self.version = 0
        self.files = 0

    def _name(self) -> Any:
        self.files += 1
        number = self.files
        return lambda: f"f{number:04d}-{uuid.uuid4().hex[:6]}.parquet"

    def write_data(self, rows: Sequence[Sequence[Any]], partition: tuple = (), schema: Optional[Schema] = None) -> DataFile:
        schema = schema or self.schema
        writer = DataFileWriter(
            self.io, f"{self.location}/data", schema, self.metadata.spec(), partition, file_name_factory=self._name()
        )
        writer.write(_batch(schema, rows))
        (data_file,) = writer.close()
        return data_file

    def write_positions(self, deletes: Sequence[tuple[str, int]], partition: tuple = ()) -> DataFile:
        writer = PositionDeleteWriter(
            self.io, f"{self.location}/data", self.schema, self.metadata.spec(), partition, file_name_factory=self._name()
        )
        for path, pos in deletes:
            writer.delete(path, pos)
        (delete_file,) = writer.close()
        return delete_file

    def write_equality(
        self,
        ids: Sequence[int],
        rows: Sequence[Sequence[Any]],
        partition: tuple = (),
        spec: Optional[PartitionSpec] = None,
    ) -> DataFile:
        writer = EqualityDeleteWriter(
            self.io, f"{self.location}/data", self.schema, spec or self.metadata.spec(), partition, ids,
            file_name_factory=self._name(),
        )
        writer.write(_batch(writer.delete_schema, rows))
        (delete_file,) = writer.close()
        return delete_file

    def commit_and_write(self, data: Sequence[DataFile] = (), deletes: Sequence[DataFile] = ()) -> str:
        """Commit files as a new snapshot and write a metadata file; returns its path."""
        self.commit(data, deletes)
        self.version += 1
        path = f"{self.location}/metadata/v{self.version}.metadata.json"
        write_table_metadata(self.io, path, self.metadata)
        return path

    def scan(self, **kw: Any) -> TableScan:
        return TableScan(self.io, self.metadata, **kw)


def _pyiceberg_rows(metadata_path: str, row_filter: Optional[str] = None) -> list[tuple]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_path)
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    return _rows(scan.to_arrow())


# --------------------------------------------------------------------------
# End to end, checked against pyiceberg
# --------------------------------------------------------------------------


def test_append_only_table_reads_like_pyiceberg(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    first = table.write_data([(1, "a", 10), (2, "b", None)])
    table.commit_and_write(data=[first])
    second = table.write_data([(3, None, 30)])
    metadata_path = table.commit_and_write(data=[second])
    expected = [(1, "a", 10), (2, "b", None), (3, None, 30)]
    assert _rows(table.scan().to_arrow()) == expected
    assert _pyiceberg_rows(metadata_path) == expected


def test_position_deletes_read_like_pyiceberg(tmp_path: Any) -> None:
    table = _Table(tmp_path, spec=BY_CATEGORY)
    a = table.write_data([(1, "a", 1), (2, "a", 2), (3, "a", 3), (4, "a", 4)], partition=("a",))
    b = table.write_data([(5, "b", 5), (6, "b", 6)], partition=("b",))
    table.commit_and_write(data=[a, b])
    first = table.write_positions([(a.file_path, 0)], partition=("a",))
    metadata_path = table.commit_and_write(deletes=[first])
    assert _rows(table.scan().to_arrow()) == _pyiceberg_rows(metadata_path)
    later = table.write_positions([(a.file_path, 2), (a.file_path, 3)], partition=("a",))
    later_b = table.write_positions([(b.file_path, 1)], partition=("b",))
    metadata_path = table.commit_and_write(deletes=[later, later_b])
    expected = [(2, "a", 2), (5, "b", 5)]
    assert _rows(table.scan().to_arrow()) == expected
    assert _pyiceberg_rows(metadata_path) == expected
    # a later data file is not touched by the earlier position deletes of its partition
    c = table.write_data([(7, "a", 7), (8, "a", 8)], partition=("a",))
    metadata_path = table.commit_and_write(data=[c])
    assert _rows(table.scan().to_arrow()) == expected + [(7, "a", 7), (8, "a", 8)]
    assert _pyiceberg_rows(metadata_path) == _rows(table.scan().to_arrow())


def test_position_deletes_apply_to_rows_added_in_the_same_commit(tmp_path: Any) -> None:
    # Spec: data sequence number <= the delete's. (pyiceberg 0.10 only applied
    # position deletes with a strictly greater sequence number; 0.12 follows
    # the spec.)
    table = _Table(tmp_path, spec=BY_CATEGORY)
    a = table.write_data([(1, "a", 1), (2, "a", 2)], partition=("a",))
    same_commit = table.write_positions([(a.file_path, 0)], partition=("a",))
    metadata_path = table.commit_and_write(data=[a], deletes=[same_commit])
    assert _rows(table.scan().to_arrow()) == [(2, "a", 2)]
    assert _pyiceberg_rows(metadata_path) == [(2, "a", 2)]


def test_filter_and_projection_read_like_pyiceberg(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(i, "abc"[i % 3], i * 10) for i in range(20)])
    table.commit_and_write(data=[data])
    positions = table.write_positions([(data.file_path, i) for i in (1, 2, 3)])
    metadata_path = table.commit_and_write(deletes=[positions])
    scan = table.scan(row_filter=(col("value") >= 20) & (col("category") != "b"), selected_fields=("id",))
    result = scan.to_arrow()
    assert result.schema.names == ["id"]
    expected = sorted((i,) for i in range(20) if i not in (1, 2, 3) and i * 10 >= 20 and "abc"[i % 3] != "b")
    assert _rows(result) == expected
    oracle = [(r[0],) for r in _pyiceberg_rows(metadata_path, "value >= 20 and category != 'b'")]
    assert sorted(oracle) == expected


# --------------------------------------------------------------------------
# Equality deletes
# --------------------------------------------------------------------------


def test_equality_deletes_apply_to_strictly_older_data_only(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    old = table.write_data([(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    table.commit_and_write(data=[old])
    new = table.write_data([(2, "b", 20)])  # re-inserted in the same commit as the delete
    delete = table.write_equality([1], [(2,), (3,)])
    table.commit_and_write(data=[new], deletes=[delete])
    assert _rows(table.scan().to_arrow()) == [(1, "a", 1), (2, "b", 20)]


def test_equality_deletes_on_several_columns_match_null_to_null(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(1, "a", 1), (2, None, 2), (3, None, None), (4, "d", None), (5, "e", 5)])
    table.commit_and_write(data=[data])
    on_category = table.write_equality([2], [(None,)])
    on_pair = table.write_equality([1, 3], [(4, None), (5, 6), (1, 1)])
    table.commit_and_write(deletes=[on_category, on_pair])
    assert _rows(table.scan().to_arrow()) == [(5, "e", 5)]


def test_equality_key_columns_are_read_but_not_returned(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(1, "a", 1), (2, "b", 2)])
    table.commit_and_write(data=[data])
    table.commit_and_write(deletes=[table.write_equality([2], [("a",)])])
    result = table.scan(selected_fields=("value",)).to_arrow()
    assert result.schema.names == ["value"]
    assert result.column("value").to_pylist() == [2]


def test_global_equality_deletes_apply_to_every_partition(tmp_path: Any) -> None:
    table = _Table(tmp_path, spec=BY_CATEGORY)
    a = table.write_data([(1, "a", 1), (2, "a", 2)], partition=("a",))
    b = table.write_data([(1, "b", 1), (3, "b", 3)], partition=("b",))
    table.commit_and_write(data=[a, b])
    local = table.write_equality([1], [(2,)], partition=("b",))  # partition b has no id 2
    global_delete = table.write_equality([1], [(1,)], spec=table.metadata.spec_by_id(0))
    table.commit_and_write(deletes=[local, global_delete])
    assert _rows(table.scan().to_arrow()) == [(2, "a", 2), (3, "b", 3)]


def test_chunked_equality_deletes_give_the_same_rows(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(i, f"c{i % 7}", i % 5) for i in range(200)])
    table.commit_and_write(data=[data])
    single = table.write_equality([1], [(i,) for i in range(0, 200, 3)])
    pairs = table.write_equality([2, 3], [(f"c{i}", i % 5) for i in range(7)] + [("nope", None)])
    positions = table.write_positions([(data.file_path, i) for i in range(1, 200, 10)])
    table.commit_and_write(deletes=[single, pairs, positions])
    tasks = list(table.scan().plan_files())
    in_memory = pa.Table.from_batches(list(read_tasks(table.io, tasks, table.schema, batch_size=16)))
    chunked = pa.Table.from_batches(
        list(read_tasks(table.io, tasks, table.schema, batch_size=16, max_equality_keys=4))
    )
    expected = sorted(
        (i, f"c{i % 7}", i % 5)
        for i in range(200)
        if i % 3 and i % 10 != 1 and (f"c{i % 7}", i % 5) not in {(f"c{j}", j % 5) for j in range(7)}
    )
    assert _rows(in_memory) == expected
    assert _rows(chunked) == expected
    # order within the file is kept
    assert chunked.column("id").to_pylist() == sorted(chunked.column("id").to_pylist())


def test_an_equality_delete_file_is_read_once_per_scan_and_rows_do_not_depend_on_the_cache(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = [table.write_data([(i, f"c{f}", i) for i in range(f * 10, f * 10 + 10)]) for f in range(6)]
    table.commit_and_write(data=data)
    shared = table.write_equality([1], [(i,) for i in range(0, 60, 4)])
    pairs = table.write_equality([2, 3], [("c0", 0), ("c1", 11), ("c5", 57), ("c3", 59)])  # bounds span every file
    table.commit_and_write(deletes=[shared, pairs])
    tasks = list(table.scan().plan_files())
    assert all(len(t.equality_deletes) == 2 for t in tasks), "both delete files apply to every data file"

    cache = DeleteKeyCache()
    for task in tasks:
        loader = EqualityKeyLoader(table.io, task.data_file, table.schema, ParquetFile(table.io, task.data_file, 64), 100, cache)
        for ids, files in group_by_keys(task.equality_deletes).items():
            loader.load_keys(ids, files)
    assert (cache.reads, cache.hits) == (2, 2 * (len(tasks) - 1))

    cached = _rows(pa.Table.from_batches(list(read_tasks(table.io, tasks, table.schema))))
    uncached = _rows(pa.Table.from_batches(list(read_tasks(table.io, tasks, table.schema, key_cache_bytes=0))))
    expected = sorted((i, f"c{i // 10}", i) for i in range(60) if i % 4 and i not in (11, 57))
    assert cached == uncached == expected


def test_the_delete_key_cache_stays_within_its_budget(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    files = [table.write_equality([1], [(i,) for i in range(n * 100, n * 100 + 100)]) for n in range(3)]
    one_file = 100 * 8  # 100 int64 keys
    cache = DeleteKeyCache(max_bytes=2 * one_file)
    types = [pa.int64()]
    for f in files:
        assert pa.concat_tables(list(cache.key_tables(table.io, f, (1,), types))).num_rows == 100
    assert cache._bytes <= 2 * one_file and len(cache._tables) == 2, "the oldest file was evicted"
    list(cache.key_tables(table.io, files[0], (1,), types))
    assert (cache.reads, cache.hits) == (4, 0), "the evicted file is read again"
    list(cache.key_tables(table.io, files[2], (1,), types))
    assert cache.hits == 1
    with pytest.raises(ValidationError, match="budget"):
        DeleteKeyCache(max_bytes=-1)


def test_equality_deletes_on_uuid_and_decimal_keys(tmp_path: Any) -> None:
    schema = Schema(
        NestedField(1, "u", UUIDType(), required=True),
        NestedField(2, "amount", DecimalType(10, 2)),
        NestedField(3, "n", IntegerType()),
    )
    table = _Table(tmp_path, schema=schema)
    u = [uuid.UUID(int=i).bytes for i in range(4)]
    rows = [(u[0], Decimal("1.00"), 0), (u[1], None, 1), (u[2], Decimal("2.50"), 2), (u[3], Decimal("3.00"), 3)]
    table.commit_and_write(data=[table.write_data(rows)])
    by_uuid = table.write_equality([1], [(u[0],)])
    # the delete file has the schema's column order (u, amount) whatever the id order
    by_pair = table.write_equality([2, 1], [(u[1], None), (u[3], Decimal("2.50"))])
    table.commit_and_write(deletes=[by_uuid, by_pair])
    result = table.scan().to_arrow()
    assert result.column("n").to_pylist() == [2, 3]
    assert result.schema.field("u").type == pa.uuid()


def test_time_travel_reads_the_old_snapshot_without_later_deletes(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(1, "a", 1), (2, "b", 2)])
    table.commit_and_write(data=[data])
    first = table.snapshot_id
    table.commit_and_write(deletes=[table.write_equality([1], [(1,)])])
    assert _rows(table.scan().to_arrow()) == [(2, "b", 2)]
    assert _rows(table.scan(snapshot_id=first).to_arrow()) == [(1, "a", 1), (2, "b", 2)]


def test_equality_deletes_on_a_dropped_column_still_apply(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(1, "a", 1), (2, "b", 2)])
    table.commit_and_write(data=[data])
    table.commit_and_write(deletes=[table.write_equality([2], [("b",)])])
    dropped = Schema(SCHEMA.fields[0], SCHEMA.fields[2])
    table.metadata = table.metadata.add_schema(dropped, 3, make_current=True)
    result = table.scan().to_arrow()
    assert result.schema.names == ["id", "value"]
    assert _rows(result) == [(1, 1)]


# --------------------------------------------------------------------------
# Deletes written by Iceberg Java (shape of the files)
# --------------------------------------------------------------------------


def _write_parquet(io: FileIO, path: str, table: pa.Table) -> int:
    with io.open_output(path) as out:
        pq.write_table(table, out, row_group_size=2)
    return io.size(path)


def _id_field(name: str, arrow_type: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, arrow_type, nullable=nullable, metadata={b"PARQUET:field_id": str(field_id).encode()})


def test_position_deletes_with_a_row_column_and_many_files(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    one = table.write_data([(i, "x", i) for i in range(6)])
    two = table.write_data([(i, "y", i) for i in range(6, 9)])
    row_type = pa.struct([_id_field("id", pa.int64(), 1, False), _id_field("category", pa.string(), 2)])
    schema = pa.schema([
        _id_field("file_path", pa.string(), 2147483546, False),
        _id_field("pos", pa.int64(), 2147483545, False),
        _id_field("row", row_type, 2147483544, False),
    ])
    rows = sorted(
        [(one.file_path, 1, 1, "x"), (one.file_path, 4, 4, "x"), (two.file_path, 0, 6, "y"), (two.file_path, 2, 8, "y")]
    )
    deletes = pa.table(
        [
            pa.array([r[0] for r in rows]),
            pa.array([r[1] for r in rows], pa.int64()),
            pa.array([{"id": r[2], "category": r[3]} for r in rows], row_type),
        ],
        schema=schema,
    )
    path = f"{table.location}/data/java-pos-deletes.parquet"
    size = _write_parquet(table.io, path, deletes)
    delete_file = DataFile(DataFileContent.POSITION_DELETES, path, FileFormat.PARQUET, (), len(rows), size)
    table.commit_and_write(data=[one, two])
    metadata_path = table.commit_and_write(deletes=[delete_file])
    expected = [(0, "x", 0), (2, "x", 2), (3, "x", 3), (5, "x", 5), (7, "y", 7)]
    assert _rows(table.scan().to_arrow()) == expected
    assert _pyiceberg_rows(metadata_path) == expected


# --------------------------------------------------------------------------
# Projection by field id
# --------------------------------------------------------------------------


def test_columns_are_read_by_id_after_rename_reorder_add_and_promotion(tmp_path: Any) -> None:
    old = Schema(
        NestedField(1, "id", IntegerType(), required=True),
        NestedField(2, "name", StringType()),
        NestedField(3, "score", FloatType()),
        NestedField(4, "amount", DecimalType(5, 2)),
        NestedField(5, "point", StructType(NestedField(6, "x", IntegerType()), NestedField(7, "y", IntegerType()))),
    )
    table = _Table(tmp_path, schema=old)
    data = table.write_data([(1, "a", 1.5, Decimal("1.25"), {"x": 1, "y": 2}), (2, None, None, None, None)])
    table.commit_and_write(data=[data])
    new = Schema(
        NestedField(
            5,
            "location",
            StructType(NestedField(7, "north", LongType()), NestedField(8, "z", IntegerType(), initial_default=0)),
        ),
        NestedField(3, "score", DoubleType()),
        NestedField(1, "key", LongType(), required=True),
        NestedField(9, "flag", StringType(), initial_default="none"),
        NestedField(4, "amount", DecimalType(9, 2)),
        NestedField(10, "u", UUIDType()),
    )
    table.metadata = table.metadata.add_schema(new, 10, make_current=True)
    result = table.scan().to_arrow()
    assert result.schema.names == ["location", "score", "key", "flag", "amount", "u"]
    assert result.schema.field("key").type == pa.int64()
    assert result.schema.field("score").type == pa.float64()
    assert result.to_pylist() == [
        {"location": {"north": 2, "z": 0}, "score": 1.5, "key": 1, "flag": "none", "amount": Decimal("1.25"), "u": None},
        {"location": None, "score": None, "key": 2, "flag": "none", "amount": None, "u": None},
    ]
    assert result.schema.field("key").metadata[b"PARQUET:field_id"] == b"1"
    filtered = table.scan(row_filter=col("location.north") == 2, selected_fields=("key",)).to_arrow()
    assert filtered.to_pylist() == [{"key": 1}]


def test_reading_only_missing_columns_still_counts_rows(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    data = table.write_data([(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    table.commit_and_write(data=[data], deletes=[table.write_positions([(data.file_path, 1)])])
    evolved = Schema(*SCHEMA.fields, NestedField(4, "added", StringType()))
    table.metadata = table.metadata.add_schema(evolved, 4, make_current=True)
    result = table.scan(selected_fields=("added",)).to_arrow()
    assert result.num_rows == 2 and result.column("added").null_count == 2


def test_unsupported_and_malformed_files_are_named(tmp_path: Any) -> None:
    table = _Table(tmp_path)
    avro = DataFile(DataFileContent.DATA, f"{table.location}/x.avro", FileFormat.AVRO, (), 1, 1)
    with pytest.raises(ValidationError, match="x.avro.*AVRO"):
        list(read_tasks(table.io, [FileScanTask(avro)], SCHEMA))
    path = f"{table.location}/no-ids.parquet"
    size = _write_parquet(table.io, path, pa.table({"id": pa.array([1], pa.int64())}))
    no_ids = DataFile(DataFileContent.DATA, path, FileFormat.PARQUET, (), 1, size)
    with pytest.raises(MalformedFileError, match="no-ids.parquet"):
        list(read_tasks(table.io, [FileScanTask(no_ids)], SCHEMA))
    garbage = f"{table.location}/garbage.parquet"
    table.io.write_bytes(garbage, b"not parquet at all")
    with pytest.raises(MalformedFileError, match="garbage.parquet"):
        garbage_file = DataFile(DataFileContent.DATA, garbage, FileFormat.PARQUET, (), 1, 18)
        list(read_tasks(table.io, [FileScanTask(garbage_file)], SCHEMA))


# --------------------------------------------------------------------------
# Property: the reader agrees with a plain Python model
# --------------------------------------------------------------------------

_row = st.tuples(st.integers(0, 30), st.sampled_from(["a", "b", None]), st.none() | st.integers(0, 4))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(_row, min_size=1, max_size=40),
    positions=st.sets(st.integers(0, 39), max_size=10),
    deleted_ids=st.lists(st.integers(0, 30), max_size=6),
    deleted_pairs=st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.none() | st.integers(0, 4)), max_size=4),
    value_floor=st.none() | st.integers(0, 4),
    batch_size=st.integers(1, 16),
    max_keys=st.integers(1, 8),
)
def test_reader_agrees_with_a_python_model(
    tmp_path_factory: Any,
    rows: list[tuple],
    positions: set[int],
    deleted_ids: list[int],
    deleted_pairs: list[tuple],
    value_floor: Optional[int],
    batch_size: int,
    max_keys: int,
) -> None:
    table = _Table(tmp_path_factory.mktemp("model"))
    data = table.write_data(rows)
    positions = {p for p in positions if p < len(rows)}
    deletes = [table.write_positions([(data.file_path, p) for p in sorted(positions)])] if positions else []
    table.commit_and_write(data=[data], deletes=deletes)
    eq = []
    if deleted_ids:
        eq.append(table.write_equality([1], [(i,) for i in deleted_ids]))
    if deleted_pairs:
        eq.append(table.write_equality([2, 3], deleted_pairs))
    table.commit_and_write(deletes=eq)
    row_filter: BooleanExpression = ALWAYS_TRUE if value_floor is None else col("value") >= value_floor
    expected = [
        r
        for pos, r in enumerate(rows)
        if pos not in positions
        and r[0] not in deleted_ids
        and (r[1], r[2]) not in deleted_pairs
        and (value_floor is None or (r[2] is not None and r[2] >= value_floor))
    ]
    scan = table.scan(row_filter=row_filter)
    batches = read_tasks(
        table.io, scan.plan_files(), table.schema, row_filter, batch_size=batch_size, max_equality_keys=max_keys
    )
    result = pa.Table.from_batches(list(batches), schema=schema_to_arrow(table.schema))
    assert [tuple(r.values()) for r in result.to_pylist()] == expected


# --------------------------------------------------------------------------
# read_ahead: the next batch is produced on a helper thread
# --------------------------------------------------------------------------


def test_read_ahead_keeps_order_and_produces_on_another_thread():
    produced_on: list[str] = []

    def items():
        for i in range(5):
            produced_on.append(threading.current_thread().name)
            yield i

    assert list(read_ahead(items())) == [0, 1, 2, 3, 4]
    assert produced_on and all(name.startswith("floe-read-ahead") for name in produced_on)


def test_read_ahead_raises_an_error_in_the_place_of_its_item():
    def items():
        yield 1
        raise MalformedFileError("f.parquet", None, "broken page")

    got = read_ahead(items())
    assert next(got) == 1
    with pytest.raises(MalformedFileError, match="broken page"):
        next(got)


def test_read_ahead_closed_early_closes_its_source():
    closed: list[bool] = []

    def items():
        try:
            for i in range(100):
                yield i
        finally:
            closed.append(True)

    got = read_ahead(items())
    assert next(got) == 0
    got.close()
    assert closed == [True]
