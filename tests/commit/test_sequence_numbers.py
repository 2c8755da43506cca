"""Sequence numbers keep rows deleted across a compaction, in Floe's reader and in Iceberg Java's.

A rewrite planned on snapshot S commits after other writers deleted rows of
the files it replaces. Equality deletes committed after S have higher
sequence numbers than S's, which the rewritten files keep: they still apply.
Position deletes name rows of the replaced files, which the new files do not
have: the rewrite is refused with the exact positions, and nothing is lost.
Iceberg Java reads the final metadata file as the second opinion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from commit.catalog.base import Catalog
from commit.metadata_committer import PendingCommit
from commit.operations.errors import RewriteConflict
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from table.manifest import ManifestEntry, ManifestEntryStatus, read_manifest_entries
from tests.commit.producer_support import CommitTable

pytestmark = pytest.mark.oracle


def java_ids(oracle: Any, table: CommitTable) -> list[int]:
    rows = oracle.call("tests.support.oracle_ops:read_by_metadata_location", metadata_location=table.metadata_location())
    return sorted(rows.column("id").to_pylist())


def live_entry(table: CommitTable, path: str) -> ManifestEntry:
    for m in table.manifests():
        for e in read_manifest_entries(table.io, m):
            if e.data_file.file_path == path and e.status != ManifestEntryStatus.DELETED:
                return e
    raise AssertionError(f"{path} is not live")


@pytest.fixture()
def table(sqlite_catalog: Catalog) -> CommitTable:
    return CommitTable.create(sqlite_catalog)


@pytest.mark.parametrize("delete_commits", ["before the rewrite commits", "during the rewrite's commit"])
def test_equality_delete_after_the_start_stays_applied_to_the_rewritten_file(
    table: CommitTable, iceberg_oracle: Any, delete_commits: str
) -> None:
    a, _ = table.append([1, 2, 3])
    b, start = table.append([4, 5])
    compacted = table.write_data([1, 2, 3, 4, 5])  # what the compactor read at S
    delete = RowDelta([], [table.write_equality_deletes([2])])
    racing = delete_commits.startswith("during")
    if not racing:
        table.commit(delete)

    def delete_while_committing(pending: PendingCommit) -> None:
        if racing and pending.attempt == 1:
            table.commit(delete)

    rewrite = table.commit(
        RewriteFiles([a, b], [compacted], starting_snapshot_id=start.snapshot_id), before_commit=delete_while_committing
    )

    delete_snapshot = table.metadata().snapshot_by_id(rewrite.parent_snapshot_id)  # type: ignore[arg-type]
    assert delete_snapshot.operation == "delete" and delete_snapshot.sequence_number == 3
    entry = live_entry(table, compacted.file_path)
    assert entry.sequence_number == start.sequence_number == 2  # data sequence number: S's, below the delete's
    assert entry.file_sequence_number == rewrite.sequence_number == 4
    assert table.live_paths() >= {compacted.file_path} and a.file_path not in table.live_paths()
    assert table.ids() == [1, 3, 4, 5]
    assert java_ids(iceberg_oracle, table) == [1, 3, 4, 5]


def test_position_delete_after_the_start_refuses_the_rewrite_with_its_positions(
    table: CommitTable, iceberg_oracle: Any
) -> None:
    a, _ = table.append([10, 11, 12, 13])
    b, start = table.append([20, 21])
    compacted = table.write_data([10, 11, 12, 13, 20, 21])
    deletes = table.write_position_deletes(a, [1, 3])
    table.commit(RowDelta([], [deletes]))
    after_delete = table.metadata_location()
    live_after_delete = table.live_paths()

    producer = table.producer(RewriteFiles([a, b], [compacted], starting_snapshot_id=start.snapshot_id))
    with pytest.raises(RewriteConflict) as caught:
        producer.commit()

    conflict = caught.value
    assert conflict.deleted_positions == {a.file_path: [1, 3]}
    assert conflict.position_delete_files == {deletes.file_path} and conflict.equality_delete_files == frozenset()
    assert conflict.starting_snapshot_id == start.snapshot_id
    # Nothing changed but the delete: same metadata file, same live files, nothing left behind.
    assert table.metadata_location() == after_delete and table.live_paths() == live_after_delete
    assert producer.written_files() == [] and Path(compacted.file_path).exists()
    assert table.ids() == [10, 12, 20, 21]
    assert java_ids(iceberg_oracle, table) == [10, 12, 20, 21]

    # The compactor carries the positions over to its file (a's rows come first) and commits.
    carried = table.write_position_deletes(compacted, conflict.deleted_positions[a.file_path])
    table.commit(RewriteFiles([a, b], [compacted], starting_snapshot_id=table.current().snapshot_id,
                              replaced_delete_files=[deletes], added_delete_files=[carried]))
    assert table.live_paths() == {compacted.file_path, carried.file_path}
    assert table.ids() == [10, 12, 20, 21]
    assert java_ids(iceberg_oracle, table) == [10, 12, 20, 21]
