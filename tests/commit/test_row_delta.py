"""Row deltas: data files plus position and equality deletes in one commit,
and the validations that keep concurrent deletes and compactions correct
(overwrites share the conflict checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commit.catalog.base import Catalog
from commit.metadata_committer import PendingCommit
from commit.operations.delete_files import DeleteFiles
from commit.operations.errors import (
    ConflictingDataFiles,
    ConflictingDeleteFiles,
    InvalidStartingSnapshot,
    MissingReferencedDataFiles,
)
from commit.operations.overwrite_files import OverwriteFiles
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from table.expressions import col
from tests.commit.producer_support import CommitTable


@pytest.fixture()
def table(sqlite_catalog: Catalog) -> CommitTable:
    return CommitTable.create(sqlite_catalog, partitioned=True)


def test_position_and_equality_deletes_apply(table: CommitTable) -> None:
    data_file, start = table.append([1, 2, 3, 4])
    pos = table.write_position_deletes(data_file, [0])
    eq = table.write_equality_deletes([3], ("a",))
    snapshot = table.commit(RowDelta([], [pos, eq]).validate_from_snapshot(start.snapshot_id))
    assert snapshot.operation == "delete"
    assert snapshot.summary["added-delete-files"] == "2"
    assert table.ids() == [2, 4]


def test_upsert_may_delete_rows_of_the_file_it_adds(table: CommitTable) -> None:
    table.append([1])
    new = table.write_data([1, 2])
    dedup = table.write_position_deletes(new, [0])
    eq = table.write_equality_deletes([1], ("a",))
    snapshot = table.commit(RowDelta([new], [eq, dedup]))
    assert snapshot.operation == "overwrite"
    assert table.ids() == [2]


def test_data_only_is_an_append(table: CommitTable) -> None:
    assert table.commit(RowDelta([table.write_data([1])])).operation == "append"


def test_deletes_for_a_file_compacted_since_the_start_are_refused(table: CommitTable) -> None:
    data_file, start = table.append([1, 2, 3])
    compacted = table.write_data([1, 2, 3])
    rewrite = table.commit(RewriteFiles([data_file], [compacted], starting_snapshot_id=start.snapshot_id))
    pos = table.write_position_deletes(data_file, [1])

    producer = table.producer(RowDelta([], [pos]).validate_from_snapshot(start.snapshot_id))
    with pytest.raises(MissingReferencedDataFiles) as caught:
        producer.commit()
    assert caught.value.removed_by == {data_file.file_path: rewrite.snapshot_id}
    assert producer.written_files() == [] and Path(pos.file_path).exists()
    assert table.ids() == [1, 2, 3]  # the delete would have been lost; nothing changed


def test_removal_in_a_lost_race_is_caught_on_retry(table: CommitTable) -> None:
    data_file, start = table.append([1, 2])
    pos = table.write_position_deletes(data_file, [0])

    def remove_the_file(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            table.commit(DeleteFiles([data_file]))

    producer = table.producer(RowDelta([], [pos]).validate_from_snapshot(start.snapshot_id), before_commit=remove_the_file)
    with pytest.raises(MissingReferencedDataFiles, match=data_file.file_path):
        producer.commit()
    assert producer.written_files() == []


def test_without_a_start_referenced_files_must_be_live(table: CommitTable) -> None:
    data_file, _ = table.append([1, 2])
    pos = table.write_position_deletes(data_file, [0])
    table.commit(DeleteFiles([data_file]))
    with pytest.raises(MissingReferencedDataFiles) as caught:
        table.commit(RowDelta([], [pos]))
    assert caught.value.removed_by == {data_file.file_path: -1}


def test_explicit_referenced_files_are_checked(table: CommitTable) -> None:
    a, start = table.append([1])
    b, _ = table.append([2])
    table.commit(DeleteFiles([b]))
    eq = table.write_equality_deletes([1], ("a",))
    delta = RowDelta([], [eq], referenced_data_files=[b.file_path]).validate_from_snapshot(start.snapshot_id)
    with pytest.raises(MissingReferencedDataFiles, match=b.file_path):
        table.commit(delta)


def test_conflicting_data_files_are_found_by_filter(table: CommitTable) -> None:
    _, start = table.append([1], "a")
    other, other_snapshot = table.append([2], "b")
    unrelated = RowDelta([], [table.write_equality_deletes([1], ("a",))])
    table.commit(unrelated.validate_from_snapshot(start.snapshot_id).validate_no_conflicting_data_files(col("category") == "a"))

    conflicting = RowDelta([], [table.write_equality_deletes([2], ("b",))])
    conflicting.validate_from_snapshot(start.snapshot_id).validate_no_conflicting_data_files(col("category") == "b")
    with pytest.raises(ConflictingDataFiles) as caught:
        table.commit(conflicting)
    assert caught.value.added_by == {other.file_path: other_snapshot.snapshot_id}


def test_conflicting_delete_files_are_found_by_filter(table: CommitTable) -> None:
    data_file, start = table.append([1, 2], "a")
    concurrent = table.write_equality_deletes([1], ("a",))
    concurrent_snapshot = table.commit(RowDelta([], [concurrent]))
    mine = RowDelta([table.write_data([3], "a")], [])
    mine.validate_from_snapshot(start.snapshot_id).validate_no_conflicting_delete_files(col("id") == 1)
    with pytest.raises(ConflictingDeleteFiles) as caught:
        table.commit(mine)
    assert caught.value.added_by == {concurrent.file_path: concurrent_snapshot.snapshot_id}
    # Equality delete metrics rule out id 2: no conflict for a change that only touches it.
    other = RowDelta([table.write_data([2], "a")], [])
    table.commit(other.validate_from_snapshot(start.snapshot_id).validate_no_conflicting_delete_files(col("id") == 2))


def test_starting_snapshot_must_be_an_ancestor(table: CommitTable) -> None:
    table.append([1])
    with pytest.raises(InvalidStartingSnapshot, match="12345"):
        table.commit(RowDelta([table.write_data([2])]).validate_from_snapshot(12345).validate_no_conflicting_data_files())


def test_overwrite_fails_when_a_removed_file_gained_deletes(table: CommitTable) -> None:
    """Copy-on-write: rows deleted concurrently from a rewritten file would come back."""
    data_file, start = table.append([1, 2, 3])
    concurrent = table.write_position_deletes(data_file, [2])
    table.commit(RowDelta([], [concurrent]))
    cow = OverwriteFiles([table.write_data([1, 2, 3])], [data_file])
    cow.validate_from_snapshot(start.snapshot_id).validate_no_conflicting_delete_files(col("category") == "z")
    with pytest.raises(ConflictingDeleteFiles) as caught:
        table.commit(cow)
    assert caught.value.paths == {concurrent.file_path}
    assert table.ids() == [1, 2]
