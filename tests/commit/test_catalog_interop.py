"""The catalog database layout is Iceberg Java's JdbcCatalog (V1) and pyiceberg's SqlCatalog.

pyiceberg's ``SqlCatalog`` is the test oracle: it opens a Floe catalog, and
Floe opens one that pyiceberg created (pyiceberg 0.12 creates the V1 layout),
and one in the V0 layout of Java's JdbcCatalog and pyiceberg before 0.12.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergCatalog

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.identifiers import TableIdentifier
from table.schema import Schema

# Iceberg Java JdbcUtil: V0_CREATE_CATALOG_SQL + V1_UPDATE_CATALOG_SQL, CREATE_NAMESPACE_PROPERTIES_TABLE_SQL.
# (column, VARCHAR length, primary key position or 0, declared NOT NULL)
JAVA_ICEBERG_TABLES = [
    ("catalog_name", 255, 1, True),
    ("table_namespace", 255, 2, True),
    ("table_name", 255, 3, True),
    ("metadata_location", 1000, 0, False),
    ("previous_metadata_location", 1000, 0, False),
    ("iceberg_type", 5, 0, False),
]
JAVA_NAMESPACE_PROPERTIES = [
    ("catalog_name", 255, 1, True),
    ("namespace", 255, 2, True),
    ("property_key", 255, 3, False),
    ("property_value", 1000, 0, False),
]
# Iceberg Java JdbcUtil: V0_CREATE_CATALOG_SQL (no iceberg_type), CREATE_NAMESPACE_PROPERTIES_TABLE_SQL.
JAVA_V0_CREATE_TABLES = (
    "CREATE TABLE iceberg_tables(catalog_name VARCHAR(255) NOT NULL,table_namespace VARCHAR(255) NOT NULL,"
    "table_name VARCHAR(255) NOT NULL,metadata_location VARCHAR(1000),previous_metadata_location VARCHAR(1000),"
    "PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE iceberg_namespace_properties(catalog_name VARCHAR(255) NOT NULL,namespace VARCHAR(255) NOT NULL,"
    "property_key VARCHAR(255),property_value VARCHAR(1000),PRIMARY KEY (catalog_name, namespace, property_key))",
)


@pytest.fixture()
def pyiceberg_catalog(pyiceberg_uri: str, warehouse: Path) -> Iterator[PyIcebergCatalog]:
    """pyiceberg's catalog on a fresh database (pyiceberg creates its own tables)."""
    _make_sqlite_directory(pyiceberg_uri)
    catalog = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
    yield catalog
    catalog.close()


def _columns(run_sql: Callable[..., Any], backend: str, table: str) -> list[tuple[str, int, int, bool]]:
    """(name, varchar length, pk position, declared NOT NULL) of each column, in order."""
    if backend == "sqlite":
        rows = run_sql(f"SELECT name, type, pk, \"notnull\" FROM pragma_table_info('{table}') ORDER BY cid")
        return [(name, int(kind[len("VARCHAR(") : -1]), pk, bool(notnull)) for name, kind, pk, notnull in rows]
    rows = run_sql(
        "SELECT c.column_name, c.character_maximum_length, COALESCE(k.ordinal_position, 0), "
        "c.is_nullable = 'NO' AND k.ordinal_position IS NULL, c.data_type "
        "FROM information_schema.columns c LEFT JOIN information_schema.key_column_usage k "
        "ON k.table_name = c.table_name AND k.column_name = c.column_name "
        "AND k.table_schema = c.table_schema "
        "WHERE c.table_name = ? AND c.table_schema = current_schema() ORDER BY c.ordinal_position",
        (table,),
    )
    assert {row[4] for row in rows} == {"character varying"}
    # PostgreSQL makes every primary key column NOT NULL; compare what was declared.
    declared = {"catalog_name", "table_namespace", "table_name", "namespace"}
    return [(name, length, pk, not_null or name in declared) for name, length, pk, not_null, _ in rows]


def test_schema_matches_java_jdbc_catalog(catalog: Catalog, run_sql: Callable[..., Any]) -> None:
    assert _columns(run_sql, catalog.backend, "iceberg_tables") == JAVA_ICEBERG_TABLES
    assert _columns(run_sql, catalog.backend, "iceberg_namespace_properties") == JAVA_NAMESPACE_PROPERTIES


def test_floe_rows_are_java_rows(catalog: Catalog, run_sql: Callable[..., Any], simple_schema: Schema) -> None:
    catalog.create_namespace("db.events", {"owner": "floe"})
    created = catalog.create_table("db.events.t", simple_schema)

    assert run_sql("SELECT catalog_name, table_namespace, table_name, metadata_location, "
                   "previous_metadata_location, iceberg_type FROM iceberg_tables") == [
        ("floe", "db.events", "t", created.metadata_location, None, "TABLE")
    ]
    assert sorted(run_sql("SELECT catalog_name, namespace, property_key, property_value "
                          "FROM iceberg_namespace_properties")) == [
        ("floe", "db.events", "exists", "true"),
        ("floe", "db.events", "owner", "floe"),
    ]


def test_pyiceberg_opens_a_floe_catalog(catalog: Catalog, pyiceberg_uri: str, warehouse: Path,
                                        simple_schema: Schema) -> None:
    catalog.create_namespace("db", {"owner": "floe"})
    catalog.create_namespace("db.sub")
    created = catalog.create_table("db.t", simple_schema)
    catalog.create_table("db.sub.u", simple_schema)
    moved = created.metadata_location.replace("00000-", "00001-")
    shutil.copyfile(created.metadata_location, moved)
    catalog.swap_metadata_location("db.t", created.metadata_location, moved)

    oracle = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
    try:
        assert oracle.list_namespaces() == [("db",)]
        assert oracle.list_namespaces("db") == [("db", "sub")]
        assert oracle.list_tables("db") == [("db", "t")]
        assert oracle.list_tables("db.sub") == [("db", "sub", "u")]
        assert oracle.load_namespace_properties("db")["owner"] == "floe"
        table = oracle.load_table("db.t")
        assert table.metadata_location == moved
        assert str(table.metadata.table_uuid) == str(created.metadata.table_uuid)
        assert [f.name for f in table.schema().fields] == ["id", "payload"]
        assert table.scan().to_arrow().num_rows == 0
        # And pyiceberg can write to it: its own commit is the same compare-and-swap.
        oracle.create_namespace("from_pyiceberg")
    finally:
        oracle.close()
    assert catalog.list_namespaces() == [("db",), ("from_pyiceberg",)]


def test_floe_opens_a_pyiceberg_catalog(pyiceberg_catalog: PyIcebergCatalog, catalog_uri: str, warehouse: Path,
                                        run_sql: Callable[..., Any]) -> None:
    pyiceberg_catalog.create_namespace("ns", {"owner": "pyiceberg"})
    pyiceberg_catalog.create_namespace("empty")
    arrow_schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    created = pyiceberg_catalog.create_table("ns.events", schema=arrow_schema)
    # pyiceberg 0.12 creates the V1 layout and marks its rows as tables.
    assert run_sql("SELECT table_name, iceberg_type FROM iceberg_tables") == [("events", "TABLE")]

    moved = _floe_reads_and_swaps(catalog_uri, warehouse, created)
    assert pyiceberg_catalog.load_table("ns.events").metadata_location == moved
    assert pyiceberg_catalog.list_tables("ns") == [("ns", "events")]


def test_floe_opens_a_v0_catalog_and_migrates_it_in_place(pyiceberg_uri: str, catalog_uri: str, warehouse: Path,
                                                          run_sql: Callable[..., Any]) -> None:
    _make_sqlite_directory(pyiceberg_uri)
    for statement in JAVA_V0_CREATE_TABLES:
        run_sql(statement)
    v0_client = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())  # works in its v0 mode
    try:
        v0_client.create_namespace("ns", {"owner": "pyiceberg"})
        v0_client.create_namespace("empty")
        arrow_schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
        created = v0_client.create_table("ns.events", schema=arrow_schema)
        assert "iceberg_type" not in {c[0] for c in _raw_columns(run_sql, catalog_uri)}

        moved = _floe_reads_and_swaps(catalog_uri, warehouse, created)

        assert "iceberg_type" in {c[0] for c in _raw_columns(run_sql, catalog_uri)}  # migrated to V1 in place
        assert run_sql("SELECT table_name, iceberg_type FROM iceberg_tables") == [("events", None)]
        assert v0_client.load_table("ns.events").metadata_location == moved
    finally:
        v0_client.close()
    v1_client = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())  # sees the V1 layout
    try:
        assert v1_client.load_table("ns.events").metadata_location == moved  # a NULL type is a table
        assert v1_client.list_tables("ns") == [("ns", "events")]
    finally:
        v1_client.close()


def _floe_reads_and_swaps(catalog_uri: str, warehouse: Path, created: Any) -> str:
    """Floe lists and loads what pyiceberg created, then moves ``ns.events`` to a new metadata file."""
    with SqlCatalog(catalog_uri, str(warehouse)) as floe:
        assert floe.list_namespaces() == [("empty",), ("ns",)]
        assert floe.load_namespace_properties("ns") == {"owner": "pyiceberg"}
        assert floe.load_namespace_properties("empty") == {}
        assert floe.list_tables("ns") == [TableIdentifier(("ns",), "events")]
        location, metadata, _ = floe.load_table("ns.events")
        assert location == created.metadata_location
        assert str(metadata.table_uuid) == str(created.metadata.table_uuid)
        assert [f.name for f in metadata.schema().as_struct().fields] == ["id", "name"]

        moved = location.rsplit("/", 1)[0] + f"/00001-{uuid.uuid4()}.metadata.json"
        shutil.copyfile(location.removeprefix("file://"), moved.removeprefix("file://"))
        floe.swap_metadata_location("ns.events", location, moved)
    return moved


def _make_sqlite_directory(uri: str) -> None:
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)


def _raw_columns(run_sql: Callable[..., Any], uri: str) -> list[tuple[Any, ...]]:
    if uri.startswith("sqlite"):
        return run_sql("SELECT name FROM pragma_table_info('iceberg_tables')")
    return run_sql(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'iceberg_tables' AND table_schema = current_schema()"
    )
