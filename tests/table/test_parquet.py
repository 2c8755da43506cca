"""Parquet data file writer: file layout, metrics, rolling and partitioned writes."""

from __future__ import annotations

import datetime
import json
import os
import random
import re
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from table.arrow_schema import FIELD_ID_KEY, cast_to_schema
from table.conversions import from_bytes
from table.errors import SchemaError, ValidationError
from table.io import FileIO
from table.manifest import DataFileContent, FileFormat
from table.parquet.column_stats import collect_metrics, count_nans
from table.parquet.partitioned import write_partitioned
from table.parquet.writer import DataFileWriter, FileNameFactory
from table.partitioning import PartitionField, PartitionSpec, split_by_partition
from table.schema import Schema
from table.transforms import parse_transform
from table.types import (
    DecimalType,
    DoubleType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "score", DoubleType()),
    NestedField(4, "ts", TimestamptzType()),
    NestedField(5, "amount", DecimalType(10, 2)),
    NestedField(6, "tags", ListType(7, StringType(), element_required=False)),
    NestedField(8, "loc", StructType(NestedField(9, "city", StringType()))),
)
UNPARTITIONED = PartitionSpec(0, ())
BASE_TS = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z in micros


def make_batch(start: int, n: int, seed: int = 0) -> pa.RecordBatch:
    rnd = random.Random(seed + start)
    rows = {
        "id": list(range(start, start + n)),
        "name": [None if i % 7 == 0 else f"name-{rnd.randrange(10**9)}" for i in range(n)],
        "score": [float("nan") if i % 11 == 0 else rnd.random() for i in range(n)],
        "ts": pa.array([BASE_TS + i * 3_600_000_000 for i in range(start, start + n)], pa.int64()).cast(
            pa.timestamp("us", tz="UTC")
        ),
        "amount": [Decimal(rnd.randrange(-10**6, 10**6)) / 100 for _ in range(n)],
        "tags": [[f"t{i % 3}"] if i % 5 else None for i in range(n)],
        "loc": [{"city": ["oslo", "rome", None][i % 3]} for i in range(n)],
    }
    return cast_to_schema(pa.record_batch(rows), SCHEMA)


def local(tmp_path) -> tuple[FileIO, str]:
    return FileIO.for_location(str(tmp_path)), str(tmp_path / "tbl" / "data")


def test_writes_readable_file_with_ids_and_exact_metadata(tmp_path):
    io, prefix = local(tmp_path)
    batch = make_batch(0, 100)
    writer = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, ())
    writer.write(batch)
    [data_file] = writer.close()

    assert data_file.content == DataFileContent.DATA and data_file.file_format == FileFormat.PARQUET
    assert data_file.partition == () and data_file.spec_id == 0 and data_file.equality_ids is None
    assert data_file.file_path.startswith(prefix + "/")
    assert data_file.file_size_in_bytes == os.path.getsize(data_file.file_path)
    assert data_file.record_count == 100

    table = pq.ParquetFile(data_file.file_path).read()
    assert table.schema.remove_metadata() == batch.schema
    for name in batch.schema.names:  # NaN != NaN, so compare scores as text
        expected, got = batch.column(name), table.column(name).combine_chunks()
        if name == "score":
            expected, got = expected.cast(pa.string()), got.cast(pa.string())
        assert got.equals(expected), name
    parquet_file = pq.ParquetFile(data_file.file_path)
    arrow_schema = parquet_file.schema_arrow
    assert int(arrow_schema.field("tags").type.value_field.metadata[FIELD_ID_KEY]) == 7
    assert int(arrow_schema.field("loc").type.field("city").metadata[FIELD_ID_KEY]) == 9
    md = parquet_file.metadata
    assert json.loads(md.metadata[b"iceberg.schema"])["fields"][0]["id"] == 1
    ts_type = md.schema.column(3).logical_type.to_json()
    assert '"isAdjustedToUTC": true' in ts_type and '"timeUnit": "microseconds"' in ts_type
    assert md.schema.column(4).physical_type == "INT64"  # decimal(10,2) as int64, as Java writes it
    assert md.row_group(0).column(0).compression == "ZSTD"

    # Metrics against values computed from the data itself.
    assert data_file.value_counts[1] == 100
    assert data_file.null_value_counts[2] == batch.column("name").null_count
    assert data_file.nan_value_counts == {3: pc.sum(pc.is_nan(batch.column("score"))).as_py()}
    assert from_bytes(LongType(), data_file.lower_bounds[1]) == 0
    assert from_bytes(LongType(), data_file.upper_bounds[1]) == 99
    real_scores = [s for s in batch.column("score").to_pylist() if s == s]
    assert from_bytes(DoubleType(), data_file.lower_bounds[3]) == min(real_scores)
    assert from_bytes(TimestamptzType(), data_file.upper_bounds[4]) == BASE_TS + 99 * 3_600_000_000
    assert from_bytes(StringType(), data_file.lower_bounds[9]) == "oslo"
    assert 7 not in data_file.lower_bounds  # list elements get no bounds
    assert data_file.split_offsets == [4]


def test_rolls_to_new_files_at_target_size(tmp_path):
    io, prefix = local(tmp_path)
    target = 64 * 1024
    writer = DataFileWriter(
        io, prefix, SCHEMA, UNPARTITIONED, (), target_file_size_bytes=target, row_group_size=2_000
    )
    batches = [make_batch(i * 5_000, 5_000, seed=i) for i in range(4)]
    for b in batches:
        writer.write(b)
    files = writer.close()
    assert len(files) >= 3
    assert sum(f.record_count for f in files) == 20_000
    assert len({f.file_path for f in files}) == len(files)
    for f in files[:-1]:
        # Closed once the estimate reached the target; never far beyond it.
        assert target * 0.5 <= f.file_size_in_bytes <= target * 2, f.file_size_in_bytes
    ids = [i for f in files for i in pq.ParquetFile(f.file_path).read().column("id").to_pylist()]
    assert ids == list(range(20_000))
    for f in files:
        md = pq.read_metadata(f.file_path)
        assert md.num_rows == f.record_count
        assert f.split_offsets == sorted(f.split_offsets) and len(f.split_offsets) == md.num_row_groups
        assert f == _same_metrics(f, md)


def _same_metrics(data_file, md):
    """The data file rebuilt from its footer: metrics must be what the footer says."""
    table = pq.ParquetFile(data_file.file_path).read()
    metrics = collect_metrics(md, SCHEMA, path=data_file.file_path, nan_value_counts=count_nans(table))
    assert metrics.value_counts == data_file.value_counts
    assert metrics.null_value_counts == data_file.null_value_counts
    assert metrics.nan_value_counts == data_file.nan_value_counts
    assert metrics.lower_bounds == data_file.lower_bounds and metrics.upper_bounds == data_file.upper_bounds
    return data_file


def _written_in_batches(tmp_path, batches: int, rows: int, **options):
    """The one data file a writer makes of ``batches`` consecutive batches of ``rows`` rows."""
    io, prefix = local(tmp_path)
    writer = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, (), **options)
    for i in range(batches):
        writer.write(make_batch(i * rows, rows))
    [data_file] = writer.close()
    return data_file


def test_row_groups_and_split_offsets(tmp_path):
    data_file = _written_in_batches(tmp_path, 5, 1_000, row_group_size=1_000)
    md = pq.read_metadata(data_file.file_path)
    assert md.num_row_groups == 5
    assert len(data_file.split_offsets) == 5 and data_file.split_offsets[0] == 4
    assert data_file.split_offsets == sorted(data_file.split_offsets)


def test_small_batches_are_buffered_into_row_groups(tmp_path):
    data_file = _written_in_batches(tmp_path, 50, 10, row_group_size=100)
    assert pq.read_metadata(data_file.file_path).num_row_groups == 5


def test_accepts_tables_and_empty_writer_writes_nothing(tmp_path):
    io, prefix = local(tmp_path)
    writer = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, ())
    assert writer.close() == []
    assert not os.path.exists(prefix)
    writer = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, ())
    writer.write(pa.Table.from_batches([make_batch(0, 3), make_batch(3, 2)]))
    writer.write(make_batch(5, 0))
    assert [f.record_count for f in writer.close()] == [5]
    assert writer.close()[0].record_count == 5  # closing again returns the same files
    with pytest.raises(ValidationError, match="closed"):
        writer.write(make_batch(0, 1))


def test_file_names_are_unique_and_follow_the_pattern(tmp_path):
    io, prefix = local(tmp_path)
    factory = FileNameFactory("00007-3")
    files = []
    for _ in range(3):
        writer = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, (), file_name_factory=factory)
        writer.write(make_batch(0, 5))
        files += writer.close()
    names = [os.path.basename(f.file_path) for f in files]
    pattern = re.compile(r"^00007-3-[0-9a-f-]{36}-(\d{5})\.parquet$")
    assert [pattern.match(n).group(1) for n in names] == ["00001", "00002", "00003"]
    assert FileNameFactory()() != FileNameFactory()()


def test_never_overwrites_an_existing_file(tmp_path):
    io, prefix = local(tmp_path)
    first = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, (), file_name_factory=lambda: "same.parquet")
    first.write(make_batch(0, 5))
    [existing] = first.close()
    before = open(existing.file_path, "rb").read()
    second = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, (), file_name_factory=lambda: "same.parquet")
    with pytest.raises(ValidationError, match="refusing to overwrite"):
        second.write(make_batch(0, 5))
    assert open(existing.file_path, "rb").read() == before


def test_rejects_unconformed_batches(tmp_path):
    io, prefix = local(tmp_path)
    writer = DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, ())
    with pytest.raises(SchemaError, match="cast_to_schema"):
        writer.write(pa.record_batch({"id": pa.array([1], pa.int32())}))


def test_relabels_batches_without_field_ids(tmp_path):
    io, prefix = local(tmp_path)
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    writer = DataFileWriter(io, prefix, schema, UNPARTITIONED, ())
    plain = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    writer.write(pa.RecordBatch.from_arrays([pa.array([1, 2])], schema=plain))
    [data_file] = writer.close()
    assert pq.ParquetFile(data_file.file_path).schema_arrow.field("id").metadata[FIELD_ID_KEY] == b"1"


def test_abort_deletes_everything_written(tmp_path):
    io, prefix = local(tmp_path)
    with pytest.raises(RuntimeError):
        with DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, (), target_file_size_bytes=10_000) as writer:
            writer.write(make_batch(0, 3_000))
            writer.write(make_batch(3_000, 10))
            raise RuntimeError("boom")
    leftovers = [n for _, _, names in os.walk(tmp_path) for n in names]
    assert leftovers == []


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"target_file_size_bytes": 0}, "target_file_size_bytes must be positive"),
        ({"content": DataFileContent.EQUALITY_DELETES}, "need equality_ids"),
        ({"equality_ids": [1]}, "only for equality delete files"),
        ({"content": DataFileContent.POSITION_DELETES, "sort_order_id": 1}, "sorted by file and position"),
    ],
)
def test_invalid_writer_arguments(tmp_path, kwargs, message):
    io, prefix = local(tmp_path)
    with pytest.raises(ValidationError, match=message):
        DataFileWriter(io, prefix, SCHEMA, UNPARTITIONED, (), **kwargs)


# ------------------------------------------------------------------ partitioned


def spec_of(*fields: tuple[int, str, str]) -> PartitionSpec:
    partition_fields = (
        PartitionField(src, 1000 + i, parse_transform(t), name) for i, (src, t, name) in enumerate(fields)
    )
    return PartitionSpec(3, tuple(partition_fields))


def test_write_partitioned_routes_rows(tmp_path):
    io = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "tbl")
    spec = spec_of((4, "day", "ts_day"), (9, "identity", "city"))
    batches = [make_batch(0, 60), make_batch(60, 40)]
    files = write_partitioned(io, location, SCHEMA, spec, batches)
    assert sum(f.record_count for f in files) == 100
    partitions = {f.partition for f in files}
    assert len(partitions) == len(files)  # one file per partition here
    for f in files:
        day, city = f.partition
        assert isinstance(day, int) and f.spec_id == 3
        date = datetime.date(1970, 1, 1) + datetime.timedelta(days=day)
        assert f"/tbl/data/ts_day={date}/city=" in f.file_path
        table = pq.ParquetFile(f.file_path).read()
        micros = table.column("ts").cast(pa.int64()).to_pylist()
        assert {t // 86_400_000_000 for t in micros} == {day}
        assert {loc["city"] for loc in table.column("loc").to_pylist()} == {city}
    assert any(f.partition[1] is None and "city=null" in f.file_path for f in files)


def test_split_by_partition_keeps_row_order_and_types(tmp_path):
    schema = Schema(
        NestedField(1, "u", UUIDType()),
        NestedField(2, "t", TimestampType()),
        NestedField(3, "n", LongType()),
    )
    import uuid

    u1, u2 = uuid.UUID(int=1), uuid.UUID(int=2)
    batch = cast_to_schema(
        pa.record_batch(
            {
                "u": pa.array([u1.bytes, u2.bytes, u1.bytes, None], pa.binary(16)),
                "t": pa.array([5, 6, 7, 8], pa.timestamp("us")),
                "n": pa.array([10, 11, 12, 13]),
            }
        ),
        schema,
    )
    spec = spec_of((1, "identity", "u"), (2, "identity", "t"), (3, "bucket[1]", "nb"))
    parts = dict(split_by_partition(batch, schema, spec))
    assert set(parts) == {(u1, 5, 0), (u2, 6, 0), (u1, 7, 0), (None, 8, 0)}
    spec = spec_of((1, "identity", "u"))
    parts = dict(split_by_partition(batch, schema, spec))
    assert parts[(u1,)].column("n").to_pylist() == [10, 12]
    assert parts[(None,)].column("n").to_pylist() == [13]


def test_write_partitioned_unpartitioned_and_rolling(tmp_path):
    io = FileIO.for_location(str(tmp_path))
    batches = [make_batch(0, 8_000)]
    files = write_partitioned(
        io, str(tmp_path / "tbl"), SCHEMA, UNPARTITIONED, batches, target_file_size_bytes=40_000
    )
    assert len(files) > 1 and all(f.partition == () for f in files)
    assert sum(f.record_count for f in files) == 8_000
    assert all(os.path.dirname(f.file_path) == str(tmp_path / "tbl" / "data") for f in files)


def test_write_partitioned_cleans_up_on_failure(tmp_path):
    io = FileIO.for_location(str(tmp_path))

    def batches():
        yield make_batch(0, 10)
        yield pa.record_batch({"bad": pa.array([1])})

    with pytest.raises(SchemaError):
        write_partitioned(io, str(tmp_path / "tbl"), SCHEMA, spec_of((9, "identity", "city")), batches())
    assert [n for _, _, names in os.walk(tmp_path) for n in names] == []


def test_an_aborted_fan_out_deletes_closed_partitions_too_and_reports_no_file(tmp_path):
    from table.parquet.partitioned import PartitionedWriter

    io = FileIO.for_location(str(tmp_path))
    spec = spec_of((9, "identity", "city"))
    writer = PartitionedWriter(SCHEMA, spec, lambda p: DataFileWriter(io, str(tmp_path / "data"), SCHEMA, spec, p))
    touched = writer.write(make_batch(0, 50))
    writer.close_except(set(list(touched)[1:]))  # one partition finished, the others still open
    assert [n for _, _, names in os.walk(tmp_path) for n in names], "a closed partition wrote its file"
    writer.abort()
    assert [n for _, _, names in os.walk(tmp_path) for n in names] == []
    assert writer.close() == []
    partition = next(iter(split_by_partition(make_batch(0, 5), SCHEMA, spec)))[0]
    assert writer.write_partition(partition, make_batch(0, 5)) == 0, "an aborted writer counts rows afresh"
    writer.abort()


class _AbortFails:
    """A partition writer whose files cannot be deleted (the store refused)."""

    def write(self, data) -> None:  # type: ignore[no-untyped-def]
        pass

    def close(self) -> list:
        return []

    def abort(self) -> None:
        raise OSError("delete refused")


def test_one_failing_abort_does_not_leave_the_other_partitions_files(tmp_path):
    from table.parquet.partitioned import PartitionedWriter

    io = FileIO.for_location(str(tmp_path))
    spec = spec_of((9, "identity", "city"))
    opened = iter([_AbortFails()])
    writer = PartitionedWriter(SCHEMA, spec, lambda p: next(opened, None) or DataFileWriter(
        io, str(tmp_path / "data"), SCHEMA, spec, p))
    assert len(writer.write(make_batch(0, 50))) > 1
    with pytest.raises(OSError, match="delete refused"):
        writer.abort()
    assert [n for _, _, names in os.walk(tmp_path) for n in names] == []
