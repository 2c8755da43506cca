"""Floe's REST catalog client against Iceberg's own REST catalog server (a real server, from Maven).

Namespaces and tables through the protocol; Floe's commits (appends, row
deltas, expiry) applied by the server as requirements and updates; a lost
race is a 409 that the committer retries after re-validating; pyiceberg's REST
catalog reads what Floe committed.
"""

from __future__ import annotations

import threading
import uuid
from typing import Iterator

import pytest

from commit.errors import CommitConflict, NamespaceAlreadyExists, NoSuchTable, TableAlreadyExists
from commit.operations.fast_append import FastAppend
from commit.operations.row_delta import RowDelta
from commit.catalog.rest.catalog import RestCatalog
from compaction.maintenance.expire_snapshots import ExpiryPolicy, expire_snapshots
from tests.commit.producer_support import SCHEMA, CommitTable
from tests.support.rest_catalog import RestCatalogServer


@pytest.fixture()
def rest_server(rest_catalog_server: RestCatalogServer) -> RestCatalogServer:
    return rest_catalog_server


@pytest.fixture()
def catalog(rest_server: RestCatalogServer) -> Iterator[RestCatalog]:
    with RestCatalog(rest_server.uri, rest_server.warehouse) as opened:
        yield opened


def fresh(name: str = "t") -> str:
    return f"ns_{uuid.uuid4().hex[:8]}.{name}"


def test_namespaces_and_tables_through_the_protocol(catalog: RestCatalog) -> None:
    ident = fresh()
    namespace = ident.split(".")[0]
    catalog.create_namespace(namespace, {"owner": "floe"})
    assert catalog.namespace_exists(namespace) and (namespace,) in catalog.list_namespaces()
    with pytest.raises(NamespaceAlreadyExists):
        catalog.create_namespace(namespace)
    assert not catalog.table_exists(ident)
    loaded = catalog.create_table(ident, SCHEMA)
    assert catalog.table_exists(ident) and [str(t) for t in catalog.list_tables(namespace)] == [ident]
    assert loaded.metadata.schema() == SCHEMA, "Floe's field ids are kept (the table is registered, not created)"
    assert loaded.metadata_location.startswith(catalog.default_table_location(ident))
    with pytest.raises(TableAlreadyExists):
        catalog.create_table(ident, SCHEMA)
    catalog.drop_table(ident)
    with pytest.raises(NoSuchTable):
        catalog.load_table(ident)


def test_floe_commits_are_applied_by_the_server(catalog: RestCatalog) -> None:
    table = CommitTable.create(catalog, fresh())  # type: ignore[arg-type]
    first_data, first = table.append([1, 2, 3])
    _, second = table.append([4, 5])
    table.commit(RowDelta([], [table.write_position_deletes(first_data, [1])]))
    metadata = table.metadata()
    assert table.ids() == [1, 3, 4, 5]
    assert [s.sequence_number for s in metadata.snapshots] == [1, 2, 3]
    assert metadata.snapshots[1].parent_snapshot_id == first.snapshot_id
    assert table.metadata_location().endswith(".metadata.json") and "00003" in table.metadata_location()
    expired = expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=1))  # type: ignore[arg-type]
    assert second.snapshot_id in expired.expired_snapshot_ids
    assert [s.snapshot_id for s in table.metadata().snapshots] == [table.current().snapshot_id]
    assert table.ids() == [1, 3, 4, 5]


def test_racing_commits_conflict_on_the_server_and_every_one_lands(rest_server: RestCatalogServer) -> None:
    """Four threads with their own clients append at once: each 409 is re-validated and retried."""
    with RestCatalog(rest_server.uri, rest_server.warehouse) as setup:
        table = CommitTable.create(setup, fresh(), properties={"commit.retry.num-retries": "50",  # type: ignore[arg-type]
                                                               "commit.retry.min-wait-ms": "5"})
    conflicts: list[int] = []
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        with RestCatalog(rest_server.uri, rest_server.warehouse) as own:
            mine = CommitTable(own, table.identifier, table.io)  # type: ignore[arg-type]
            try:
                for batch in range(5):
                    data = mine.write_data([index * 100 + batch])
                    mine.commit(FastAppend([data]), before_commit=lambda pending: conflicts.append(pending.attempt))
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert errors == []
    metadata = table.metadata()
    assert sorted(table.ids()) == sorted(i * 100 + b for i in range(4) for b in range(5))
    assert [s.sequence_number for s in metadata.snapshots] == list(range(1, 21)), "no gap, nothing lost"
    assert max(conflicts) > 1, "the writers raced: some commit needed a second attempt"


def test_a_stale_base_is_a_conflict_and_changes_nothing(catalog: RestCatalog) -> None:
    """A writer that re-sends a commit on a base that moved: ``main`` is not where it asserts."""
    table = CommitTable.create(catalog, fresh())  # type: ignore[arg-type]
    table.append([1])
    base = catalog.load_table(table.identifier)
    table.append([2])
    moved = catalog.load_table(table.identifier)
    with pytest.raises(CommitConflict, match="conflicts"):
        catalog.commit_metadata(table.identifier, base.metadata_location, base.metadata, moved.metadata)
    assert catalog.load_table(table.identifier)[:2] == moved[:2]


def test_pyiceberg_reads_what_floe_committed_through_rest(catalog: RestCatalog, rest_server: RestCatalogServer) -> None:
    from pyiceberg.catalog import load_catalog

    table = CommitTable.create(catalog, fresh())  # type: ignore[arg-type]
    data, _ = table.append([1, 2, 3])
    table.commit(RowDelta([], [table.write_position_deletes(data, [0])]))
    reader = load_catalog("rest", type="rest", uri=rest_server.uri, warehouse=rest_server.warehouse)
    rows = reader.load_table(table.identifier).scan().to_arrow()
    assert sorted(rows["id"].to_pylist()) == [2, 3]


@pytest.mark.parametrize("loss", ["503", "silence"])
def test_a_commit_whose_answer_is_lost_is_checked_not_repeated(rest_server: RestCatalogServer, loss: str) -> None:
    """The server applies the batch's commit; the client gets a 503, or nothing until its timeout.
    The committer reloads, finds its batch in the table and reports success: one snapshot, no duplicate."""
    from commit.exactly_once import batch_summary
    from commit.catalog.rest.client import RestClient
    from tests.support.dropping_proxy import DroppingProxy

    with RestCatalog(rest_server.uri, rest_server.warehouse) as setup:
        table = CommitTable.create(setup, fresh())  # type: ignore[arg-type]
        table.append([1])
    ident = table.identifier.split(".")
    commit_path = f"/v1/namespaces/{ident[0]}/tables/{ident[1]}"
    with DroppingProxy(rest_server.uri, silence_s=4.0) as proxy:
        client = RestClient(proxy.uri, read_timeout_s=2.0)
        with RestCatalog(proxy.uri, rest_server.warehouse, client=client) as lossy:
            mine = CommitTable(lossy, table.identifier, table.io)  # type: ignore[arg-type]
            data = mine.write_data([2, 3])
            proxy.rule = lambda method, path: loss if method == "POST" and path == commit_path else None
            snapshot = mine.commit(FastAppend([data]), snapshot_properties=batch_summary("w1", 7, {"t": {0: (0, 2)}}))
            proxy.rule = lambda method, path: None
    assert [(m, p) for m, p, status in proxy.lost] == [("POST", commit_path)] and proxy.lost[0][2] == 200
    metadata = table.metadata()
    batches = [s for s in metadata.snapshots if s.summary.get("floe.batch-id") == "7"]
    assert [s.snapshot_id for s in batches] == [snapshot.snapshot_id], "the batch landed exactly once"
    assert table.ids() == [1, 2, 3]
