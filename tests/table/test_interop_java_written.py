"""Interop 3: Floe reads tables that Iceberg's Java runtime writes.

Merge-on-read DELETE, UPDATE and MERGE in Spark produce position delete
files; equality deletes are written through Iceberg's Java API. Floe's reader
must return exactly the rows Spark returns, after schema evolution too.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from table.io import FileIO
from table.metadata_json import read_table_metadata
from table.scan import TableScan
from table.transforms import BucketTransform
from table.types import LongType
from tests.support.rows import normalize

pytestmark = [pytest.mark.oracle]

_names = (f"java_t{i}" for i in itertools.count())
MOR = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)


@pytest.fixture(scope="module")
def java_catalog(iceberg_oracle, tmp_path_factory) -> str:
    warehouse: Path = tmp_path_factory.mktemp("java_written")
    iceberg_oracle.conf(
        **{
            "spark.sql.catalog.jw": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.jw.type": "hadoop",
            "spark.sql.catalog.jw.warehouse": str(warehouse),
        }
    )
    iceberg_oracle.execute("CREATE NAMESPACE IF NOT EXISTS jw.db")
    return "jw.db"


def _create_and_fill(oracle, table: str, partitioned_by: str) -> None:
    partitioning = f"PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    oracle.execute(
        f"CREATE TABLE {table} (id BIGINT NOT NULL, category STRING, amount DECIMAL(10,2), ts TIMESTAMP, "
        f"tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>) USING iceberg {partitioning} TBLPROPERTIES ({MOR})"
    )
    for start in range(0, 1200, 400):
        oracle.execute(
            f"INSERT INTO {table} SELECT id, element_at(array('a','b','c', NULL), CAST(id % 4 + 1 AS INT)), "
            f"CAST(id * 1.25 AS DECIMAL(10,2)), TIMESTAMP '2026-03-01 00:00:00' + make_interval(0,0,0,0, CAST(id % 72 AS INT)), "
            f"array(CAST(id AS STRING), 'x'), map('k', id) "
            f"FROM range({start}, {start + 400})"
        )


def _row_level_changes(oracle, table: str) -> None:
    oracle.execute(f"DELETE FROM {table} WHERE id % 7 = 0")
    oracle.execute(f"UPDATE {table} SET category = 'updated', amount = amount + 1 WHERE id % 5 = 1")
    oracle.execute(
        f"MERGE INTO {table} t USING (SELECT id, id % 3 AS op FROM range(1000, 1300)) s ON t.id = s.id "
        f"WHEN MATCHED AND s.op = 0 THEN DELETE "
        f"WHEN MATCHED AND s.op = 1 THEN UPDATE SET t.category = 'merged' "
        f"WHEN NOT MATCHED THEN INSERT (id, category, amount, ts, tags, attrs) "
        f"VALUES (s.id, 'inserted', NULL, TIMESTAMP '2026-03-05 12:00:00', NULL, NULL)"
    )


def _assert_floe_reads_what_spark_reads(oracle, table: str) -> int:
    location = oracle.call("tests.support.oracle_ops:current_metadata_location", table=table)
    io = FileIO.for_location(location)
    metadata = read_table_metadata(io, location)
    schema = metadata.schema()
    spark_rows = oracle.sql(f"SELECT * FROM {table}").to_pylist()
    floe_rows = TableScan(io, metadata).to_arrow().to_pylist()
    assert normalize(floe_rows, schema) == normalize(spark_rows, schema)
    return len(spark_rows)


def _delete_kinds(oracle, table: str) -> set[int]:
    return set(oracle.sql(f"SELECT content FROM {table}.delete_files").column("content").to_pylist())


@pytest.mark.parametrize("partitioned_by", ["", "days(ts), bucket(4, id)"])
def test_floe_reads_java_merge_on_read_deletes_updates_and_merges(iceberg_oracle, java_catalog, partitioned_by):
    table = f"{java_catalog}.{next(_names)}"
    _create_and_fill(iceberg_oracle, table, partitioned_by)
    _row_level_changes(iceberg_oracle, table)
    assert _delete_kinds(iceberg_oracle, table) == {1}, "Spark should have written position deletes only"
    assert 0 < _assert_floe_reads_what_spark_reads(iceberg_oracle, table) < 1300


def test_floe_reads_java_tables_after_schema_evolution(iceberg_oracle, java_catalog):
    table = f"{java_catalog}.{next(_names)}"
    _create_and_fill(iceberg_oracle, table, "bucket(4, id)")
    _row_level_changes(iceberg_oracle, table)
    iceberg_oracle.execute(f"ALTER TABLE {table} ADD COLUMN note STRING")
    iceberg_oracle.execute(f"ALTER TABLE {table} RENAME COLUMN category TO kind")
    iceberg_oracle.execute(f"ALTER TABLE {table} DROP COLUMN tags")
    iceberg_oracle.execute(f"INSERT INTO {table} (id, kind, amount, ts, attrs, note) VALUES (5000, 'new', 1.00, TIMESTAMP '2026-03-02 00:00:00', NULL, 'hello')")
    iceberg_oracle.execute(f"UPDATE {table} SET note = 'late', kind = 'renamed' WHERE id % 10 = 2")
    iceberg_oracle.execute(f"DELETE FROM {table} WHERE id % 11 = 3")
    _assert_floe_reads_what_spark_reads(iceberg_oracle, table)


def test_floe_reads_java_api_equality_deletes_unpartitioned(iceberg_oracle, java_catalog):
    table = f"{java_catalog}.{next(_names)}"
    _create_and_fill(iceberg_oracle, table, "")
    iceberg_oracle.call("tests.support.oracle_ops:write_equality_deletes", table=table, column="id", values=list(range(0, 1200, 3)))
    iceberg_oracle.call("tests.support.oracle_ops:write_equality_deletes", table=table, column="category", values=["b"])
    iceberg_oracle.execute(f"INSERT INTO {table} VALUES (3, 'b', 1.00, TIMESTAMP '2026-03-01 00:00:00', NULL, NULL)")
    assert _delete_kinds(iceberg_oracle, table) == {2}
    count = _assert_floe_reads_what_spark_reads(iceberg_oracle, table)
    assert count == 1 + sum(1 for i in range(1200) if i % 3 and i % 4 != 1)


def test_floe_reads_java_api_equality_deletes_partitioned(iceberg_oracle, java_catalog):
    table = f"{java_catalog}.{next(_names)}"
    _create_and_fill(iceberg_oracle, table, "bucket(4, id)")
    doomed = list(range(0, 1200, 3))
    bucket = BucketTransform(4)
    for b in range(4):
        ids = [i for i in doomed if bucket.apply(LongType(), i) == b]
        iceberg_oracle.call(
            "tests.support.oracle_ops:write_equality_deletes", table=table, column="id", values=ids, partition_values=[b]
        )
    _row_level_changes(iceberg_oracle, table)
    assert _delete_kinds(iceberg_oracle, table) == {1, 2}
    _assert_floe_reads_what_spark_reads(iceberg_oracle, table)
