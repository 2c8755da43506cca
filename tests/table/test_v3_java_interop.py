"""Interop: Floe reads, row for row, format v3 tables that Iceberg Java writes.

On a v3 table Spark's merge-on-read DELETE, UPDATE and MERGE write deletion
vectors (DVs) in Puffin files instead of position delete files, and a second
delete in a data file that already has a DV makes Java merge the old vector
into the new one. After every statement Floe must return exactly the rows
Java returns; pyiceberg (a test oracle) reads the same metadata file too.
The tests check that Java wrote DVs and merged them, so a reader that
ignored or mis-merged DVs could not pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.table import StaticTable

from table.io import FileIO
from table.metadata_json import read_table_metadata
from table.scan import TableScan
from tests.support.rows import normalize

pytestmark = [pytest.mark.oracle]

MOR_V3 = (
    "'format-version'='3', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)


@pytest.fixture(scope="module")
def v3_catalog(iceberg_oracle, tmp_path_factory) -> str:
    """A Hadoop catalog over a local warehouse, its own name so it never meets other modules'."""
    warehouse: Path = tmp_path_factory.mktemp("java_written_v3")
    iceberg_oracle.conf(
        **{
            "spark.sql.catalog.jv3": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.jv3.type": "hadoop",
            "spark.sql.catalog.jv3.warehouse": str(warehouse),
        }
    )
    iceberg_oracle.execute("CREATE NAMESPACE IF NOT EXISTS jv3.db")
    return "jv3.db"


def _inserts(table: str) -> list[str]:
    """450 rows in three statements, so each partition gets several data files."""
    return [
        f"INSERT INTO {table} SELECT id, element_at(array('a', 'b', 'c', NULL), CAST(id % 4 + 1 AS INT)), "
        f"CAST(id % 50 AS INT), CAST(id * 1.25 AS DECIMAL(10,2)), "
        f"TIMESTAMP '2026-03-01 00:00:00' + make_interval(0, 0, 0, 0, CAST(id % 72 AS INT)) "
        f"FROM range({start}, {start + 150})"
        for start in (0, 150, 300)
    ]


def _merge(table: str) -> str:
    """Matched ids alternately deleted and updated (some were deleted before: inserted again), and new ids."""
    source = [f"({i}, '{'d' if n % 2 else 'u'}')" for n, i in enumerate(range(2, 450, 9))]
    source += [f"({i}, 'i')" for i in range(1000, 1020)]
    return (
        f"MERGE INTO {table} t USING (SELECT * FROM VALUES {', '.join(source)} AS v(id, op)) s ON t.id = s.id "
        f"WHEN MATCHED AND s.op = 'd' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET t.category = 'merged', t.qty = t.qty * 10 "
        f"WHEN NOT MATCHED THEN INSERT (id, category, qty, amount, ts) "
        f"VALUES (s.id, 'inserted', NULL, 9.99, TIMESTAMP '2026-03-05 12:00:00')"
    )


def _row_level_changes(table: str) -> list[str]:
    return [
        f"DELETE FROM {table} WHERE id % 7 = 0",
        f"UPDATE {table} SET category = 'updated', amount = amount + 1 WHERE id % 5 = 1",
        _merge(table),
    ]


def _assert_readers_agree(oracle, table: str, statement: str) -> TableScan:
    """Floe's and pyiceberg's rows equal Java's ``SELECT *``, every column; returns Floe's scan."""
    location = oracle.call("tests.support.oracle_ops:current_metadata_location", table=table)
    io = FileIO.for_location(location)
    metadata = read_table_metadata(io, location)
    assert metadata.format_version == 3
    schema = metadata.schema()
    java = normalize(oracle.sql(f"SELECT * FROM {table}").to_pylist(), schema)
    scan = TableScan(io, metadata)
    try:
        floe = normalize(scan.to_arrow().to_pylist(), schema)
    except Exception as exc:
        raise AssertionError(f"Floe failed to read {location} after: {statement}") from exc
    assert floe == java, f"Floe differs from Java after: {statement}"
    pyiceberg = StaticTable.from_metadata(location).scan().to_arrow().to_pylist()
    assert normalize(pyiceberg, schema) == java, f"pyiceberg differs from Java after: {statement}"
    return scan


def _java_delete_files(oracle, table: str) -> list[dict]:
    return oracle.sql(
        f"SELECT file_format, content, referenced_data_file, record_count FROM {table}.delete_files"
    ).to_pylist()


def _assert_only_deletion_vectors(oracle, table: str, scan: TableScan) -> dict[str, int]:
    """Java wrote DVs only, one per data file, and Floe planned them; returns deleted-row counts by data file."""
    deletes = _java_delete_files(oracle, table)
    assert deletes and {(d["file_format"], d["content"]) for d in deletes} == {("PUFFIN", 1)}
    by_file = {d["referenced_data_file"]: d["record_count"] for d in deletes}
    assert len(by_file) == len(deletes), "v3 allows one live DV per data file"
    planned = [f for task in scan.plan_files() for f in task.delete_files]
    assert planned and all(f.is_deletion_vector for f in planned)
    return by_file


@pytest.mark.parametrize("partitioned_by", ["", "category, bucket(4, id)"], ids=["unpartitioned", "partitioned"])
def test_floe_reads_java_v3_deletion_vectors_after_every_statement(iceberg_oracle, v3_catalog, partitioned_by):
    table = f"{v3_catalog}.dv_{'partitioned' if partitioned_by else 'unpartitioned'}"
    partitioning = f"PARTITIONED BY ({partitioned_by})" if partitioned_by else ""
    iceberg_oracle.execute(
        f"CREATE TABLE {table} (id BIGINT NOT NULL, category STRING, qty INT, amount DECIMAL(10,2), ts TIMESTAMP) "
        f"USING iceberg {partitioning} TBLPROPERTIES ({MOR_V3})"
    )
    for statement in _inserts(table):
        iceberg_oracle.execute(statement)
        _assert_readers_agree(iceberg_oracle, table, statement)

    for statement in _row_level_changes(table):
        iceberg_oracle.execute(statement)
        scan = _assert_readers_agree(iceberg_oracle, table, statement)
        before = _assert_only_deletion_vectors(iceberg_oracle, table, scan)

    second_delete = f"DELETE FROM {table} WHERE id % 3 = 0"
    iceberg_oracle.execute(second_delete)
    scan = _assert_readers_agree(iceberg_oracle, table, second_delete)
    after = _assert_only_deletion_vectors(iceberg_oracle, table, scan)
    merged = [path for path, count in after.items() if count > before.get(path, 0) > 0]
    assert merged, "the second DELETE should have merged existing DVs into new ones"
