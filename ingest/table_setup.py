"""The table on first start: created if missing, checked against the job otherwise.

A new table gets the job's schema (with the key as identifier fields),
partition spec, sort order and properties, always ``format-version=2``. When
the job upserts into a table whose partition is not determined by the key,
the table also needs an unpartitioned spec (not the default) for global
equality deletes; it is added here, once, as its own metadata commit.

A streaming table commits every trigger, so a new table also gets
``write.metadata.delete-after-commit.enabled=true`` (unless the job sets it):
metadata files are deleted once they leave the metadata log (the newest
``write.metadata.previous-versions-max``, 100, are kept) instead of piling up,
one per batch, until orphan-file removal.

An existing table must hold every job column with the same type and the key
columns; the job then decodes into the table's own schema, so that field ids
come from the table, never from the job file.
"""

from __future__ import annotations

import logging

from commit.catalog import Catalog, LoadedTable
from commit.errors import NamespaceAlreadyExists, TableAlreadyExists
from commit.identifiers import to_table_identifier
from commit.metadata_committer import CommitFiles, MetadataCommitter
from ingest.job import TableSpec, as_dict
from table import properties
from table.errors import SchemaError
from table.io import FileIO
from table.metadata import TableMetadata
from table.partitioning import UNPARTITIONED_SPEC
from table.schema import Schema
from table.types import StructType

log = logging.getLogger("floe.ingest")


class TableMismatchError(ValueError):
    """The existing table cannot take the job's records as configured."""


def ensure_table(catalog: Catalog, table: TableSpec) -> LoadedTable:
    """The job's table, created when missing and checked otherwise."""
    ident = to_table_identifier(table.identifier)
    if not catalog.table_exists(ident):
        _create(catalog, table)
    loaded = catalog.load_table(ident)
    check_table(loaded.metadata, table)
    if needs_global_deletes(loaded.metadata, table) and not _has_unpartitioned_spec(loaded.metadata):
        loaded = _add_unpartitioned_spec(catalog, table)
    return loaded


def job_schema(table: TableSpec) -> Schema:
    """The job's schema with its key columns as identifier fields."""
    schema = table.schema()
    ids = tuple(schema.find_field(path).field_id for path in table.key_fields())
    if not ids or tuple(schema.identifier_field_ids) == ids:
        return schema
    return Schema(*schema.fields, schema_id=schema.schema_id, identifier_field_ids=ids)


STREAMING_TABLE_DEFAULTS = {properties.METADATA_DELETE_AFTER_COMMIT.key: "true"}
"""Properties of a table Floe creates, where the job does not set them."""


def _create(catalog: Catalog, table: TableSpec) -> None:
    ident = to_table_identifier(table.identifier)
    if not catalog.namespace_exists(ident.namespace):
        try:
            catalog.create_namespace(ident.namespace)
        except NamespaceAlreadyExists:
            pass  # another job created it meanwhile: that is what we wanted
    schema = job_schema(table)
    properties = {**STREAMING_TABLE_DEFAULTS, **as_dict(table.properties), "format-version": "2"}
    try:
        catalog.create_table(
            ident, schema, table.partition_spec(schema), table.iceberg_sort_order(schema), properties, table.location
        )
        log.info("created table %s", table.identifier, extra={"table": table.identifier})
    except TableAlreadyExists:
        pass  # created concurrently; it is checked like any existing table


def check_table(metadata: TableMetadata, table: TableSpec) -> None:
    """Raise :class:`TableMismatchError` unless the table fits the job's columns and key."""
    current = metadata.schema()
    problems = []
    for path in _leaf_paths(table.schema()):
        wanted = table.schema().find_field(path).field_type
        try:
            found = current.find_field(path).field_type
        except SchemaError:
            problems.append(f"column {path!r} is missing")
            continue
        if wanted.is_primitive and found != wanted:
            problems.append(f"column {path!r} is {found} in the table, {wanted} in the job")
    for path in table.key_fields():
        if not _has(current, path):
            problems.append(f"key column {path!r} is missing")
    if problems:
        raise TableMismatchError(f"table {table.identifier} does not fit the job: " + "; ".join(problems))


def _leaf_paths(schema: Schema) -> list[str]:
    return [schema.find_column_name(i) for i in _primitive_ids(schema)]


def _primitive_ids(schema: Schema) -> list[int]:
    ids = []
    stack = list(schema.fields)
    while stack:
        field = stack.pop()
        if field.field_type.is_primitive:
            ids.append(field.field_id)
        elif isinstance(field.field_type, StructType):
            stack.extend(field.field_type.fields)  # lists and maps: their leaves are not addressable by name
    return ids


def _has(schema: Schema, path: str) -> bool:
    try:
        schema.find_field(path)
        return True
    except SchemaError:
        return False


def needs_global_deletes(metadata: TableMetadata, table: TableSpec) -> bool:
    """Upserts into a table whose partition the key does not determine."""
    if table.mode != "upsert":
        return False
    schema = metadata.schema()
    key_ids = {schema.find_field(p).field_id for p in table.key_fields()}
    return any(f.source_id not in key_ids for f in metadata.spec().fields)


def _has_unpartitioned_spec(metadata: TableMetadata) -> bool:
    return any(not spec.fields for spec in metadata.partition_specs)


def _add_unpartitioned_spec(catalog: Catalog, table: TableSpec) -> LoadedTable:
    ident = to_table_identifier(table.identifier)
    pointer = catalog.load_pointer(ident)
    committer = MetadataCommitter(catalog, ident, CommitFiles(FileIO.for_location(pointer.metadata_location)))

    def build(loaded: LoadedTable, _attempt: int):
        if _has_unpartitioned_spec(loaded.metadata):
            return None
        return loaded.metadata.add_partition_spec(UNPARTITIONED_SPEC)

    committer.commit(build, _has_unpartitioned_spec)
    log.info("added an unpartitioned spec to %s for global equality deletes", table.identifier,
             extra={"table": table.identifier})
    return catalog.load_table(ident)
