"""Floe's Iceberg catalog: namespaces and table pointers in a SQL database.

The database layout is Iceberg Java's ``JdbcCatalog`` / pyiceberg's
``SqlCatalog`` (see :mod:`commit.catalog.sql.tables`), so all three open the same
catalog. A table is one row that points at its current metadata file; a
commit is :meth:`Catalog.swap_metadata_location`, a compare-and-swap of that
pointer inside one transaction. That swap is the only commit point of a
table: files are written first, under fresh names, and become part of the
table only when the pointer moves (spec: "Metastore Tables").

Namespaces follow Java's rules: levels joined with "."; a namespace exists if
it has a property row or if any table or namespace below it exists; a new
namespace always gets the reserved property ``exists=true``, so removing all
of its other properties does not make it vanish. Checks and changes that
depend on each other run in one transaction that excludes other Floe writers
of the same namespace.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Self

from commit.catalog.base import LoadedTable, TablePointer, WrittenFiles
from commit.catalog.metadata_cache import MetadataCache
from commit.catalog.sql import tables as sql
from commit.catalog.sql.database import (
    CatalogDatabase,
    CommitOutcomeUnknownError,
    DuplicateKeyError,
    Session,
)
from commit.catalog.sql.group_commit import GroupCommit, Swap
from commit.catalog.sql.lease import LeaseTable
from commit.catalog.sql.uri import SQLITE
from commit.errors import (
    CatalogDatabaseError,
    CommitConflict,
    CommitStateUnknown,
    InvalidArgument,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NoSuchCatalog,
    NoSuchNamespace,
    NoSuchTable,
    TableAlreadyExists,
)
from commit.identifiers import (
    Namespace,
    NamespaceLike,
    TableIdentifier,
    TableIdentifierLike,
    check_location,
    check_name_length,
    child_namespaces,
    is_at_or_below,
    like_children_pattern,
    namespace_from_string,
    namespace_to_string,
    to_namespace,
    to_table_identifier,
)
from table import properties as table_properties
from table.errors import TableError
from table.io import FileIO
from table.locations import metadata_location as metadata_dir
from table.metadata import TableMetadata, metadata_file_name, new_table_metadata, now_ms, parse_metadata_version
from table.metadata_json import read_table_metadata, write_table_metadata
from table.partitioning import UNPARTITIONED_SPEC, PartitionSpec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER, SortOrder

log = logging.getLogger(__name__)

DEFAULT_CATALOG_NAME = "floe"
EXISTS_PROPERTY = "exists"  # reserved, as in Java: marks a namespace that has no other property
LOCATION_PROPERTY = "location"  # a namespace's own location for its new tables


@dataclass(frozen=True)
class PropertiesUpdate:
    """What :meth:`Catalog.update_namespace_properties` changed."""

    updated: tuple[str, ...]
    removed: tuple[str, ...]
    missing: tuple[str, ...]  # asked to remove, but not there


class SqlCatalog:
    """A named catalog in a SQLite file or a PostgreSQL database.

    ``uri`` is ``sqlite:///<file>`` or ``postgresql://user@host:port/db``
    (see :mod:`commit.catalog.sql.uri`); ``warehouse`` is the root under which
    new tables get their default location, ``<warehouse>/<ns>/<...>/<table>``.
    The catalog's tables are created when missing. One object may be shared
    by threads; each process (including a forked child) opens its own
    connection.
    """

    def __init__(
        self,
        uri: str,
        warehouse: str,
        name: str = DEFAULT_CATALOG_NAME,
        *,
        timeout_s: float = 30.0,
        create: bool = True,
    ):
        """``create=False`` opens only a catalog that exists (its database and
        tables): inspecting a misspelt URI must not create an empty catalog."""
        if not name:
            raise InvalidArgument("the catalog name must not be empty")
        check_name_length(name, "catalog name")
        check_location(warehouse, "warehouse location")
        self.name = name
        self.warehouse = warehouse.rstrip("/") or "/"
        self._db = CatalogDatabase.from_uri(uri, timeout_s=timeout_s)
        self._loaded = MetadataCache()
        # SQLite has one write lock and syncs on each COMMIT: swaps asked together share one transaction
        self._group = GroupCommit(self._swap_group, _group_failure) if self._db.backend == SQLITE else None
        try:
            if create:
                self._db.ensure_tables("create catalog tables", sql.SCHEMA_TABLES, sql.SCHEMA_COLUMNS)
            else:
                self._require_existing()
        except BaseException:
            self._db.close()  # nobody else can: the half-made catalog is never returned
            raise
        self._leases: LeaseTable | None = None

    def __repr__(self) -> str:
        return f"Catalog({self._db.target.display!r}, name={self.name!r})"

    def _require_existing(self) -> None:
        target = self._db.target
        if target.backend == SQLITE:
            if not os.path.isabs(target.address):
                raise InvalidArgument(
                    f"catalog URI {target.display!r} names a relative path; use sqlite:////absolute/path.db"
                )
            if not os.path.isfile(target.address):
                raise NoSuchCatalog(target.display, f"the file {target.address} does not exist")
        missing = self._db.missing_schema("check the catalog tables", sql.SCHEMA_TABLES, sql.SCHEMA_COLUMNS)
        if {name for name, _ in sql.SCHEMA_TABLES} <= set(missing):
            raise NoSuchCatalog(target.display, "the database has no Iceberg catalog tables")
        if missing:
            raise NoSuchCatalog(
                target.display,
                f"the catalog database lacks {', '.join(missing)} (an older or "
                "partial catalog schema; a Floe ingest or compact run completes it)",
            )

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def leases(self) -> LeaseTable:
        """Leases kept in the same database (one compactor per table, and the like)."""
        if self._leases is None:
            self._leases = LeaseTable(self._db, self.name)
        return self._leases

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- namespaces ------------------------------------------------------------

    def create_namespace(self, namespace: NamespaceLike, properties: Mapping[str, str] | None = None) -> None:
        """Create ``namespace`` with ``properties``; its parents need not exist (as in Java)."""
        ns = to_namespace(namespace)
        props = _checked_properties(properties or {}, ns)
        ns_text = namespace_to_string(ns)
        with self._db.write(f"create namespace {ns_text}") as session:
            session.lock(self._namespace_lock(ns))
            if self._stored_namespaces(session, ns):
                raise NamespaceAlreadyExists(ns_text)
            for key, value in {**props, EXISTS_PROPERTY: "true"}.items():
                try:
                    session.execute(sql.INSERT_NAMESPACE_PROPERTY, (self.name, ns_text, key, value))
                except DuplicateKeyError as e:
                    raise NamespaceAlreadyExists(ns_text) from e

    def namespace_exists(self, namespace: NamespaceLike) -> bool:
        ns = to_namespace(namespace)
        with self._db.read(f"check namespace {namespace_to_string(ns)}") as session:
            return bool(self._stored_namespaces(session, ns))

    def list_namespaces(self, parent: NamespaceLike = ()) -> list[Namespace]:
        """The direct children of ``parent`` (of the root when empty), sorted."""
        if not parent:
            with self._db.read("list namespaces") as session:
                rows = session.query(sql.ALL_TABLE_NAMESPACES, (self.name,))
                rows += session.query(sql.ALL_PROPERTY_NAMESPACES, (self.name,))
            return child_namespaces((), (r[0] for r in rows))
        ns = to_namespace(parent)
        with self._db.read(f"list namespaces in {namespace_to_string(ns)}") as session:
            stored = self._existing_namespaces(session, ns)
        return child_namespaces(ns, map(namespace_to_string, stored))

    def load_namespace_properties(self, namespace: NamespaceLike) -> dict[str, str]:
        """The namespace's properties, without the reserved ``exists``."""
        ns = to_namespace(namespace)
        with self._db.read(f"load namespace {namespace_to_string(ns)}") as session:
            self._existing_namespaces(session, ns)
            return self._namespace_properties(session, ns)

    def update_namespace_properties(
        self,
        namespace: NamespaceLike,
        updates: Mapping[str, str] | None = None,
        removals: Iterable[str] = (),
    ) -> PropertiesUpdate:
        """Set ``updates`` and remove ``removals``, in one transaction."""
        ns = to_namespace(namespace)
        updates = _checked_properties(updates or {}, ns)
        removals = _checked_removals(removals, updates, ns)
        ns_text = namespace_to_string(ns)
        with self._db.write(f"update namespace {ns_text}") as session:
            session.lock(self._namespace_lock(ns))
            self._existing_namespaces(session, ns)
            current = self._namespace_properties(session, ns)
            for key in removals:
                session.execute(sql.DELETE_NAMESPACE_PROPERTY, (self.name, ns_text, key))
            for key, value in updates.items():
                session.execute(sql.UPSERT_NAMESPACE_PROPERTY, (self.name, ns_text, key, value))
            session.execute(sql.INSERT_NAMESPACE_PROPERTY_IF_MISSING, (self.name, ns_text, EXISTS_PROPERTY, "true"))
        return PropertiesUpdate(
            updated=tuple(sorted(updates)),
            removed=tuple(sorted(k for k in removals if k in current)),
            missing=tuple(sorted(k for k in removals if k not in current)),
        )

    def drop_namespace(self, namespace: NamespaceLike) -> None:
        """Drop an empty namespace: no tables, no views, no child namespaces."""
        ns = to_namespace(namespace)
        ns_text = namespace_to_string(ns)
        with self._db.write(f"drop namespace {ns_text}") as session:
            session.lock(self._namespace_lock(ns))
            stored = self._existing_namespaces(session, ns)
            rows = session.query(sql.COUNT_NAMESPACE_ROWS, (self.name, ns_text))[0][0]
            if rows:
                raise NamespaceNotEmpty(ns_text, f"it holds {rows} table(s) or view(s)")
            children = sorted({namespace_to_string(n) for n in stored if n != ns})
            if children:
                raise NamespaceNotEmpty(ns_text, f"it has child namespaces {children}")
            session.execute(sql.DELETE_NAMESPACE, (self.name, ns_text))

    # -- tables ----------------------------------------------------------------

    def default_table_location(self, identifier: TableIdentifierLike) -> str:
        """``<warehouse>/<level>/.../<table>``, the location Java's JdbcCatalog picks too."""
        ident = to_table_identifier(identifier)
        return "/".join((self.warehouse.rstrip("/"), *ident.namespace, ident.name))

    def create_table(
        self,
        identifier: TableIdentifierLike,
        schema: Schema,
        spec: PartitionSpec = UNPARTITIONED_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Mapping[str, str] | None = None,
        location: str | None = None,
    ) -> LoadedTable:
        """Write the first metadata file of a new table, then add the table's row.

        The location is ``location``, else the namespace's ``location``
        property plus the table name, else :meth:`default_table_location`.
        """
        ident = to_table_identifier(identifier)
        with self._db.read(f"create table {ident}") as session:
            self._existing_namespaces(session, ident.namespace)
            if self._any_row(session, ident) is not None:
                raise TableAlreadyExists(str(ident))
            table_location = (location or self._namespace_table_location(session, ident)).rstrip("/")
        metadata = new_table_metadata(schema, spec, sort_order, table_location, properties)
        metadata_location = f"{metadata_dir(metadata)}/{metadata_file_name(0)}"
        check_location(metadata_location, f"metadata location of table {ident}")
        io = FileIO.for_location(metadata_location)
        write_table_metadata(io, metadata_location, metadata)
        self._insert_table_row(ident, metadata_location, io)
        return LoadedTable(metadata_location, metadata, io)

    def register_table(self, identifier: TableIdentifierLike, metadata_location: str) -> LoadedTable:
        """Add a table whose current metadata file already exists (it is read to check it)."""
        ident = to_table_identifier(identifier)
        check_location(metadata_location, f"metadata location of table {ident}")
        io = FileIO.for_location(metadata_location)
        metadata = read_table_metadata(io, metadata_location)
        self._insert_table_row(ident, metadata_location, None)
        return LoadedTable(metadata_location, metadata, io)

    def load_pointer(self, identifier: TableIdentifierLike) -> TablePointer:
        """The table's row, without reading any file."""
        ident = to_table_identifier(identifier)
        with self._db.read(f"load table {ident}") as session:
            return self._pointer(session, ident)

    def load_table(self, identifier: TableIdentifierLike) -> LoadedTable:
        """The table's current metadata location and metadata (its file read only once: see MetadataCache)."""
        table = str(to_table_identifier(identifier))
        location = self.load_pointer(table).metadata_location
        loaded = self._loaded.get(table, location)
        if loaded is None:
            io = FileIO.for_location(location)
            loaded = LoadedTable(location, read_table_metadata(io, location), io)
            self._loaded.put(table, loaded)
        return loaded

    def table_exists(self, identifier: TableIdentifierLike) -> bool:
        ident = to_table_identifier(identifier)
        with self._db.read(f"check table {ident}") as session:
            return bool(session.query(sql.GET_TABLE, self._row_key(ident)))

    def list_tables(self, namespace: NamespaceLike) -> list[TableIdentifier]:
        """The tables directly in ``namespace`` (not in its children), by name."""
        ns = to_namespace(namespace)
        ns_text = namespace_to_string(ns)
        with self._db.read(f"list tables in {ns_text}") as session:
            self._existing_namespaces(session, ns)
            rows = session.query(sql.LIST_TABLES, (self.name, ns_text))
        return [TableIdentifier(ns, r[0]) for r in rows]

    def rename_table(self, source: TableIdentifierLike, target: TableIdentifierLike) -> None:
        """Give a table another name, perhaps in another (existing) namespace; files stay put."""
        src, dst = to_table_identifier(source), to_table_identifier(target)
        with self._db.write(f"rename table {src} to {dst}") as session:
            session.lock(self._namespace_lock(dst.namespace))
            self._pointer(session, src)
            if src == dst:
                return
            self._existing_namespaces(session, dst.namespace)
            try:
                changed = session.execute(sql.RENAME_TABLE, (dst.namespace_string, dst.name, *self._row_key(src)))
            except DuplicateKeyError as e:
                raise TableAlreadyExists(str(dst)) from e
            _expect_one_row(changed, f"rename table {src} to {dst}")

    def drop_table(self, identifier: TableIdentifierLike) -> None:
        """Remove the table's row; its files are left alone."""
        ident = to_table_identifier(identifier)
        with self._db.write(f"drop table {ident}") as session:
            changed = session.execute(sql.DROP_TABLE, self._row_key(ident))
            if changed == 0:
                raise NoSuchTable(str(ident))
            _expect_one_row(changed, f"drop table {ident}")

    def stage(self, base: LoadedTable, updated: TableMetadata, files: WrittenFiles) -> LoadedTable:
        """Write ``updated`` as the table's next metadata version, logging the file it replaces."""
        previous = base.metadata
        stamp = max(now_ms(), updated.last_updated_ms, previous.last_updated_ms)
        metadata = updated.with_metadata_log(base.metadata_location, timestamp_ms=previous.last_updated_ms)
        metadata = metadata.with_last_updated_ms(stamp)
        compressed = table_properties.METADATA_COMPRESSION.read(metadata.properties) == "gzip"
        name = metadata_file_name(parse_metadata_version(base.metadata_location) + 1, compressed)
        location = files.add(f"{metadata_dir(metadata)}/{name}")
        write_table_metadata(files.io, location, metadata)
        return LoadedTable(location, metadata, base.io)

    def commit(self, identifier: TableIdentifierLike, base: LoadedTable, staged: LoadedTable) -> LoadedTable:
        """Swap the staged metadata file in: :meth:`swap_metadata_location`."""
        self.swap_metadata_location(identifier, base.metadata_location, staged.metadata_location)
        self._loaded.put(str(to_table_identifier(identifier)), staged)  # found without reading it back
        return staged

    def swap_metadata_location(
        self, identifier: TableIdentifierLike, expected_location: str, new_location: str
    ) -> None:
        """Commit: move the pointer from ``expected_location`` to ``new_location``, atomically.

        Raises :class:`CommitConflict` when the pointer is elsewhere (nothing
        changed), :class:`NoSuchTable` when the table is gone, and
        :class:`CommitStateUnknown` when the database failed after the UPDATE
        was sent; a :class:`CatalogDatabaseError` before that means nothing
        was sent, so nothing changed.
        """
        ident = to_table_identifier(identifier)
        check_location(new_location, f"new metadata location of table {ident}")
        if new_location == expected_location:
            raise InvalidArgument(f"commit to table {ident}: the new metadata location equals the expected one")
        table = str(ident)
        if self._group is not None:
            self._group.swap(Swap(ident, expected_location, new_location))
            return
        try:
            with self._db.write(f"commit to table {table}") as session:
                try:
                    changed = session.execute(
                        sql.SWAP_METADATA_LOCATION,
                        (new_location, expected_location, *self._row_key(ident), expected_location),
                    )
                except CatalogDatabaseError as e:
                    raise CommitStateUnknown(table, expected_location, new_location, e.reason) from e
                if changed != 1:
                    self._raise_swap_failure(session, ident, expected_location, changed)
        except CommitOutcomeUnknownError as e:
            raise CommitStateUnknown(table, expected_location, new_location, e.reason) from e

    def _swap_group(self, group: list[Swap]) -> None:
        """Every swap of ``group`` in one write transaction (:mod:`commit.catalog.sql.group_commit`): a swap
        that matches no row gets its own error, and the others commit. A database error while the UPDATEs run
        rolls them all back, and :func:`_group_failure` makes it each one's unknown outcome."""
        sent = False
        try:
            with self._db.write(f"commit to {len(group)} table(s)") as session:
                for swap in group:
                    sent = True
                    self._swap_in(session, swap)
        except CatalogDatabaseError as error:
            if sent:
                raise _SentAndFailed(error.operation, error.reason) from error
            raise

    def _swap_in(self, session: Session, swap: Swap) -> None:
        """One swap of a group: its UPDATE, and its own error where it matched no row."""
        ident = swap.identifier
        params = (swap.new_location, swap.expected_location, *self._row_key(ident), swap.expected_location)
        changed = session.execute(sql.SWAP_METADATA_LOCATION, params)
        if changed > 1:
            raise CatalogDatabaseError(f"commit to table {ident}", f"{changed} rows matched one primary key")
        if changed == 0:  # nothing changed for this table: its error is its own, and the others go on
            try:
                self._raise_swap_failure(session, ident, swap.expected_location, changed)
            except (CommitConflict, NoSuchTable, CatalogDatabaseError) as error:
                swap.error = error

    # -- helpers ---------------------------------------------------------------

    def _row_key(self, ident: TableIdentifier) -> tuple[str, str, str]:
        return (self.name, ident.namespace_string, ident.name)

    def _namespace_lock(self, ns: Namespace) -> str:
        return f"floe:namespace:{self.name}:{namespace_to_string(ns)}"

    def _stored_namespaces(self, session: Session, ns: Namespace) -> list[Namespace]:
        """Every stored namespace that is ``ns`` or below it; empty when ``ns`` does not exist."""
        params = (self.name, namespace_to_string(ns), like_children_pattern(ns))
        rows = session.query(sql.TABLE_NAMESPACES_AT_OR_BELOW, params)
        rows += session.query(sql.PROPERTY_NAMESPACES_AT_OR_BELOW, params)
        candidates = {namespace_from_string(r[0]) for r in rows}
        return sorted(n for n in candidates if is_at_or_below(n, ns))

    def _existing_namespaces(self, session: Session, ns: Namespace) -> list[Namespace]:
        """Like :meth:`_stored_namespaces`, but :class:`NoSuchNamespace` when there are none."""
        stored = self._stored_namespaces(session, ns)
        if not stored:
            raise NoSuchNamespace(namespace_to_string(ns))
        return stored

    def _namespace_properties(self, session: Session, ns: Namespace) -> dict[str, str]:
        rows = session.query(sql.GET_NAMESPACE_PROPERTIES, (self.name, namespace_to_string(ns)))
        # Java's schema lets property_value be NULL; such a row carries no value to return.
        return {k: v for k, v in rows if k != EXISTS_PROPERTY and v is not None}

    def _namespace_table_location(self, session: Session, ident: TableIdentifier) -> str:
        base = self._namespace_properties(session, ident.namespace).get(LOCATION_PROPERTY)
        return f"{base.rstrip('/')}/{ident.name}" if base else self.default_table_location(ident)

    def _any_row(self, session: Session, ident: TableIdentifier) -> tuple[object, ...] | None:
        """The row of a table *or view* of that name, if any."""
        rows = session.query(sql.GET_ANY_ROW, self._row_key(ident))
        return rows[0] if rows else None

    def _pointer(self, session: Session, ident: TableIdentifier) -> TablePointer:
        rows = session.query(sql.GET_TABLE, self._row_key(ident))
        if not rows:
            raise NoSuchTable(str(ident))
        location, previous = rows[0]
        if not location:
            raise NoSuchTable(str(ident), "its row has no metadata location")
        return TablePointer(location, previous)

    def _insert_table_row(self, ident: TableIdentifier, metadata_location: str, written_by_us: FileIO | None) -> None:
        """Add the table's row; deletes our new metadata file when the row surely was not added."""
        try:
            with self._db.write(f"create table {ident}") as session:
                session.lock(self._namespace_lock(ident.namespace))
                self._existing_namespaces(session, ident.namespace)
                try:
                    session.execute(sql.INSERT_TABLE, (*self._row_key(ident), metadata_location))
                except DuplicateKeyError as e:
                    raise TableAlreadyExists(str(ident)) from e
        except CommitOutcomeUnknownError:
            raise  # the row may exist and point at the file: keep it
        except (NoSuchNamespace, TableAlreadyExists, CatalogDatabaseError):
            if written_by_us is not None:
                _delete_orphan(written_by_us, metadata_location)
            raise

    def _raise_swap_failure(self, session: Session, ident: TableIdentifier, expected: str, changed: int) -> None:
        if changed > 1:
            raise CatalogDatabaseError(f"commit to table {ident}", f"{changed} rows matched one primary key")
        row = self._any_row(session, ident)
        if row is None or row[0] == sql.VIEW_TYPE:
            raise NoSuchTable(str(ident), "it was dropped or never existed")
        raise CommitConflict(str(ident), expected, self._pointer(session, ident).metadata_location)


class _SentAndFailed(CatalogDatabaseError):
    """A group's transaction failed after its first UPDATE was sent (rolled back, or its COMMIT failed)."""


def _group_failure(swap: Swap, error: BaseException) -> BaseException:
    """What a swap ends with when its group's transaction failed, as a swap of its own would end: an
    unknown outcome once anything was sent, the database's error where nothing was (it never began)."""
    if isinstance(error, (_SentAndFailed, CommitOutcomeUnknownError)):
        return CommitStateUnknown(str(swap.identifier), swap.expected_location, swap.new_location, error.reason)
    if isinstance(error, CatalogDatabaseError):
        return CatalogDatabaseError(f"commit to table {swap.identifier}", error.reason)
    return error


def _checked_properties(properties: Mapping[str, str], ns: Namespace) -> dict[str, str]:
    """Namespace properties that fit the schema, without the reserved key."""
    checked: dict[str, str] = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise InvalidArgument(
                f"namespace {namespace_to_string(ns)!r}: property {key!r} must map a non-empty string to a string"
            )
        if key == EXISTS_PROPERTY:
            raise InvalidArgument(f"namespace {namespace_to_string(ns)!r}: property {key!r} is reserved")
        check_name_length(key, "property key")
        if len(value) > 1000:
            raise InvalidArgument(
                f"namespace {namespace_to_string(ns)!r}: value of {key!r} is longer than 1000 characters"
            )
        checked[key] = value
    return checked


def _checked_removals(removals: Iterable[str], updates: Mapping[str, str], ns: Namespace) -> tuple[str, ...]:
    keys = tuple(dict.fromkeys(removals))
    if EXISTS_PROPERTY in keys:
        raise InvalidArgument(f"namespace {namespace_to_string(ns)!r}: property {EXISTS_PROPERTY!r} is reserved")
    both = sorted(set(keys) & set(updates))
    if both:
        raise InvalidArgument(f"namespace {namespace_to_string(ns)!r}: properties {both} are both updated and removed")
    return keys


def _expect_one_row(changed: int, operation: str) -> None:
    if changed != 1:
        raise CatalogDatabaseError(operation, f"{changed} rows changed where one was expected")


def _delete_orphan(io: FileIO, location: str) -> None:
    """Best effort: a file no table points to is garbage, not a correctness problem."""
    try:
        io.delete(location)
    except TableError as e:
        log.warning("could not delete unused metadata file %s: %s", location, e)
