"""Snapshot summaries: Iceberg's keys, totals carried from the parent, and a
chain of real commits whose totals always match the files the table holds."""

from __future__ import annotations

import pytest

from commit.catalog.base import Catalog
from commit.operations.delete_files import DeleteFiles
from commit.operations.fast_append import FastAppend
from commit.operations.merge_append import MergeAppend
from commit.operations.overwrite_files import OverwriteFiles
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from commit.summary import SummaryBuilder, with_totals
from table.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus, read_manifest_entries
from table.metadata import Snapshot
from table.partitioning import UNPARTITIONED_SPEC, build_partition_spec
from tests.commit.producer_support import SCHEMA, CommitTable

PARTITIONED = build_partition_spec(SCHEMA, [("identity", "category")])


def _file(content: DataFileContent, records: int, size: int, partition: tuple = (), spec_id: int = 0) -> DataFile:
    return DataFile(content, f"/t/{content.name}-{records}-{size}-{partition}", FileFormat.PARQUET, partition, records, size, spec_id=spec_id)


def test_changes_use_icebergs_keys() -> None:
    builder = SummaryBuilder({0: UNPARTITIONED_SPEC}, SCHEMA)
    builder.added_file(_file(DataFileContent.DATA, 10, 100))
    builder.added_file(_file(DataFileContent.POSITION_DELETES, 3, 30))
    builder.added_file(_file(DataFileContent.EQUALITY_DELETES, 2, 20))
    builder.deleted_file(_file(DataFileContent.DATA, 7, 70))
    builder.deleted_file(_file(DataFileContent.POSITION_DELETES, 1, 10))
    builder.deleted_file(_file(DataFileContent.EQUALITY_DELETES, 4, 40))
    assert builder.build() == {
        "added-data-files": "1",
        "deleted-data-files": "1",
        "added-equality-delete-files": "1",
        "removed-equality-delete-files": "1",
        "added-position-delete-files": "1",
        "removed-position-delete-files": "1",
        "added-delete-files": "2",
        "removed-delete-files": "2",
        "added-records": "10",
        "deleted-records": "7",
        "added-files-size": "150",
        "removed-files-size": "120",
        "added-position-deletes": "3",
        "removed-position-deletes": "1",
        "added-equality-deletes": "2",
        "removed-equality-deletes": "4",
        "changed-partition-count": "1",
    }


def test_zero_counters_are_left_out() -> None:
    assert SummaryBuilder({0: UNPARTITIONED_SPEC}, SCHEMA).build() == {"changed-partition-count": "0"}


def test_partition_summaries_only_within_the_limit() -> None:
    specs = {0: PARTITIONED}
    files = [_file(DataFileContent.DATA, 1, 10, ("a",)), _file(DataFileContent.DATA, 2, 20, ("b",))]
    without = SummaryBuilder(specs, SCHEMA, partition_limit=1)
    with_ = SummaryBuilder(specs, SCHEMA, partition_limit=2)
    for f in files:
        without.added_file(f)
        with_.added_file(f)
    assert without.build()["changed-partition-count"] == "2"
    assert "partition-summaries-included" not in without.build()
    summary = with_.build()
    assert summary["partition-summaries-included"] == "true"
    assert summary["partitions.category=b"] == "added-data-files=1,added-records=2,added-files-size=20"


def test_first_snapshot_totals_start_at_zero() -> None:
    summary = with_totals({"added-data-files": "2", "added-records": "5", "added-files-size": "9"}, None)
    assert summary["total-data-files"] == "2"
    assert summary["total-records"] == "5"
    assert summary["total-files-size"] == "9"
    assert summary["total-delete-files"] == summary["total-position-deletes"] == summary["total-equality-deletes"] == "0"


def test_totals_carry_from_the_parent() -> None:
    parent = {"total-records": "100", "total-data-files": "4", "total-files-size": "1000", "total-delete-files": "1",
              "total-position-deletes": "3", "total-equality-deletes": "0"}
    change = {"deleted-data-files": "2", "added-data-files": "1", "deleted-records": "50", "added-records": "49",
              "removed-position-deletes": "3", "removed-delete-files": "1", "added-files-size": "10", "removed-files-size": "500"}
    summary = with_totals(change, parent)
    assert summary["total-records"] == "99"
    assert summary["total-data-files"] == "3"
    assert summary["total-files-size"] == "510"
    assert summary["total-delete-files"] == "0"
    assert summary["total-position-deletes"] == "0"


@pytest.mark.parametrize("parent_total", [None, "lots", "-1", "2"])
def test_unknown_or_impossible_totals_are_left_out(parent_total: str) -> None:
    parent = {} if parent_total is None else {"total-records": parent_total}
    assert "total-records" not in with_totals({"deleted-records": "3"}, parent)


# --------------------------------------------------------------------------
# A chain of real commits
# --------------------------------------------------------------------------


def _actual_totals(table: CommitTable, snapshot: Snapshot) -> dict[str, str]:
    """The totals recomputed from the snapshot's live files."""
    live = [
        e.data_file
        for m in table.manifests(snapshot)
        for e in read_manifest_entries(table.io, m)
        if e.status != ManifestEntryStatus.DELETED
    ]
    data = [f for f in live if f.content == DataFileContent.DATA]
    pos = [f for f in live if f.content == DataFileContent.POSITION_DELETES]
    eq = [f for f in live if f.content == DataFileContent.EQUALITY_DELETES]
    return {
        "total-records": str(sum(f.record_count for f in data)),
        "total-files-size": str(sum(f.file_size_in_bytes for f in live)),
        "total-data-files": str(len(data)),
        "total-delete-files": str(len(pos) + len(eq)),
        "total-position-deletes": str(sum(f.record_count for f in pos)),
        "total-equality-deletes": str(sum(f.record_count for f in eq)),
    }


def test_totals_stay_consistent_along_a_chain_of_commits(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, partitioned=True)
    f1, s1 = table.append([1, 2, 3], "a")
    f2 = table.write_data([4, 5], "b")
    table.commit(MergeAppend([f2]))
    pos = table.write_position_deletes(f1, [0])
    table.commit(RowDelta([], [pos]))
    f3 = table.write_data([6], "a")
    eq = table.write_equality_deletes([5], ("b",))
    table.commit(RowDelta([f3], [eq]))
    compacted = table.write_data([2, 3], "a")
    table.commit(RewriteFiles([f1], [compacted], starting_snapshot_id=table.current().snapshot_id, replaced_delete_files=[pos]))
    f4 = table.write_data([7, 8], "c")
    table.commit(OverwriteFiles([f4], [f3]))
    table.commit(DeleteFiles([f2]))

    metadata = table.metadata()
    assert len(metadata.snapshots) == 7
    for snapshot in metadata.snapshots:
        summary = snapshot.summary
        assert {k: summary[k] for k in _actual_totals(table, snapshot)} == _actual_totals(table, snapshot), snapshot.operation
    operations = [s.operation for s in metadata.snapshots]
    assert operations == ["append", "append", "delete", "overwrite", "replace", "overwrite", "delete"]
    assert metadata.snapshots[4].summary["changed-partition-count"] == "1"
    assert metadata.snapshots[5].summary["changed-partition-count"] == "2"


def test_extra_summary_properties_sit_beside_the_counters(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog)
    table.append([1])
    table.commit(FastAppend([table.write_data([2])]), snapshot_properties={"app": "floe"})
    assert table.current().summary["app"] == "floe"
    assert table.current().summary["total-records"] == "2"
