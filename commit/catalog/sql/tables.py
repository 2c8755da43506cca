"""The SQL of the JDBC catalog schema, shared with Iceberg Java and pyiceberg.

The two tables and their column types are exactly those of Iceberg Java's
``JdbcCatalog`` with its "V1" schema (the one that knows views:
``iceberg_type`` is 'TABLE', 'VIEW', or NULL for rows written by V0 clients
and by pyiceberg before 0.12, which count as tables). A database created by
either of them opens in Floe as it is, and the other way round; a V0 database
gains the ``iceberg_type`` column, which Java and pyiceberg both ignore or
understand.

Statements use ``?`` placeholders and only SQL that SQLite and PostgreSQL
both run; :mod:`commit.catalog.sql.dialects` adapts the placeholders.
"""

from __future__ import annotations

from commit.catalog.sql.database import ColumnAddition

TABLES = "iceberg_tables"
NAMESPACE_PROPERTIES = "iceberg_namespace_properties"
TABLE_TYPE = "TABLE"
VIEW_TYPE = "VIEW"

CREATE_TABLES = (
    f"CREATE TABLE IF NOT EXISTS {TABLES} ("
    "catalog_name VARCHAR(255) NOT NULL, "
    "table_namespace VARCHAR(255) NOT NULL, "
    "table_name VARCHAR(255) NOT NULL, "
    "metadata_location VARCHAR(1000), "
    "previous_metadata_location VARCHAR(1000), "
    "iceberg_type VARCHAR(5), "
    "PRIMARY KEY (catalog_name, table_namespace, table_name))"
)
CREATE_NAMESPACE_PROPERTIES = (
    f"CREATE TABLE IF NOT EXISTS {NAMESPACE_PROPERTIES} ("
    "catalog_name VARCHAR(255) NOT NULL, "
    "namespace VARCHAR(255) NOT NULL, "
    "property_key VARCHAR(255), "
    "property_value VARCHAR(1000), "
    "PRIMARY KEY (catalog_name, namespace, property_key))"
)
SCHEMA_TABLES = ((TABLES, CREATE_TABLES), (NAMESPACE_PROPERTIES, CREATE_NAMESPACE_PROPERTIES))
SCHEMA_COLUMNS = (ColumnAddition(TABLES, "iceberg_type", f"ALTER TABLE {TABLES} ADD COLUMN iceberg_type VARCHAR(5)"),)

_IS_TABLE = f"(iceberg_type = '{TABLE_TYPE}' OR iceberg_type IS NULL)"
_ROW = "catalog_name = ? AND table_namespace = ? AND table_name = ?"

# -- tables -------------------------------------------------------------------

GET_TABLE = f"SELECT metadata_location, previous_metadata_location FROM {TABLES} WHERE {_ROW} AND {_IS_TABLE}"
GET_ANY_ROW = f"SELECT iceberg_type FROM {TABLES} WHERE {_ROW}"
LIST_TABLES = (
    f"SELECT table_name FROM {TABLES} WHERE catalog_name = ? AND table_namespace = ? AND {_IS_TABLE} "
    "ORDER BY table_name"
)
COUNT_NAMESPACE_ROWS = f"SELECT COUNT(*) FROM {TABLES} WHERE catalog_name = ? AND table_namespace = ?"
INSERT_TABLE = (
    f"INSERT INTO {TABLES} (catalog_name, table_namespace, table_name, metadata_location, "
    f"previous_metadata_location, iceberg_type) VALUES (?, ?, ?, ?, NULL, '{TABLE_TYPE}')"
)
SWAP_METADATA_LOCATION = (
    f"UPDATE {TABLES} SET metadata_location = ?, previous_metadata_location = ? "
    f"WHERE {_ROW} AND metadata_location = ? AND {_IS_TABLE}"
)
RENAME_TABLE = f"UPDATE {TABLES} SET table_namespace = ?, table_name = ? WHERE {_ROW} AND {_IS_TABLE}"
DROP_TABLE = f"DELETE FROM {TABLES} WHERE {_ROW} AND {_IS_TABLE}"

# -- namespaces ---------------------------------------------------------------

_NAMESPACE_AT_OR_BELOW = "(namespace = ? OR namespace LIKE ? ESCAPE '!')"
_TABLE_NAMESPACE_AT_OR_BELOW = "(table_namespace = ? OR table_namespace LIKE ? ESCAPE '!')"

TABLE_NAMESPACES_AT_OR_BELOW = (
    f"SELECT DISTINCT table_namespace FROM {TABLES} WHERE catalog_name = ? AND {_TABLE_NAMESPACE_AT_OR_BELOW}"
)
PROPERTY_NAMESPACES_AT_OR_BELOW = (
    f"SELECT DISTINCT namespace FROM {NAMESPACE_PROPERTIES} WHERE catalog_name = ? AND {_NAMESPACE_AT_OR_BELOW}"
)
ALL_TABLE_NAMESPACES = f"SELECT DISTINCT table_namespace FROM {TABLES} WHERE catalog_name = ?"
ALL_PROPERTY_NAMESPACES = f"SELECT DISTINCT namespace FROM {NAMESPACE_PROPERTIES} WHERE catalog_name = ?"
GET_NAMESPACE_PROPERTIES = (
    f"SELECT property_key, property_value FROM {NAMESPACE_PROPERTIES} WHERE catalog_name = ? AND namespace = ?"
)
INSERT_NAMESPACE_PROPERTY = (
    f"INSERT INTO {NAMESPACE_PROPERTIES} (catalog_name, namespace, property_key, property_value) VALUES (?, ?, ?, ?)"
)
UPSERT_NAMESPACE_PROPERTY = (
    f"INSERT INTO {NAMESPACE_PROPERTIES} (catalog_name, namespace, property_key, property_value) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (catalog_name, namespace, property_key) "
    "DO UPDATE SET property_value = excluded.property_value"
)
INSERT_NAMESPACE_PROPERTY_IF_MISSING = (
    f"INSERT INTO {NAMESPACE_PROPERTIES} (catalog_name, namespace, property_key, property_value) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (catalog_name, namespace, property_key) DO NOTHING"
)
DELETE_NAMESPACE_PROPERTY = (
    f"DELETE FROM {NAMESPACE_PROPERTIES} WHERE catalog_name = ? AND namespace = ? AND property_key = ?"
)
DELETE_NAMESPACE = f"DELETE FROM {NAMESPACE_PROPERTIES} WHERE catalog_name = ? AND namespace = ?"
