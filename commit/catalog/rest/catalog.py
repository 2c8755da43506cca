"""An Iceberg REST catalog (the OpenAPI ``rest-catalog-open-api.yaml``), with the SQL catalog's verbs.

Tables, namespaces and loads map one to one onto REST routes. Commits differ:
the SQL catalog swaps in a metadata file that Floe wrote, while a REST server
applies a change and writes the file itself. :meth:`RestCatalog.commit_metadata`
sends the change from a base to a new metadata (:mod:`commit.catalog.rest.updates`)
with the requirements that make it a compare-and-swap, and returns the
server's metadata location and metadata.

A new table's first metadata file is written by Floe, exactly as the SQL
catalog writes it, then registered (``register``): a REST ``create`` would
reassign the field ids that the configuration and the data files rely on.

With access delegation the server vends storage credentials with each load;
they are kept for this process and its Spark tasks
(:mod:`table.storage_credentials`). A new table has none yet, so a staged
create (which commits nothing) asks for them before the first file is
written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Self
from urllib.parse import quote

from commit.catalog.base import SERVER_WRITTEN, LoadedTable, TablePointer, WrittenFiles
from commit.catalog.rest.client import UNKNOWN_OUTCOME_STATUSES, RestCatalogError, RestClient
from commit.catalog.rest.options import RestOptions
from commit.catalog.rest.updates import commit_for
from commit.errors import (
    CommitConflict,
    CommitStateUnknown,
    NamespaceAlreadyExists,
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
    to_namespace,
    to_table_identifier,
)
from table.io import FileIO
from table.locations import metadata_location as metadata_dir
from table.locations import table_file_prefixes
from table.metadata import TableMetadata, metadata_file_name, new_table_metadata
from table.metadata_json import table_metadata_from_json, write_table_metadata
from table.partitioning import UNPARTITIONED_SPEC, PartitionSpec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER, SortOrder
from table.storage_credentials import (
    NO_CREDENTIALS,
    CredentialSource,
    RefreshingCredentials,
    S3Credential,
    StorageCredentials,
    vended_credentials,
)

log = logging.getLogger(__name__)
DEFAULT_SEPARATOR = "%1F"


class RestCatalog:
    """A REST catalog at ``uri``; ``warehouse`` is sent to ``/v1/config`` and roots new tables."""

    backend = "rest"

    def __init__(
        self,
        uri: str,
        warehouse: str,
        name: str = "floe",
        *,
        options: RestOptions | None = None,
        client: RestClient | None = None,
    ) -> None:
        self.uri = uri
        self.warehouse = warehouse
        self.name = name
        self.options = options or RestOptions()
        self._client = client or RestClient(
            uri,
            self.options.request_headers(),
            auth=self.options.authorizer(uri),
            read_timeout_s=self.options.read_timeout_s,
            ca_file=self.options.ca_file,
        )
        config = (
            self._client.request(
                "load the catalog configuration", "GET", "v1/config", params={"warehouse": warehouse}
            ).body
            or {}
        )
        settings = {**config.get("defaults", {}), **config.get("overrides", {})}
        chosen = self.options.prefix if self.options.prefix is not None else settings.get("prefix", "")
        self._root = "v1/" + (f"{quote(chosen, safe='')}/" if chosen else "")
        self._separator = settings.get("namespace-separator", DEFAULT_SEPARATOR)
        self.endpoints = frozenset(config.get("endpoints", ()))
        self.leases = ProcessLeases()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # -- paths ------------------------------------------------------------------

    def _namespace_path(self, namespace: Namespace) -> str:
        return f"{self._root}namespaces/{self._separator.join(quote(level, safe='') for level in namespace)}"

    def _table_path(self, ident: TableIdentifier) -> str:
        return f"{self._namespace_path(ident.namespace)}/tables/{quote(ident.name, safe='')}"

    # -- namespaces -------------------------------------------------------------

    def create_namespace(self, namespace: NamespaceLike, properties: Mapping[str, str] | None = None) -> None:
        ns = to_namespace(namespace)
        self._client.request(
            f"create namespace {'.'.join(ns)}",
            "POST",
            f"{self._root}namespaces",
            body={"namespace": list(ns), "properties": dict(properties or {})},
            idempotent_key=True,
            on_error=_namespace_error(ns),
        )

    def namespace_exists(self, namespace: NamespaceLike) -> bool:
        ns = to_namespace(namespace)
        try:
            self._client.request(f"check namespace {'.'.join(ns)}", "GET", self._namespace_path(ns))
        except RestCatalogError as error:
            if error.status == 404:
                return False
            raise
        return True

    def list_namespaces(self, parent: NamespaceLike = ()) -> list[Namespace]:
        ns = to_namespace(parent) if parent else ()
        params = {"parent": "\x1f".join(ns)} if ns else None
        return [
            tuple(n)
            for n in self._paged(
                f"list namespaces of {'.'.join(ns) or 'the root'}", f"{self._root}namespaces", "namespaces", params
            )
        ]

    # -- tables -----------------------------------------------------------------

    def default_table_location(self, identifier: TableIdentifierLike) -> str:
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
        """Write the first metadata file (Floe's ids kept), then register it."""
        ident = to_table_identifier(identifier)
        if self.table_exists(ident):
            raise TableAlreadyExists(str(ident))
        table_location = (location or self.default_table_location(ident)).rstrip("/")
        metadata = new_table_metadata(schema, spec, sort_order, table_location, properties)
        metadata_location = f"{metadata_dir(metadata)}/{metadata_file_name(0)}"
        check_location(metadata_location, f"metadata location of table {ident}")
        credentials = NO_CREDENTIALS
        if self.options.vends_credentials:  # the new table's own keys, before its first file
            credentials = self._stage_create(ident, metadata)
        write_table_metadata(FileIO.for_location(metadata_location, credentials), metadata_location, metadata)
        return self.register_table(ident, metadata_location)

    def _stage_create(self, ident: TableIdentifier, metadata: TableMetadata) -> StorageCredentials:
        """Ask for the new table's storage credentials: a staged create vends them and commits nothing."""
        answer = self._client.request(
            f"stage table {ident}",
            "POST",
            f"{self._namespace_path(ident.namespace)}/tables",
            body={
                "name": ident.name,
                "location": metadata.location,
                "schema": metadata.schema().to_json(),
                "stage-create": True,
            },
            on_error=_table_error(ident, exists=True),
        )
        vended = _vended_in(answer.body, metadata)
        if not vended:
            log.warning(
                "the REST catalog vended no storage credentials for %s; using this process's own", metadata.location
            )
        return StorageCredentials(tuple(vended))

    def register_table(self, identifier: TableIdentifierLike, metadata_location: str) -> LoadedTable:
        ident = to_table_identifier(identifier)
        answer = self._client.request(
            f"register table {ident}",
            "POST",
            f"{self._namespace_path(ident.namespace)}/register",
            body={"name": ident.name, "metadata-location": metadata_location},
            idempotent_key=True,
            on_error=_table_error(ident, exists=True),
        )
        return self._loaded(ident, answer.body)

    def load_table(self, identifier: TableIdentifierLike) -> LoadedTable:
        """The table's current metadata location and metadata, as the server has them."""
        ident = to_table_identifier(identifier)
        answer = self._client.request(
            f"load table {ident}", "GET", self._table_path(ident), on_error=_table_error(ident)
        )
        return self._loaded(ident, answer.body)

    def _loaded(self, ident: TableIdentifier, body: dict[str, Any] | None) -> LoadedTable:
        """A load answer as a table whose FileIO holds the credentials it vended: loading the table again
        refreshes them before they expire."""
        location, metadata = _location_and_metadata(body, str(ident))
        vended = _vended_in(body, metadata)
        credentials: CredentialSource = NO_CREDENTIALS
        if vended:
            credentials = RefreshingCredentials(
                StorageCredentials(tuple(vended)), lambda: self.load_table(ident).io.credentials
            )
        return LoadedTable(location, metadata, FileIO.for_location(location, credentials))

    def load_pointer(self, identifier: TableIdentifierLike) -> TablePointer:
        """Where the table's metadata is now (REST has no cheaper call than a load)."""
        return TablePointer(self.load_table(identifier).metadata_location, None)

    def table_exists(self, identifier: TableIdentifierLike) -> bool:
        try:
            self.load_table(identifier)
        except NoSuchTable:
            return False
        return True

    def list_tables(self, namespace: NamespaceLike) -> list[TableIdentifier]:
        ns = to_namespace(namespace)
        found = self._paged(f"list tables of {'.'.join(ns)}", f"{self._namespace_path(ns)}/tables", "identifiers")
        return [to_table_identifier((*item["namespace"], item["name"])) for item in found]

    def drop_table(self, identifier: TableIdentifierLike) -> None:
        """Forget the table; its files stay (``purgeRequested=false``), as the SQL catalog's drop."""
        ident = to_table_identifier(identifier)
        self._client.request(
            f"drop table {ident}",
            "DELETE",
            self._table_path(ident),
            params={"purgeRequested": "false"},
            idempotent_key=True,
            on_error=_table_error(ident),
        )

    def stage(self, base: LoadedTable, updated: TableMetadata, files: WrittenFiles) -> LoadedTable:
        """Nothing to write: the server writes the metadata file when it applies the change."""
        return LoadedTable(SERVER_WRITTEN, updated, base.io)

    def commit(self, identifier: TableIdentifierLike, base: LoadedTable, staged: LoadedTable) -> LoadedTable:
        """Send the change from ``base`` to ``staged`` to the server; the table keeps its FileIO."""
        location, metadata = self.commit_metadata(identifier, base.metadata_location, base.metadata, staged.metadata)
        return LoadedTable(location, metadata, base.io)

    def commit_metadata(
        self, identifier: TableIdentifierLike, base_location: str, base: TableMetadata, new: TableMetadata
    ) -> tuple[str, TableMetadata]:
        """Apply the change from ``base`` to ``new`` on the server; its (location, metadata).

        :class:`CommitConflict` when a requirement failed (nothing changed),
        :class:`CommitStateUnknown` when the answer was lost or a 5xx: the
        change may have been applied, and the caller must check.
        """
        ident = to_table_identifier(identifier)
        change = commit_for(base, new)
        body = {"identifier": {"namespace": list(ident.namespace), "name": ident.name}, **change.to_json()}
        answer = self._client.request(
            f"commit to table {ident}",
            "POST",
            self._table_path(ident),
            body=body,
            idempotent_key=True,
            on_error=_commit_error(ident, base_location),
        )
        return _location_and_metadata(answer.body, str(ident))

    # -- helpers ----------------------------------------------------------------

    def _paged(self, call: str, path: str, key: str, params: dict[str, str] | None = None) -> list[Any]:
        items: list[Any] = []
        query = dict(params or {})
        while True:
            body = self._client.request(call, "GET", path, params=query).body or {}
            items += body.get(key, [])
            token = body.get("next-page-token")
            if not token:
                return items
            query["pageToken"] = token


def _location_and_metadata(body: dict[str, Any] | None, table: str) -> tuple[str, TableMetadata]:
    if not body or "metadata-location" not in body or "metadata" not in body:
        raise RestCatalogError(f"load table {table}", 200, "", "the answer has no metadata-location and metadata")
    location = body["metadata-location"]
    return location, table_metadata_from_json(body["metadata"], location)


def _vended_in(body: dict[str, Any] | None, metadata: TableMetadata) -> list[S3Credential]:
    """The storage credentials a load or staged-create answer vends for the table's own directories."""
    answer = body or {}
    return vended_credentials(table_file_prefixes(metadata), answer.get("config"), answer.get("storage-credentials"))


def _namespace_error(ns: Namespace):  # -> Callable[[RestCatalogError], Exception]
    def typed(error: RestCatalogError) -> Exception:
        if error.status == 409:
            return NamespaceAlreadyExists(".".join(ns))
        return error

    return typed


def _table_error(ident: TableIdentifier, *, exists: bool = False):  # -> Callable[[RestCatalogError], Exception]
    def typed(error: RestCatalogError) -> Exception:
        if error.status == 404 and "Namespace" in error.kind:
            return NoSuchNamespace(".".join(ident.namespace))
        if error.status == 404:
            return NoSuchTable(str(ident), error.server_message)
        if error.status == 409 and exists:
            return TableAlreadyExists(str(ident))
        return error

    return typed


def _commit_error(ident: TableIdentifier, base_location: str):  # -> Callable[[RestCatalogError], Exception]
    def typed(error: RestCatalogError) -> Exception:
        if error.status == 409:
            conflict = CommitConflict(str(ident), base_location, None)
            conflict.add_note(f"the REST catalog refused it: {error.server_message}")
            return conflict
        if error.status is None or error.status in UNKNOWN_OUTCOME_STATUSES:
            return CommitStateUnknown(str(ident), base_location, SERVER_WRITTEN, str(error))
        if error.status == 404:
            return NoSuchTable(str(ident), error.server_message)
        return error

    return typed


class ProcessLeases:
    """The compactor's lease when the catalog is REST: held in this process only.

    A REST catalog offers no row to lock, so one compactor per table is kept
    by the deployment (one `floe compact` replica, as the manifests run it).
    Two compactors by mistake would still be safe: each commit is a
    compare-and-swap on the server, and the loser re-validates or gives up.
    """

    def __init__(self) -> None:
        self._holders: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self._lock:
            current = self._holders.get(name)
            if current is not None and current[0] != holder and current[1] > time.monotonic():
                return False
            self._holders[name] = (holder, time.monotonic() + ttl_ms / 1000)
            return True

    def renew_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self._lock:
            current = self._holders.get(name)
            if current is None or current[0] != holder or current[1] <= time.monotonic():
                return False
            self._holders[name] = (holder, time.monotonic() + ttl_ms / 1000)
            return True

    def release_lease(self, name: str, holder: str) -> bool:
        with self._lock:
            if self._holders.get(name, ("",))[0] != holder:
                return False
            del self._holders[name]
            return True
