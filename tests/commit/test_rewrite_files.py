"""Rewrites (compaction) racing with writers that delete rows.

Rows are read back through table/scan.py and table/reader.py: a rewrite
must never bring a deleted row back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commit.catalog.base import Catalog
from commit.errors import InvalidArgument
from commit.metadata_committer import PendingCommit
from commit.operations.errors import MissingFiles, ReplacedFilesTooNew, RewriteConflict
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from table.manifest import ManifestEntryStatus, read_manifest_entries
from tests.commit.producer_support import CommitTable


@pytest.fixture()
def table(sqlite_catalog: Catalog) -> CommitTable:
    return CommitTable.create(sqlite_catalog)


def _entry_of(table: CommitTable, path: str):  # type: ignore[no-untyped-def]
    for m in table.manifests():
        for e in read_manifest_entries(table.io, m):
            if e.data_file.file_path == path and e.status != ManifestEntryStatus.DELETED:
                return e
    raise AssertionError(f"{path} is not live")


def test_compaction_replaces_files_and_keeps_the_starting_sequence_number(table: CommitTable) -> None:
    a, _ = table.append([1, 2])
    b, start = table.append([3])
    compacted = table.write_data([1, 2, 3])
    later, _ = table.append([4])
    snapshot = table.commit(RewriteFiles([a, b], [compacted], starting_snapshot_id=start.snapshot_id))

    assert snapshot.operation == "replace"
    assert snapshot.summary["deleted-data-files"] == "2" and snapshot.summary["added-data-files"] == "1"
    assert snapshot.summary["total-data-files"] == "2" and snapshot.summary["total-records"] == "4"
    entry = _entry_of(table, compacted.file_path)
    assert entry.sequence_number == start.sequence_number == 2  # data sequence number: the start's
    assert entry.file_sequence_number == snapshot.sequence_number == 4
    assert table.ids() == [1, 2, 3, 4]
    assert table.live_paths() == {compacted.file_path, later.file_path}


def test_replaced_files_must_still_be_live(table: CommitTable) -> None:
    a, start = table.append([1])
    table.commit(RewriteFiles([a], [table.write_data([1])], starting_snapshot_id=start.snapshot_id))
    with pytest.raises(MissingFiles, match=a.file_path):
        table.commit(RewriteFiles([a], [table.write_data([1])], starting_snapshot_id=start.snapshot_id))


def test_files_newer_than_the_start_cannot_be_replaced_with_its_sequence_number(table: CommitTable) -> None:
    _, start = table.append([1])
    newer, _ = table.append([2])
    with pytest.raises(ReplacedFilesTooNew) as caught:
        table.commit(RewriteFiles([newer], [table.write_data([2])], starting_snapshot_id=start.snapshot_id))
    assert caught.value.paths == {newer.file_path} and caught.value.data_sequence_number == 1


def test_a_rewrite_must_replace_something(table: CommitTable) -> None:
    with pytest.raises(InvalidArgument):
        RewriteFiles([], [], starting_snapshot_id=1)


def test_concurrent_equality_delete_keeps_the_row_deleted(table: CommitTable) -> None:
    a, _ = table.append([1, 2, 3])
    b, start = table.append([4, 5])
    compacted = table.write_data([1, 2, 3, 4, 5])  # what the compactor read at the start

    def delete_a_row(pending: PendingCommit) -> None:
        if pending.attempt == 1:  # an upsert deletes id 2 while the rewrite commits
            table.commit(RowDelta([], [table.write_equality_deletes([2])]))

    producer = table.producer(
        RewriteFiles([a, b], [compacted], starting_snapshot_id=start.snapshot_id), before_commit=delete_a_row
    )
    snapshot = producer.commit()

    assert snapshot.sequence_number == 4 and table.metadata().snapshot_by_id(snapshot.parent_snapshot_id).operation == "delete"
    assert table.ids() == [1, 3, 4, 5]  # id 2 stays deleted in the compacted file


def test_concurrent_position_delete_is_a_conflict_with_exact_positions(table: CommitTable) -> None:
    a, _ = table.append([10, 11, 12, 13])
    b, start = table.append([20, 21])
    compacted = table.write_data([10, 11, 12, 13, 20, 21])
    concurrent = table.write_position_deletes(a, [1, 3])
    concurrent_b = table.write_position_deletes(b, [0])
    before = table.metadata_location()

    def delete_by_position(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            table.commit(RowDelta([], [concurrent, concurrent_b]))

    producer = table.producer(
        RewriteFiles([a, b], [compacted], starting_snapshot_id=start.snapshot_id), before_commit=delete_by_position
    )
    with pytest.raises(RewriteConflict) as caught:
        producer.commit()

    conflict = caught.value
    assert conflict.deleted_positions == {a.file_path: [1, 3], b.file_path: [0]}
    assert conflict.position_delete_files == {concurrent.file_path, concurrent_b.file_path}
    assert conflict.equality_delete_files == frozenset()
    assert table.metadata_location() != before and table.ids() == [10, 12, 20 + 1]
    assert producer.written_files() == [] and Path(compacted.file_path).exists()

    # The compactor translates the positions into its own file (a's rows 0..3, then b's) and retries.
    carried = table.write_position_deletes(compacted, [1, 3, 4])
    retry = RewriteFiles(
        [a, b], [compacted], starting_snapshot_id=start.snapshot_id, added_delete_files=[carried]
    )
    with pytest.raises(RewriteConflict):  # still based on the old start: the same deletes still conflict
        table.commit(retry)
    newer_start = table.current().snapshot_id
    snapshot = table.commit(
        RewriteFiles([a, b], [compacted], starting_snapshot_id=newer_start, added_delete_files=[carried])
    )
    assert snapshot.operation == "replace"
    assert table.ids() == [10, 12, 21]


def test_equality_deletes_conflict_when_the_new_files_take_a_new_sequence_number(table: CommitTable) -> None:
    a, start = table.append([1, 2])
    compacted = table.write_data([1, 2])
    eq = table.write_equality_deletes([1])
    table.commit(RowDelta([], [eq]))
    rewrite = RewriteFiles([a], [compacted], starting_snapshot_id=start.snapshot_id, keep_starting_sequence_number=False)
    with pytest.raises(RewriteConflict) as caught:
        table.commit(rewrite)
    assert caught.value.equality_delete_files == {eq.file_path}
    assert caught.value.deleted_positions == {}
    assert table.ids() == [2]


def test_rewriting_delete_files(table: CommitTable) -> None:
    a, _ = table.append([1, 2, 3])
    first = table.write_position_deletes(a, [0])
    table.commit(RowDelta([], [first]))
    second = table.write_position_deletes(a, [2])
    table.commit(RowDelta([], [second]))
    merged = table.write_position_deletes(a, [0, 2])
    start = table.current()
    snapshot = table.commit(
        RewriteFiles([], [], starting_snapshot_id=start.snapshot_id, replaced_delete_files=[first, second], added_delete_files=[merged])
    )
    assert snapshot.summary["removed-delete-files"] == "2" and snapshot.summary["added-delete-files"] == "1"
    assert snapshot.summary["total-delete-files"] == "1" and snapshot.summary["total-position-deletes"] == "2"
    assert table.ids() == [2]
