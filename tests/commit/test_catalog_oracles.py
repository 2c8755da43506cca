"""Other Iceberg implementations open a table through Floe's catalog database and read its rows.

``test_catalog_interop.py`` and ``test_catalog_java.py`` check that pyiceberg
and Iceberg Java list, load and commit to a Floe catalog; here they read the
rows of tables Floe committed with data and delete files:

* Iceberg Java's ``JdbcCatalog`` (as a Spark catalog in the oracle process)
  reads a table fed by ``commit_batch`` with upserts (equality deletes) and a
  position delete;
* pyiceberg's ``SqlCatalog`` reads a table with position deletes (pyiceberg
  0.12 cannot apply equality deletes, so it is not given any).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergCatalog

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.batch_commit import commit_batch
from commit.operations.row_delta import RowDelta
from table.arrow_schema import cast_to_schema
from table.manifest import DataFile
from table.parquet.partitioned import write_partitioned
from tests.commit.producer_support import CommitTable


def jdbc_url(uri: str) -> str:
    """A Floe catalog URI as a JDBC URL (the PostgreSQL search_path option is kept)."""
    if uri.startswith("sqlite:///"):
        return "jdbc:sqlite:" + uri[len("sqlite:///") :]
    parts = urlsplit(uri)
    query = f"user={parts.username or 'postgres'}" + (f"&{parts.query}" if parts.query else "")
    return f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}?{query}"


def use_jdbc_catalog(oracle: Any, name: str, uri: str, warehouse: Path, **options: str) -> None:
    """Make ``name`` a Spark catalog of the oracle: Iceberg Java's JdbcCatalog over Floe's catalog
    database ``uri`` (``options``: more catalog settings, e.g. ``cache-enabled``)."""
    oracle.conf(**{
        f"spark.sql.catalog.{name}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{name}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        f"spark.sql.catalog.{name}.uri": jdbc_url(uri),
        f"spark.sql.catalog.{name}.warehouse": str(warehouse),
        **{f"spark.sql.catalog.{name}.{key}": value for key, value in options.items()},
    })


def write_rows(table: CommitTable, rows: dict[int, str]) -> DataFile:
    md = table.metadata()
    arrow = pa.table({"id": pa.array(list(rows), pa.int64()), "data": list(rows.values()), "category": ["a"] * len(rows)})
    [data_file] = write_partitioned(table.io, md.location, md.schema(), md.spec(), [cast_to_schema(arrow, md.schema())])
    return data_file


def id_data(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return sorted((r["id"], r["data"]) for r in rows)


@pytest.mark.oracle
def test_iceberg_java_jdbc_catalog_reads_a_floe_table_with_upserts(
    catalog_uri: str, warehouse: Path, iceberg_oracle: Any
) -> None:
    name = f"floe_{uuid.uuid4().hex[:8]}"  # the Spark catalog's name is the JDBC catalog's name
    with SqlCatalog(catalog_uri, str(warehouse), name=name) as catalog:
        table = CommitTable.create(catalog, "db.events", partitioned=True)
        first = write_rows(table, {i: f"v{i}" for i in range(1, 7)})
        commit_batch(catalog, "db.events", "q", 0, {"t": {0: (0, 6)}}, [first])
        upsert = write_rows(table, {2: "v2-new"})
        commit_batch(catalog, "db.events", "q", 1, {"t": {0: (6, 8)}}, [upsert],
                     [table.write_equality_deletes([2, 3], ("a",))])
        table.commit(RowDelta([], [table.write_position_deletes(first, [4])]))  # id 5
        floe_rows = id_data(table.rows())
    assert floe_rows == [(1, "v1"), (2, "v2-new"), (4, "v4"), (6, "v6")]

    use_jdbc_catalog(iceberg_oracle, name, catalog_uri, warehouse)
    java = iceberg_oracle.sql(f"SELECT id, data FROM {name}.db.events").to_pylist()
    assert id_data(java) == floe_rows
    kinds = iceberg_oracle.sql(f"SELECT content FROM {name}.db.events.delete_files").column("content").to_pylist()
    assert sorted(kinds) == [1, 2]  # Java saw one position and one equality delete file


def test_pyiceberg_sql_catalog_reads_a_floe_table_with_position_deletes(
    catalog: Catalog, pyiceberg_uri: str, warehouse: Path
) -> None:
    table = CommitTable.create(catalog, "db.events")
    first, _ = table.append([1, 2, 3, 4])
    second, _ = table.append([5, 6])
    table.commit(RowDelta([], [table.write_position_deletes(first, [0, 2]), table.write_position_deletes(second, [1])]))
    floe_rows = id_data(table.rows())
    assert floe_rows == [(2, "v2"), (4, "v4"), (5, "v5")]

    oracle = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
    try:
        loaded = oracle.load_table("db.events")
        assert loaded.metadata_location == table.metadata_location()
        assert id_data(loaded.scan().to_arrow().to_pylist()) == floe_rows
    finally:
        oracle.close()
