"""The table on first start: created if missing, checked against the job otherwise.

A new table gets the job's schema (with the key as identifier fields),
partition spec, sort order and properties, at the job's ``format_version`` (2 unless set). When
the job upserts into a table whose partition is not determined by the key,
the table also needs an unpartitioned spec (not the default) for global
equality deletes; it is added here, once, as its own metadata commit.

A streaming table commits every trigger, so a new table also gets
``write.metadata.delete-after-commit.enabled=true`` (unless the job sets it):
metadata files are deleted once they leave the metadata log (the newest
``write.metadata.previous-versions-max``, 100, are kept) instead of piling up,
one per batch, until orphan-file removal.

An existing table is compared with the job (:mod:`ingest.driver.table_diff`): the
differences Iceberg's schema evolution allows (an optional column added, a
type widened, a required column made optional) are committed as one schema
update; any other difference raises :class:`TableMismatchError`, which says
how to fix it. The job then decodes into the table's own schema, so that field
ids come from the table, never from the job file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from commit.catalog.base import Catalog, LoadedTable
from commit.errors import NamespaceAlreadyExists, TableAlreadyExists
from commit.identifiers import to_table_identifier
from commit.metadata_committer import (
    BeforeCommit,
    commit_metadata_change,
)
from ingest.driver.table_diff import Difference, evolve_schema, kept_columns, table_differences
from ingest.job import TableSpec, as_dict
from table import properties
from table.metadata import TableMetadata
from table.parquet.writer import WriterOptions
from table.partitioning import UNPARTITIONED_SPEC
from table.properties import PropertyError
from table.schema import Schema

log = logging.getLogger("floe.ingest")


class TableMismatchError(ValueError):
    """The existing table differs from the job in ways Floe does not evolve.

    ``refused`` holds the differences; :attr:`detail` is their messages, each
    with how to fix it, joined by "; ".
    """

    def __init__(self, identifier: str, refused: Sequence[Difference]) -> None:
        self.identifier = identifier
        self.refused = tuple(refused)
        super().__init__(f"{identifier} does not fit the configuration: {self.detail}")

    @property
    def detail(self) -> str:
        return "; ".join(d.message() for d in self.refused)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.identifier, self.refused)


def ensure_table(catalog: Catalog, table: TableSpec) -> LoadedTable:
    """The job's table: created when missing, evolved when the job adds to it, refused when it differs otherwise."""
    ident = to_table_identifier(table.identifier)
    if not catalog.table_exists(ident):
        _create(catalog, table)
    loaded = catalog.load_table(ident)
    for kept in kept_columns(loaded.metadata, table):
        log.warning("table %s %s", table.identifier, kept.note(), extra={"table": table.identifier})
    if check_table(loaded.metadata, table):
        loaded = evolve_table(catalog, table)
    if needs_unpartitioned_spec(loaded.metadata, table):
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
UPSERT_TABLE_DEFAULTS = {properties.UPSERT_DELETE_STRATEGY.key: "position"}
"""An upsert table Floe creates deletes previous rows by position (docs/key-index-design.md)."""


def _create(catalog: Catalog, table: TableSpec) -> None:
    ident = to_table_identifier(table.identifier)
    if not catalog.namespace_exists(ident.namespace):
        with contextlib.suppress(NamespaceAlreadyExists):  # another job created it meanwhile: as wanted
            catalog.create_namespace(ident.namespace)
    schema = job_schema(table)
    defaults = dict(STREAMING_TABLE_DEFAULTS)
    if table.mode == "upsert":
        defaults.update(UPSERT_TABLE_DEFAULTS)
    properties = {**defaults, **as_dict(table.properties), "format-version": str(table.format_version)}
    try:
        catalog.create_table(
            ident, schema, table.partition_spec(schema), table.iceberg_sort_order(schema), properties, table.location
        )
        log.info("created table %s", table.identifier, extra={"table": table.identifier})
    except TableAlreadyExists:
        pass  # created concurrently; it is checked like any existing table


class TablePropertyError(ValueError):
    """A table property the writers read has a value they refuse: found at start, not at the first batch."""

    def __init__(self, identifier: str, error: PropertyError) -> None:
        self.identifier = identifier
        self.error = error
        super().__init__(f"table {identifier}: {self.detail}")

    @property
    def detail(self) -> str:
        return f"{self.error}; set it right, or unset it: ALTER TABLE {self.identifier} UNSET TBLPROPERTIES ('{self.error.key}')"

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.identifier, self.error)


def check_table(metadata: TableMetadata, table: TableSpec) -> list[Difference]:
    """The evolutions the table needs to fit the job; :class:`TableMismatchError` when any difference is refused,
    :class:`TablePropertyError` when a property the writers read is malformed.

    Pure, so that ``floe check`` asks the same question without changing anything.
    """
    try:
        WriterOptions.for_table(metadata)
        properties.DISTRIBUTION_MODE.read(metadata.properties)
        properties.UPSERT_DELETE_STRATEGY.read(metadata.properties)
        properties.KEY_INDEX_BUCKETS.read(metadata.properties)
        properties.KEY_INDEX_MAX_DELTAS.read(metadata.properties)
    except PropertyError as error:
        raise TablePropertyError(table.identifier, error) from None
    differences = table_differences(metadata, table)
    refused = [d for d in differences if not d.evolvable]
    if refused:
        raise TableMismatchError(table.identifier, refused)
    return differences


def evolve_table(
    catalog: Catalog, table: TableSpec, *, before_commit: BeforeCommit | None = None, quiet: bool = False
) -> LoadedTable:
    """Commit the table's evolutions as one schema update, and the table after it.

    Each attempt rebuilds the update from a fresh load, so after a lost race
    it applies only what the winner did not (nothing, when another replica of
    the job evolved it the same way). ``before_commit`` is the committer's
    hook, for tests of those races. ``quiet``: the caller logs the change itself (a writer schema's).
    """
    applied: list[Difference] = []

    def build(loaded: LoadedTable, _attempt: int) -> TableMetadata | None:
        applied[:] = check_table(loaded.metadata, table)
        if not applied:
            return None
        schema, last_column_id = evolve_schema(loaded.metadata.schema(), loaded.metadata.last_column_id, applied)
        return loaded.metadata.add_schema(schema, last_column_id, make_current=True)

    def landed(metadata: TableMetadata) -> bool:
        return not any(d.evolvable for d in table_differences(metadata, table))

    if (
        commit_metadata_change(
            catalog, table.identifier, build, landed, what="schema change", before_commit=before_commit
        )
        is not None
        and not quiet
    ):
        log.info(
            "evolved table %s: %s",
            table.identifier,
            "; ".join(d.summary() for d in applied),
            extra={"table": table.identifier},
        )
    return catalog.load_table(to_table_identifier(table.identifier))


def needs_global_deletes(metadata: TableMetadata, table: TableSpec) -> bool:
    """Upserts into a table whose partition the key does not determine."""
    if table.mode != "upsert" or properties.UPSERT_DELETE_STRATEGY.read(metadata.properties) == "position":
        return False
    schema = metadata.schema()
    key_ids = {schema.find_field(p).field_id for p in table.key_fields()}
    return any(f.source_id not in key_ids for f in metadata.spec().fields)


def needs_unpartitioned_spec(metadata: TableMetadata, table: TableSpec) -> bool:
    """Whether the first start adds an unpartitioned spec for the job's global equality deletes."""
    return needs_global_deletes(metadata, table) and not _has_unpartitioned_spec(metadata)


def _has_unpartitioned_spec(metadata: TableMetadata) -> bool:
    return any(not spec.fields for spec in metadata.partition_specs)


def _add_unpartitioned_spec(catalog: Catalog, table: TableSpec) -> LoadedTable:
    def build(loaded: LoadedTable, _attempt: int) -> TableMetadata | None:
        if _has_unpartitioned_spec(loaded.metadata):
            return None
        return loaded.metadata.add_partition_spec(UNPARTITIONED_SPEC)

    if (
        commit_metadata_change(catalog, table.identifier, build, _has_unpartitioned_spec, what="partition spec")
        is not None
    ):
        log.info(
            "added an unpartitioned spec to %s for global equality deletes",
            table.identifier,
            extra={"table": table.identifier},
        )
    return catalog.load_table(to_table_identifier(table.identifier))
