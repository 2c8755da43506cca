"""Faults on the exactly-once commit path: crashes, unknown outcomes, replays, racing replicas.

The generic commit-loop faults are in ``test_snapshot_producer.py`` (lost
CAS race, crash before the swap, the three unknown-outcome cases) and the
batch verdicts in ``test_exactly_once.py`` (replay skipped, stale writer
fenced). Here the same faults hit ``commit_batch``, where what matters is
what the caller does next: it replays the batch, and the table decides.
"""

from __future__ import annotations

import multiprocessing
import queue
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.batch_commit import BatchCommitStatus, commit_batch
from commit.errors import CatalogDatabaseError, CommitNotApplied, CommitStateUnknown
from commit.exactly_once import BATCH_ID, committed_offsets
from commit.identifiers import TableIdentifierLike
from commit.metadata_committer import PendingCommit
from table.arrow_schema import cast_to_schema
from table.io import FileIO
from table.parquet.partitioned import write_partitioned
from tests.commit.conftest import raw_sql
from tests.commit.producer_support import CommitTable

OFFSETS = {"events": {0: (0, 10)}}
NEXT_OFFSETS = {"events": {0: (10, 20)}}


class SimulatedCrash(BaseException):
    """The process dies here: nothing may clean up after it."""


def reachable_metadata(table: CommitTable) -> set[str]:
    """Every metadata-directory file the table references (metadata log, lists, manifests)."""
    metadata = table.metadata()
    found = {e.metadata_file for e in metadata.metadata_log} | {table.metadata_location()}
    found |= {s.manifest_list for s in metadata.snapshots}
    found |= {m.manifest_path for s in metadata.snapshots for m in table.manifests(s)}
    return found


def orphans(table: CommitTable) -> set[str]:
    return {p for p in table.files_on_disk() if "/metadata/" in p} - reachable_metadata(table)


def batch(table: CommitTable, batch_id: int, offsets: dict, ids: list[int], **options: Any):  # type: ignore[no-untyped-def]
    return commit_batch(table.catalog, table.identifier, "query-1", batch_id, offsets, [table.write_data(ids)], **options)


# --------------------------------------------------------------------------
# A crash after the manifests are written, before the swap
# --------------------------------------------------------------------------


def test_crash_before_the_swap_changes_nothing_lists_the_orphans_and_the_replay_lands(catalog: Catalog) -> None:
    table = CommitTable.create(catalog)
    batch(table, 0, OFFSETS, [1])
    pointer = table.metadata_location()

    def crash(pending: PendingCommit) -> None:
        raise SimulatedCrash()

    with pytest.raises(SimulatedCrash) as caught:
        batch(table, 1, NEXT_OFFSETS, [2], before_commit=crash)

    assert table.metadata_location() == pointer and table.ids() == [1]
    left = orphans(table)
    assert len(left) == 3  # the new manifest, the manifest list, the metadata file
    [note] = caught.value.__notes__
    assert all(p in note for p in left)

    # The restarted writer replays the batch: it lands once, next to the dead attempt's orphans.
    replay = batch(table, 1, NEXT_OFFSETS, [2])
    assert replay.committed and table.ids() == [1, 2]
    assert orphans(table) == left
    assert committed_offsets(table.metadata()) == {"events": {0: 20}}


# --------------------------------------------------------------------------
# Unknown commit outcomes: checked by reloading, then settled by replaying
# --------------------------------------------------------------------------


class DiesAfterSwap(SqlCatalog):
    """The swap happens, then the connection dies before the answer arrives."""

    def swap_metadata_location(self, identifier: TableIdentifierLike, expected_location: str, new_location: str) -> None:
        super().swap_metadata_location(identifier, expected_location, new_location)
        raise CommitStateUnknown(str(identifier), expected_location, new_location, "connection lost after COMMIT")


class UnreachableAfterSwap(DiesAfterSwap):
    """As :class:`DiesAfterSwap`, and the database stays unreachable until ``back()``."""

    down = False

    def swap_metadata_location(self, identifier: TableIdentifierLike, expected_location: str, new_location: str) -> None:
        self.down = True
        super().swap_metadata_location(identifier, expected_location, new_location)

    def load_table(self, identifier: TableIdentifierLike):  # type: ignore[no-untyped-def]
        if self.down:
            raise CatalogDatabaseError(f"load table {identifier}", "server closed the connection")
        return super().load_table(identifier)


def test_unknown_outcome_that_landed_is_committed_and_its_replay_skipped(catalog_uri: str, warehouse: Path) -> None:
    with DiesAfterSwap(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable.create(catalog)
        result = batch(table, 0, OFFSETS, [1])
        assert result.committed and table.current() == result.snapshot
        replay = batch(table, 0, OFFSETS, [1])
        assert replay.status == BatchCommitStatus.SKIPPED and replay.snapshot == result.snapshot
        assert table.ids() == [1]


def test_unknown_outcome_that_cannot_be_checked_is_raised_then_settled_by_the_replay(
    sqlite_uri: str, warehouse: Path
) -> None:
    with UnreachableAfterSwap(sqlite_uri, str(warehouse)) as catalog:
        table = CommitTable.create(catalog, properties={"commit.status-check.num-retries": "1",
                                                        "commit.status-check.min-wait-ms": "1"})
        with pytest.raises(CommitStateUnknown) as caught:
            batch(table, 0, OFFSETS, [1])
        notes = "\n".join(caught.value.__notes__)
        assert "could not be checked" in notes

        catalog.down = False  # the database is back; the writer replays instead of guessing
        kept = reachable_metadata(table) - {table.metadata().metadata_log[0].metadata_file}
        assert len(kept) == 3 and all(p in notes for p in kept)  # what the commit wrote was kept: it landed
        replay = batch(table, 0, OFFSETS, [1])
        assert replay.status == BatchCommitStatus.SKIPPED and replay.attempts == 1
        assert table.ids() == [1] and len(table.metadata().snapshots) == 1


def _install_failing_swap(uri: str) -> None:
    """A trigger that makes the swap's UPDATE fail: it did not happen, but the catalog cannot tell."""
    if uri.startswith("sqlite:"):
        raw_sql(uri, "CREATE TRIGGER fail_swap BEFORE UPDATE OF metadata_location ON iceberg_tables "
                     "BEGIN SELECT RAISE(ABORT, 'injected failure'); END")
        return
    raw_sql(uri, "CREATE FUNCTION floe_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$")
    raw_sql(uri, "CREATE TRIGGER fail_swap BEFORE UPDATE ON iceberg_tables FOR EACH ROW EXECUTE FUNCTION floe_fail()")


def test_unknown_outcome_that_did_not_land_is_reported_and_the_replay_commits(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable.create(catalog)
        batch(table, 0, OFFSETS, [1])
        _install_failing_swap(catalog_uri)
        with pytest.raises(CommitNotApplied):
            batch(table, 1, NEXT_OFFSETS, [2])
        assert table.ids() == [1] and orphans(table) == set()

        raw_sql(catalog_uri, "DROP TRIGGER fail_swap" + ("" if catalog_uri.startswith("sqlite:") else " ON iceberg_tables"))
        assert batch(table, 1, NEXT_OFFSETS, [2]).committed
        assert table.ids() == [1, 2]


def test_a_replay_after_a_restart_is_skipped(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as before_restart:
        table = CommitTable.create(before_restart)
        first = batch(table, 0, OFFSETS, [1])
    with SqlCatalog(catalog_uri, str(warehouse)) as after_restart:  # a new process would open a new catalog
        table = CommitTable(after_restart, table.identifier, table.io)
        replay = batch(table, 0, OFFSETS, [1])
        assert replay.status == BatchCommitStatus.SKIPPED and replay.snapshot == first.snapshot
        assert table.ids() == [1]


# --------------------------------------------------------------------------
# Two replicas of one writer racing with the same batches, in two processes
# --------------------------------------------------------------------------

ROUNDS = 3
_SPAWN = multiprocessing.get_context("spawn")


def _replica(uri: str, warehouse: str, name: str, both_written: Any, results: Any) -> None:
    """Commit batches 0..ROUNDS-1 of writer "query-1"; each first attempt waits until the
    other replica has also written its metadata, so both swap from the same base."""
    try:
        with SqlCatalog(uri, warehouse) as catalog:
            table = CommitTable(catalog, "db.t", FileIO.for_location(warehouse))
            outcomes = []
            for n in range(ROUNDS):
                md = table.metadata()
                rows = pa.table({"id": pa.array([n * 10, n * 10 + 1], pa.int64()), "data": [name, name], "category": ["a", "a"]})
                [data_file] = write_partitioned(table.io, md.location, md.schema(), md.spec(), [cast_to_schema(rows, md.schema())])

                def race(pending: PendingCommit) -> None:
                    if pending.attempt == 1:
                        both_written.wait(timeout=60)

                offsets = {"events": {0: (n * 10, n * 10 + 10)}}
                result = commit_batch(catalog, "db.t", "query-1", n, offsets, [data_file], before_commit=race)
                outcomes.append((result.status.value, result.snapshot.snapshot_id, result.attempts))
        results.put(("ok", name, outcomes))
    except BaseException as e:  # reported to the test
        results.put(("error", name, repr(e)))


def test_two_processes_racing_the_same_batches_land_each_exactly_once(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        CommitTable.create(catalog, properties={"commit.retry.min-wait-ms": "5"})
    both_written = _SPAWN.Barrier(2)
    results = _SPAWN.Queue()
    procs = [_SPAWN.Process(target=_replica, args=(catalog_uri, str(warehouse), name, both_written, results))
             for name in ("replica-a", "replica-b")]
    for p in procs:
        p.start()
    try:
        reports = {r[1]: r for r in (results.get(timeout=180) for _ in procs)}
    except queue.Empty as e:
        raise AssertionError("a replica did not report back") from e
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [r for r in reports.values() if r[0] != "ok"] == []

    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable(catalog, "db.t", FileIO.for_location(str(warehouse)))
        snapshots = table.metadata().snapshots
        assert [s.summary[BATCH_ID] for s in snapshots] == [str(n) for n in range(ROUNDS)]
        rows = {r["id"]: r["data"] for r in table.rows()}
        assert len(table.rows()) == len(rows) == 2 * ROUNDS
        for n in range(ROUNDS):
            a, b = reports["replica-a"][2][n], reports["replica-b"][2][n]
            assert sorted([a[0], b[0]]) == ["committed", "skipped"]
            assert a[1] == b[1] == snapshots[n].snapshot_id  # the loser reports the winner's snapshot
            winner, loser = (a, b) if a[0] == "committed" else (b, a)
            assert winner[2] == 1 and loser[2] == 2  # the loser lost the swap, re-checked, and skipped
            name = "replica-a" if winner is a else "replica-b"
            assert rows[n * 10] == rows[n * 10 + 1] == name
        assert orphans(table) == set()
