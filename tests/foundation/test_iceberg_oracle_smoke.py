"""Smoke test: the Iceberg Java oracle works on this machine.

Later interop tests rely on it: a SparkSession with Iceberg's runtime creates
a table through Iceberg's JDBC catalog on SQLite, inserts rows, reads them back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

pytestmark = [pytest.mark.oracle]


def test_oracle_round_trips_rows_through_a_jdbc_sqlite_catalog(iceberg_oracle, tmp_path: Path):
    catalog_db = tmp_path / "catalog.db"
    warehouse = tmp_path / "warehouse"
    iceberg_oracle.conf(
        **{
            "spark.sql.catalog.smoke": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.smoke.type": "jdbc",
            "spark.sql.catalog.smoke.uri": f"jdbc:sqlite:{catalog_db}",
            "spark.sql.catalog.smoke.warehouse": str(warehouse),
        }
    )
    iceberg_oracle.execute("CREATE NAMESPACE IF NOT EXISTS smoke.db")
    iceberg_oracle.execute(
        "CREATE TABLE smoke.db.events (id BIGINT, name STRING, ts TIMESTAMP) USING iceberg "
        "PARTITIONED BY (days(ts)) TBLPROPERTIES ('format-version'='2')"
    )
    iceberg_oracle.execute(
        "INSERT INTO smoke.db.events VALUES "
        "(1, 'a', TIMESTAMP '2026-01-01 10:00:00'), (2, 'b', TIMESTAMP '2026-01-02 11:00:00'), "
        "(3, NULL, TIMESTAMP '2026-01-02 12:00:00')"
    )

    rows = iceberg_oracle.sql("SELECT id, name FROM smoke.db.events ORDER BY id").to_pylist()
    assert rows == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": None}]

    files = iceberg_oracle.sql("SELECT file_path, record_count FROM smoke.db.events.files").to_pylist()
    assert len(files) == 2, "days(ts) should give one data file per day"
    assert sum(f["record_count"] for f in files) == 3

    with sqlite3.connect(catalog_db) as db:
        tables = db.execute("SELECT table_namespace, table_name, metadata_location FROM iceberg_tables").fetchall()
    assert [(ns, name) for ns, name, _ in tables] == [("db", "events")]
    assert Path(tables[0][2].removeprefix("file:")).exists(), "the catalog points at a real metadata file"
