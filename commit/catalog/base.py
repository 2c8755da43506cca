"""What every catalog offers Floe: tables by name, and the one commit point.

A catalog maps table names to metadata files (spec: "Metastore Tables"). Floe
has two: its own SQL catalog (:mod:`commit.catalog.sql`), where Floe writes
each metadata file and the catalog swaps a pointer, and a REST catalog
(:mod:`commit.catalog.rest`), where Floe sends the change and the server
writes the file. The commit loop (:mod:`commit.metadata_committer`) knows
neither: it asks the catalog to :meth:`Catalog.stage` an attempt, hands the
staged attempt to the before-commit hook, and asks it to :meth:`Catalog.commit`,
as Iceberg Java's ``TableOperations.commit`` and pyiceberg's ``commit_table``
do. Either commit raises :class:`~commit.errors.CommitConflict` when another
writer got there first (nothing changed) and
:class:`~commit.errors.CommitStateUnknown` when the outcome was lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, Self

from commit.identifiers import Namespace, NamespaceLike, TableIdentifier, TableIdentifierLike
from table.io import FileIO
from table.metadata import TableMetadata
from table.partitioning import PartitionSpec
from table.schema import Schema
from table.sort_order import SortOrder

SERVER_WRITTEN = "(written by the REST catalog)"
"""The location of a staged attempt whose metadata file the catalog itself writes when it commits."""


class TablePointer(NamedTuple):
    """A table's row: where its metadata is now, and where it was before the last commit."""

    metadata_location: str
    previous_metadata_location: str | None


class LoadedTable(NamedTuple):
    """A table's metadata, the file it was read from (or, staged, is about to be), and the FileIO that
    reaches its files, with the storage credentials its catalog vended for it."""

    metadata_location: str
    metadata: TableMetadata
    io: FileIO


class WrittenFiles(Protocol):
    """Where a commit writes its files, recording each before it is written (``CommitFiles``)."""

    io: FileIO

    def add(self, path: str) -> str: ...


class Leases(Protocol):
    """Named, expiring leases: one compactor per table, and the like."""

    def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> bool: ...

    def renew_lease(self, name: str, holder: str, ttl_ms: int) -> bool: ...

    def release_lease(self, name: str, holder: str) -> bool: ...


class Catalog(Protocol):
    """A catalog as the commit path, ingest, the compactor and the CLI use it."""

    name: str
    warehouse: str

    @property
    def backend(self) -> str:
        """``"sqlite"``, ``"postgresql"`` or ``"rest"``: for logs and metrics."""
        ...

    @property
    def leases(self) -> Leases: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def create_namespace(self, namespace: NamespaceLike, properties: Mapping[str, str] | None = None) -> None: ...

    def namespace_exists(self, namespace: NamespaceLike) -> bool: ...

    def list_namespaces(self, parent: NamespaceLike = ()) -> list[Namespace]: ...

    def default_table_location(self, identifier: TableIdentifierLike) -> str: ...

    def create_table(
        self,
        identifier: TableIdentifierLike,
        schema: Schema,
        spec: PartitionSpec = ...,
        sort_order: SortOrder = ...,
        properties: Mapping[str, str] | None = None,
        location: str | None = None,
    ) -> LoadedTable: ...

    def register_table(self, identifier: TableIdentifierLike, metadata_location: str) -> LoadedTable: ...

    def load_pointer(self, identifier: TableIdentifierLike) -> TablePointer: ...

    def load_table(self, identifier: TableIdentifierLike) -> LoadedTable: ...

    def table_exists(self, identifier: TableIdentifierLike) -> bool: ...

    def list_tables(self, namespace: NamespaceLike) -> list[TableIdentifier]: ...

    def drop_table(self, identifier: TableIdentifierLike) -> None: ...

    def stage(self, base: LoadedTable, updated: TableMetadata, files: WrittenFiles) -> LoadedTable:
        """The attempt to commit ``updated`` on ``base``: its metadata file written by Floe, or, where
        the catalog writes it, ``updated`` at :data:`SERVER_WRITTEN`."""
        ...

    def commit(self, identifier: TableIdentifierLike, base: LoadedTable, staged: LoadedTable) -> LoadedTable:
        """Swap ``staged`` in where the table is still at ``base``; the committed location and metadata."""
        ...
