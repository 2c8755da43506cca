"""Full compaction of a quiet table: few files of the target size, no delete file left."""

from __future__ import annotations

import os
from typing import Any

import pytest

from commit.operations.row_delta import RowDelta
from compaction.committer import GroupResult
from compaction.maintenance import MaintenanceOptions
from compaction.metrics import CompactionMetrics
from compaction.runner import CompactionOptions, CompactionRunner, RunResult
from tests.compaction.conftest import TARGET, CompactionTable, max_data_files, small_target

CATEGORIES = ("a", "b", "c")


def many_small_files_with_deletes(table: CompactionTable, files_per_partition: int, rows: int) -> None:
    """Small files in three partitions, with position deletes and upsert-style equality deletes."""
    written = table.append_files(files_per_partition, rows, categories=CATEGORIES, payload_bytes=40)
    positions = [table.write_position_deletes(f, range(i % 3, rows, 7)) for i, f in enumerate(written[::4])]
    table.commit(RowDelta([], positions))
    per_partition = files_per_partition * rows
    for p, category in enumerate(CATEGORIES):
        keys = list(range(p * per_partition + 1, (p + 1) * per_partition, 11))
        table.commit(RowDelta([], [table.write_equality_deletes(keys, partition=(category,))]))
    table.append_files(2, rows, categories=CATEGORIES, payload_bytes=40, first_id=10**6)


def check_fully_compacted(table: CompactionTable, rows: list[int]) -> None:
    data = table.data_files()
    total = sum(f.file_size_in_bytes for f in data)
    assert len(data) <= max_data_files(total, TARGET, len(CATEGORIES)), [f.file_size_in_bytes for f in data]
    assert table.delete_files() == set()
    assert all(not t.delete_files for t in table.tasks())
    assert table.id_multiset() == rows
    assert all(os.path.exists(p) for p in table.live_paths())


def test_full_compaction_of_a_quiet_table(partitioned_table: CompactionTable, metrics: CompactionMetrics) -> None:
    table = partitioned_table
    many_small_files_with_deletes(table, files_per_partition=20, rows=300)
    rows = table.id_multiset()
    files_before = len(table.data_files())
    options = CompactionOptions(rewrite=small_target(**{"partial-progress.enabled": "true"}))

    report = CompactionRunner(table.catalog, table.identifier, options, metrics).run()

    assert report.result == RunResult.SUCCESS, report.errors
    assert len(table.data_files()) < files_before / 4
    check_fully_compacted(table, rows)
    assert report.maintenance["remove_dangling_deletes"] == len(CATEGORIES)  # the equality deletes
    assert report.delete_files_removed == len(CATEGORIES) + 15  # and the position deletes, in the rewrite
    assert report.maintenance["expire_snapshots"] == 0 and report.maintenance["remove_orphan_files"] == 0

    again = CompactionRunner(table.catalog, table.identifier, options, metrics).run()
    assert again.result == RunResult.SUCCESS and again.planned_groups == 0
    check_fully_compacted(table, rows)


@pytest.mark.spark
def test_full_compaction_with_groups_rewritten_as_spark_tasks(
    partitioned_table: CompactionTable, metrics: CompactionMetrics, spark: Any
) -> None:
    table = partitioned_table
    many_small_files_with_deletes(table, files_per_partition=8, rows=300)
    rows = table.id_multiset()
    rewrite = small_target(**{"max-concurrent-file-group-rewrites": "2", "min-input-files": "2"})
    options = CompactionOptions(rewrite=rewrite, maintenance=MaintenanceOptions(expire_snapshots=False))

    report = CompactionRunner(table.catalog, table.identifier, options, metrics, spark=spark).run()

    assert report.result == RunResult.SUCCESS, report.errors
    assert report.count(GroupResult.COMMITTED) == report.planned_groups >= len(CATEGORIES)
    check_fully_compacted(table, rows)
    leftovers = [p for p in table.files_on_disk() if "/metadata/compaction-" in p]
    assert leftovers == []  # position maps and the stop file are cleaned up
