"""The commit loop on a real SQLite catalog and real files.

Lost races are real concurrent commits made from the before-commit hook;
unknown outcomes come from a failing database trigger (the swap did not
happen) or from a catalog whose connection dies right after a swap that did
happen. A crash is a BaseException raised from the hook, which nothing
catches, as if the process had died there.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from pathlib import Path
from typing import Any

import pytest

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.errors import CatalogDatabaseError, CommitNotApplied, CommitStateUnknown, InvalidArgument
from commit.identifiers import TableIdentifierLike
from commit.metadata_committer import PendingCommit
from commit.operations.delete_files import DeleteFiles
from commit.operations.errors import MissingFiles
from commit.operations.fast_append import FastAppend
from commit.operations.merge_append import MergeAppend
from table.io import FileIO
from table.manifest import read_manifest_list
from table.metadata import parse_metadata_version
from tests.commit.conftest import raw_sql
from tests.commit.producer_support import CommitTable


class SimulatedCrash(BaseException):
    """The process dies: nothing may clean up after it."""


def _mtimes(paths: list[str]) -> dict[str, int]:
    return {p: os.stat(p).st_mtime_ns for p in paths}


def test_first_commit_makes_a_complete_snapshot(catalog: Catalog) -> None:
    table = CommitTable.create(catalog)
    created_at = table.metadata_location()
    data_file, snapshot = table.append([1, 2])

    metadata = table.metadata()
    assert snapshot.sequence_number == 1 == metadata.last_sequence_number
    assert snapshot.parent_snapshot_id is None
    assert snapshot.schema_id == metadata.current_schema_id
    assert snapshot.summary["operation"] == "append"
    assert metadata.current_snapshot_id == snapshot.snapshot_id
    location = table.metadata_location()
    assert location.startswith(f"{metadata.location}/metadata/") and parse_metadata_version(location) == 1
    assert [e.metadata_file for e in metadata.metadata_log] == [created_at]
    [manifest] = read_manifest_list(table.io, snapshot.manifest_list)
    assert manifest.sequence_number == 1 and manifest.added_snapshot_id == snapshot.snapshot_id
    assert table.ids() == [1, 2]


def test_second_commit_takes_the_next_sequence_number_and_its_parent(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog)
    _, first = table.append([1])
    _, second = table.append([2])
    assert second.sequence_number == 2 and second.parent_snapshot_id == first.snapshot_id
    assert len(table.manifests()) == 2
    assert table.ids() == [1, 2]


def test_lost_race_refreshes_and_retries_reusing_its_manifest(catalog: Catalog) -> None:
    table = CommitTable.create(catalog)
    table.append([1])
    seen: list[PendingCommit] = []
    manifests_after_first_attempt: dict[str, int] = {}

    def concurrent_writer(pending: PendingCommit) -> None:
        seen.append(pending)
        if pending.attempt == 1:
            manifests_after_first_attempt.update(_mtimes([p for p in producer.written_files() if p.endswith("-m0.avro")]))
            table.append([2])  # another writer wins the race

    producer = table.producer(FastAppend([table.write_data([3])]), before_commit=concurrent_writer)
    snapshot = producer.commit()

    first, second = seen
    concurrent = table.metadata().snapshot_by_id(snapshot.parent_snapshot_id)
    assert concurrent.sequence_number == 2 and snapshot.sequence_number == 3
    assert second.base_location != first.base_location  # refreshed
    assert table.ids() == [1, 2, 3]
    # The manifest of the new file was written once and is the one committed.
    [(manifest_path, mtime)] = manifests_after_first_attempt.items()
    assert _mtimes([manifest_path]) == {manifest_path: mtime}
    committed = read_manifest_list(table.io, snapshot.manifest_list)
    assert committed[0].manifest_path == manifest_path and committed[0].sequence_number == 3
    # The first attempt's manifest list and metadata file are gone; the second's are current.
    first_list = first.metadata.snapshot_by_id(producer.snapshot_id).manifest_list
    assert not Path(first_list).exists() and not Path(first.new_location).exists()
    assert snapshot.manifest_list != first_list
    assert table.metadata_location() == second.new_location
    assert sorted(producer.written_files()) == sorted([manifest_path, snapshot.manifest_list, second.new_location])


def test_retry_revalidates_and_fails_cleanly(catalog: Catalog) -> None:
    table = CommitTable.create(catalog)
    data_file, _ = table.append([1])
    table.append([2])

    def delete_it_first(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            table.commit(DeleteFiles([data_file]))

    before = table.files_on_disk()
    producer = table.producer(DeleteFiles([data_file]), before_commit=delete_it_first)
    with pytest.raises(MissingFiles) as caught:
        producer.commit()

    assert caught.value.paths == {data_file.file_path}
    assert producer.written_files() == []
    concurrent_files = table.files_on_disk() - before
    assert all("snap-" + str(producer.snapshot_id) not in p for p in concurrent_files)
    assert table.current().operation == "delete" and table.ids() == [2]


def test_crash_before_the_swap_leaves_the_table_unchanged_and_lists_orphans(catalog: Catalog) -> None:
    table = CommitTable.create(catalog)
    table.append([1])
    pointer = table.metadata_location()

    def crash(pending: PendingCommit) -> None:
        raise SimulatedCrash()

    producer = table.producer(MergeAppend([table.write_data([2])]), before_commit=crash)
    with pytest.raises(SimulatedCrash):
        producer.commit()

    assert table.metadata_location() == pointer
    assert table.ids() == [1]
    orphans = producer.written_files()
    assert len(orphans) == 3  # the new manifest, the manifest list, the metadata file
    assert all(Path(p).exists() for p in orphans)
    assert sum(p.endswith(".metadata.json") for p in orphans) == 1
    assert sum(f"snap-{producer.snapshot_id}-1-" in p for p in orphans) == 1


def _install_failing_swap(uri: str) -> None:
    """A trigger that makes the swap's UPDATE fail: the catalog cannot say whether it happened."""
    if uri.startswith("sqlite:"):
        raw_sql(
            uri,
            "CREATE TRIGGER fail_swap BEFORE UPDATE OF metadata_location ON iceberg_tables "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        )
        return
    raw_sql(uri, "CREATE FUNCTION floe_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$")
    raw_sql(uri, "CREATE TRIGGER fail_swap BEFORE UPDATE ON iceberg_tables FOR EACH ROW EXECUTE FUNCTION floe_fail()")


def test_unknown_outcome_that_did_not_land_is_cleaned_up(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable.create(catalog)
        table.append([1])
        pointer = table.metadata_location()
        _install_failing_swap(catalog_uri)
        data_file = table.write_data([2])
        producer = table.producer(FastAppend([data_file]))
        with pytest.raises(CommitNotApplied) as caught:
            producer.commit()

        assert isinstance(caught.value.__cause__, CommitStateUnknown)
        assert table.metadata_location() == pointer
        assert producer.written_files() == []
        assert Path(data_file.file_path).exists()


class DiesAfterSwap(SqlCatalog):
    """The database applies the swap, then the connection dies before the answer arrives."""

    def swap_metadata_location(self, identifier: TableIdentifierLike, expected_location: str, new_location: str) -> None:
        super().swap_metadata_location(identifier, expected_location, new_location)
        raise CommitStateUnknown(str(identifier), expected_location, new_location, "connection lost after COMMIT")


def test_unknown_outcome_that_landed_is_a_success(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as setup:
        table = CommitTable.create(setup)
        table.append([1])
    with DiesAfterSwap(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable(catalog, table.identifier, table.io)

        def lose_first_race(pending: PendingCommit) -> None:
            if pending.attempt == 1:
                with SqlCatalog(catalog_uri, str(warehouse)) as other:
                    CommitTable(other, table.identifier, table.io).append([2])

        producer = table.producer(FastAppend([table.write_data([3])]), before_commit=lose_first_race)
        snapshot = producer.commit()

        assert table.current().snapshot_id == snapshot.snapshot_id
        assert table.ids() == [1, 2, 3]
        assert table.metadata_location() in producer.written_files()
        assert len(producer.written_files()) == 3  # the first attempt's list and metadata are gone
        assert all(Path(p).exists() for p in producer.written_files())


class UnreachableAfterUnknown(SqlCatalog):
    """The swap's outcome is unknown and the database stays unreachable for every check."""

    failing = False

    def swap_metadata_location(self, identifier: TableIdentifierLike, expected_location: str, new_location: str) -> None:
        super().swap_metadata_location(identifier, expected_location, new_location)
        self.failing = True
        raise CommitStateUnknown(str(identifier), expected_location, new_location, "connection lost after COMMIT")

    def load_table(self, identifier: TableIdentifierLike):  # type: ignore[no-untyped-def]
        if self.failing:
            raise CatalogDatabaseError(f"load table {identifier}", "server closed the connection")
        return super().load_table(identifier)


def test_unknown_outcome_that_cannot_be_checked_keeps_every_file(sqlite_uri: str, warehouse: Path) -> None:
    with SqlCatalog(sqlite_uri, str(warehouse)) as setup:
        table = CommitTable.create(setup, properties={"commit.status-check.num-retries": "2"})
    with UnreachableAfterUnknown(sqlite_uri, str(warehouse)) as catalog:
        table = CommitTable(catalog, table.identifier, table.io)
        slept: list[float] = []
        producer = table.producer(FastAppend([table.write_data([1])]), sleep=slept.append)
        with pytest.raises(CommitStateUnknown) as caught:
            producer.commit()

    assert "could not be checked" in "\n".join(caught.value.__notes__)
    assert len(slept) == 2 and slept[0] >= 1.0  # status checks wait per commit.status-check.*
    assert len(producer.written_files()) == 3
    assert all(Path(p).exists() for p in producer.written_files())


def test_a_bad_status_check_property_fails_before_the_swap(sqlite_catalog: Catalog) -> None:
    """Read while nothing can have landed: settling an unknown outcome must not fail on it."""
    table = CommitTable.create(sqlite_catalog, properties={"commit.status-check.min-wait-ms": "120000",
                                                           "commit.status-check.max-wait-ms": "1000"})
    pointer = table.metadata_location()
    producer = table.producer(FastAppend([table.write_data([1])]))
    with pytest.raises(InvalidArgument, match="commit.status-check.max-wait-ms=1000"):
        producer.commit()
    assert table.metadata_location() == pointer and producer.written_files() == []


def test_a_producer_commits_once(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog)
    producer = table.producer(FastAppend([table.write_data([1])]))
    producer.commit()
    with pytest.raises(Exception, match="already committed"):
        producer.commit()
    failed = table.producer(FastAppend([table.write_data([2])]), before_commit=_raise_injected)
    with pytest.raises(RuntimeError, match="injected"):
        failed.commit()
    with pytest.raises(Exception, match="a producer commits once"):
        failed.commit()  # its manifests were deleted with the failure; reusing them would corrupt the table


def _raise_injected(pending: PendingCommit) -> None:
    raise RuntimeError("injected failure before the swap")


# --------------------------------------------------------------------------
# Concurrency: several processes appending to one table
# --------------------------------------------------------------------------

WRITERS = 3
COMMITS_PER_WRITER = 6
_SPAWN = multiprocessing.get_context("spawn")


def _append_worker(uri: str, warehouse: str, worker: int, start: Any, results: Any) -> None:
    try:
        with SqlCatalog(uri, warehouse) as catalog:
            table = CommitTable(catalog, "db.t", FileIO.for_location(warehouse))
            start.wait()
            ids, retries = [], 0
            for n in range(COMMITS_PER_WRITER):
                attempts: list[int] = []

                def attempt(pending: PendingCommit, n: int = n, attempts: list[int] = attempts) -> None:
                    """Count the attempts; the first commit's first one swaps once every writer holds one on
                    the same base, so the writers race on any machine (later commits race freely)."""
                    attempts.append(pending.attempt)
                    if n == 0 and pending.attempt == 1:
                        start.wait(timeout=120)

                data_file = table.write_data([worker * 100 + n])
                producer = table.producer(FastAppend([data_file]), before_commit=attempt)
                ids.append(producer.commit().snapshot_id)
                retries += len(attempts) - 1
        results.put(("ok", worker, ids, retries))
    except BaseException as e:  # reported to the test
        results.put(("error", worker, repr(e), 0))


def test_concurrent_writers_all_land_in_one_linear_history(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        CommitTable.create(
            catalog,
            properties={"commit.retry.num-retries": "100", "commit.retry.min-wait-ms": "5", "commit.retry.max-wait-ms": "100"},
        )
    start = _SPAWN.Barrier(WRITERS)
    results = _SPAWN.Queue()
    procs = [
        _SPAWN.Process(target=_append_worker, args=(catalog_uri, str(warehouse), w, start, results))
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=240) for _ in procs]
    except queue.Empty as e:
        raise AssertionError("a writer did not report back") from e
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [o for o in outcomes if o[0] != "ok"] == []

    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable(catalog, "db.t", FileIO.for_location(str(warehouse)))
        metadata = table.metadata()
        total = WRITERS * COMMITS_PER_WRITER
        history = list(metadata.ancestors_of(metadata.current_snapshot_id))
        assert len(history) == total == len(metadata.snapshots)
        assert [s.sequence_number for s in reversed(history)] == list(range(1, total + 1))
        assert {s.snapshot_id for s in history} == {i for o in outcomes for i in o[2]}
        assert table.current().summary["total-records"] == str(total)
        assert sum(o[3] for o in outcomes) >= WRITERS - 1, "the writers never raced: the test proved nothing"
        assert table.ids() == sorted(w * 100 + n for w in range(WRITERS) for n in range(COMMITS_PER_WRITER))
        # No attempt left anything behind: every metadata file is logged or current, every
        # manifest list belongs to a snapshot, every manifest is listed by one.
        on_disk = {p for p in table.files_on_disk() if "/metadata/" in p}
        logged = {e.metadata_file for e in metadata.metadata_log} | {table.metadata_location()}
        lists = {s.manifest_list for s in metadata.snapshots}
        manifests = {m.manifest_path for s in metadata.snapshots for m in table.manifests(s)}
        assert on_disk == logged | lists | manifests


@pytest.mark.parametrize("enabled", [True, False])
def test_metadata_files_leaving_the_log_are_deleted_when_the_table_asks(sqlite_catalog: Catalog, enabled: bool) -> None:
    properties = {"write.metadata.previous-versions-max": "3",
                  "write.metadata.delete-after-commit.enabled": str(enabled).lower()}
    table = CommitTable.create(sqlite_catalog, "db.t", properties=properties)
    first = table.metadata_location()
    for i in range(6):
        table.append([i])

    metadata = table.metadata()
    on_disk = {p for p in table.files_on_disk() if p.endswith(".metadata.json")}
    logged = {e.metadata_file for e in metadata.metadata_log} | {table.metadata_location()}
    assert len(metadata.metadata_log) == 3 and logged <= on_disk
    if enabled:
        assert on_disk == logged, "versions 0..2 left the log and were deleted"
        assert first not in on_disk
    else:
        assert len(on_disk) == 7, "Iceberg's default keeps every metadata file"
    assert table.ids() == list(range(6))


def test_nothing_after_a_landed_swap_can_fail_the_commit(sqlite_catalog: Catalog) -> None:
    """A commit that landed must never be cleaned up as a failure: its metadata file, manifest list
    and manifests are the table now. An unusual property value read after the swap is one way there."""
    properties = {"write.metadata.previous-versions-max": "1", "write.metadata.delete-after-commit.enabled": "yes"}
    table = CommitTable.create(sqlite_catalog, "db.t", properties=properties)
    for i in range(3):
        table.append([i])
    metadata = table.metadata()
    on_disk = set(table.files_on_disk())
    assert table.metadata_location() in on_disk
    assert {s.manifest_list for s in metadata.snapshots} <= on_disk
    assert table.ids() == [0, 1, 2]
    assert len([p for p in on_disk if p.endswith(".metadata.json")]) == 4, "'yes' is not true, as in Java"
