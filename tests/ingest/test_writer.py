"""ingest.tasks.writer: the executor-side write task, run directly on Arrow batches (no Spark).

Each test commits what the task wrote through the real exactly-once commit
into a real SQLite catalog and reads the table back with Floe's reader (and,
for global equality deletes, with Iceberg's Java runtime).
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit.catalog.base import Catalog, LoadedTable
from commit.catalog.sql.catalog import SqlCatalog
from commit.batch_commit import commit_batch
from ingest.tasks.changes import OpField
from ingest.tasks.decode_records import OP_COLUMN, DecodeSpec
from ingest.job import TableSpec
from ingest.driver.table_setup import ensure_table
from ingest.tasks.transport import from_transport, to_transport
from ingest.tasks.writer import WriteTask, write_files
from ingest.tasks.output import BatchFiles, read_written
from table.arrow_schema import cast_to_schema, type_to_arrow
from table.io import FileIO
from table.manifest import DataFileContent
from table.scan import TableScan
from table.schema import Schema
from table.types import (
    DecimalType,
    FixedType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=True),
    NestedField(3, "ts", TimestamptzType()),
    identifier_field_ids=[1],
)
DAY0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
UPSERT, DELETE = 0, 1


def transport_batch(schema: Schema, rows: Sequence[dict[str, Any]], ops: Sequence[int]) -> pa.RecordBatch:
    """Rows as the decoded frame carries them: transport types plus ``_floe_op``."""
    columns = []
    for field in schema.fields:
        values = pa.array([r.get(field.name) for r in rows], type_to_arrow(field.field_type))
        columns.append(to_transport(values, field.field_type))
    columns.append(pa.array(ops, pa.int8()))
    return pa.RecordBatch.from_arrays(columns, names=[f.name for f in schema.fields] + [OP_COLUMN])


def upserted(ids, name: str = "v", day: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"{name}{i}", "ts": DAY0 + dt.timedelta(days=day, seconds=i)} for i in ids]


def deleted(ids) -> list[dict[str, Any]]:
    return [{"id": i} for i in ids]


class Table:
    """A real table in a SQLite catalog, created the way the ingest job creates it."""

    def __init__(self, tmp: Path, spec: TableSpec) -> None:
        self.catalog = SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse"))
        self.spec = spec
        self.batches = 0
        ensure_table(self.catalog, spec)

    @property
    def loaded(self) -> LoadedTable:
        return self.catalog.load_table(self.spec.identifier)

    def task(self, **overrides: Any) -> WriteTask:
        loaded = self.loaded
        ids = (1,) if self.spec.mode == "upsert" else ()
        task = WriteTask.for_table(loaded.metadata, loaded.io, ids, clustered=False, sorted_by_order=False)
        return WriteTask(**{**vars(task), **overrides})

    def write(self, batches: Sequence[pa.RecordBatch], **overrides: Any) -> BatchFiles:
        out = list(write_files(iter(batches), self.task(**overrides)))
        return read_written(pa.Table.from_batches(out))

    def commit(self, written: BatchFiles) -> None:
        offsets = {"t": {0: (self.batches * 10, self.batches * 10 + 10)}}
        commit_batch(self.catalog, self.spec.identifier, "writer-1", self.batches, offsets,
                     written.data_files, written.delete_files, fast_append=self.spec.mode == "append")
        self.batches += 1

    def rows(self) -> dict[int, dict[str, Any]]:
        loaded = self.loaded
        table = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()
        return {r["id"]: r for r in table.to_pylist()}


def table_spec(partition=(), mode: str = "upsert", schema: Schema = SCHEMA, **kwargs: Any) -> TableSpec:
    """These tests write equality deletes (ingest.tasks.writer's own path): the table says so."""
    decode = DecodeSpec(schema, mode=mode, op_field=OpField() if mode == "upsert" else None)
    kwargs.setdefault("properties", {"floe.upsert.delete-strategy": "equality"} if mode == "upsert" else {})
    return TableSpec("db.t", decode, partition=partition, **kwargs)


def expected_rows(rows: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in rows}


def test_upserts_write_final_images_and_partitioned_deletes(tmp_path: Path):
    table = Table(tmp_path, table_spec((("bucket[4]", "id"),)))
    table.commit(table.write([transport_batch(SCHEMA, upserted(range(200)), [UPSERT] * 200)]))
    changes = upserted(range(50), "w") + deleted(range(50, 100)) + upserted(range(200, 220), "x")
    ops = [UPSERT] * 50 + [DELETE] * 50 + [UPSERT] * 20
    written = table.write([transport_batch(SCHEMA, changes, ops)])
    assert written.deleted_keys == 50
    assert written.records(DataFileContent.EQUALITY_DELETES) == 120, "every touched key is deleted"
    assert all(f.equality_ids == [1] and f.spec_id == 0 for f in written.delete_files)
    spec = table.loaded.metadata.spec()
    for delete_file in written.delete_files:  # each key's delete sits in its own row's partition
        keys = pq.read_table(delete_file.file_path).column("id").to_pylist()
        assert {spec.partition_values({1: k}, SCHEMA) for k in keys} == {delete_file.partition}
    table.commit(written)

    expected = expected_rows(upserted(range(50), "w") + upserted(range(100, 200)) + upserted(range(200, 220), "x"))
    assert table.rows() == expected


@pytest.mark.oracle
def test_global_deletes_when_the_key_does_not_determine_the_partition(tmp_path: Path, iceberg_oracle):
    table = Table(tmp_path, table_spec((("day", "ts"),)))
    unpartitioned = [s for s in table.loaded.metadata.partition_specs if not s.fields]
    assert len(unpartitioned) == 1 and table.loaded.metadata.default_spec_id == 0
    table.commit(table.write([transport_batch(SCHEMA, upserted(range(100), day=0), [UPSERT] * 100)]))
    # ids 0..29 move to the next day; 30..59 are deleted by key alone
    moved = upserted(range(30), "moved", day=1)
    written = table.write([transport_batch(SCHEMA, moved + deleted(range(30, 60)), [UPSERT] * 30 + [DELETE] * 30)])
    assert {(f.spec_id, f.partition) for f in written.delete_files} == {(unpartitioned[0].spec_id, ())}
    table.commit(written)

    expected = expected_rows(moved + upserted(range(60, 100), day=0))
    assert table.rows() == expected
    java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=table.loaded.metadata_location)
    assert {r["id"]: r for r in java.to_pylist()} == expected


def test_files_roll_at_the_target_file_size(tmp_path: Path):
    target = 64 * 1024
    table = Table(tmp_path, table_spec(mode="append", properties={"write.target-file-size-bytes": str(target)}))
    rows = [{"id": i, "name": uuid.uuid4().hex * 4, "ts": DAY0} for i in range(40_000)]
    batches = [transport_batch(SCHEMA, rows[i:i + 5000], [UPSERT] * 5000) for i in range(0, 40_000, 5000)]
    written = table.write(batches)
    sizes = [f.file_size_in_bytes for f in written.data_files]
    assert len(sizes) >= 10, sizes
    assert all(size < 2 * target for size in sizes), sizes
    assert sum(f.record_count for f in written.data_files) == 40_000
    assert written.delete_files == []
    table.commit(written)
    assert len(table.rows()) == 40_000


def test_append_files_carry_their_partition_values(tmp_path: Path):
    table = Table(tmp_path, table_spec((("day", "ts"), ("bucket[8]", "id")), mode="append"))
    rows = [{"id": i, "name": "n", "ts": DAY0 + dt.timedelta(hours=7 * i)} for i in range(300)]
    written = table.write([transport_batch(SCHEMA, rows, [UPSERT] * 300)])
    spec = table.loaded.metadata.spec()
    for data_file in written.data_files:
        stored = pq.read_table(data_file.file_path).to_pylist()
        partitions = {spec.partition_values({1: r["id"], 3: int(r["ts"].timestamp() * 1e6)}, SCHEMA) for r in stored}
        assert partitions == {data_file.partition}
    assert sum(f.record_count for f in written.data_files) == 300
    assert len({f.partition[0] for f in written.data_files}) == 88  # 300 rows, 7 h apart: 88 days


def test_clustered_input_closes_each_partition_once_it_is_done(tmp_path: Path):
    table = Table(tmp_path, table_spec((("day", "ts"),), mode="append"))
    days = [upserted(range(d * 100, d * 100 + 100), day=d) for d in range(5)]
    batches = [transport_batch(SCHEMA, rows[:50], [UPSERT] * 50) for rows in days]
    batches += [transport_batch(SCHEMA, rows[50:], [UPSERT] * 50) for rows in days]  # not clustered
    assert len(table.write(batches, clustered=False).data_files) == 5
    clustered = [transport_batch(SCHEMA, rows, [UPSERT] * 100) for rows in days]
    assert len(table.write(clustered, clustered=True).data_files) == 5


def test_a_failed_task_deletes_every_file_it_wrote(tmp_path: Path):
    table = Table(tmp_path, table_spec((("bucket[4]", "id"),)))
    good = transport_batch(SCHEMA, upserted(range(100)), [UPSERT] * 100)
    bad = transport_batch(SCHEMA, [{"id": 1000, "name": None}], [UPSERT])  # name is required
    with pytest.raises(Exception, match="name"):
        table.write([good, bad])
    data_dir = Path(table.loaded.metadata.location) / "data"
    assert not data_dir.exists() or not [p for p in data_dir.rglob("*") if p.is_file()]


def test_transport_types_round_trip():
    schema = Schema(
        NestedField(1, "u", UUIDType()),
        NestedField(2, "f", FixedType(3)),
        NestedField(3, "t", TimeType()),
        NestedField(4, "s", StructType(NestedField(5, "u2", UUIDType()), NestedField(6, "n", IntegerType()))),
        NestedField(7, "l", ListType(8, TimeType(), element_required=False)),
        NestedField(9, "m", MapType(10, StringType(), 11, FixedType(2))),
        NestedField(12, "d", DecimalType(9, 2)),
    )
    u = uuid.uuid4()
    rows = [
        {"u": u.bytes, "f": b"abc", "t": dt.time(1, 2, 3, 4), "s": {"u2": u.bytes, "n": 5},
         "l": [dt.time(0, 0, 1), None], "m": [("k", b"xy")], "d": decimal.Decimal("1.25")},
        {"u": None, "f": None, "t": None, "s": None, "l": None, "m": None, "d": None},
    ]
    original = cast_to_schema(pa.Table.from_pylist(rows, _arrow(schema)), schema)
    transported = {f.name: to_transport(original.column(f.name).combine_chunks(), f.field_type) for f in schema.fields}
    assert not any(pa.types.is_fixed_size_binary(a.type) or pa.types.is_time(a.type) for a in transported.values())
    back = pa.table({f.name: from_transport(transported[f.name], f.field_type) for f in schema.fields})
    assert cast_to_schema(back, schema).to_pylist() == original.to_pylist()


def _arrow(schema: Schema) -> Optional[pa.Schema]:
    fields = []
    for field in schema.fields:
        t = type_to_arrow(field.field_type)
        fields.append(pa.field(field.name, _storage(t)))
    return pa.schema(fields)


def _storage(t: pa.DataType) -> pa.DataType:
    if isinstance(t, pa.BaseExtensionType):
        return t.storage_type
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _storage(f.type)) for f in t])
    return t
