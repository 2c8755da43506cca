"""Committing rewritten groups while ingest keeps deleting rows: carry-over, aborts, cleanup.

Every test rewrites real files, lets a real concurrent commit land on the
same table (between the rewrite and the commit, or inside the commit's retry
loop through the producer's ``before_commit`` hook), then commits and reads
the rows back: a lost or resurrected row changes the id multiset.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from commit.metadata_committer import PendingCommit
from commit.operations.delete_files import DeleteFiles
from commit.operations.row_delta import RowDelta
from compaction.committer import GroupResult
from table.deletes.writers import PositionDeleteWriter
from table.manifest import DataFileContent
from tests.compaction.conftest import CompactionTable, small_target

ALL = small_target(**{"rewrite-all": "true"})


def java_ids(oracle: Any, table: CompactionTable) -> list[int]:
    rows = oracle.call("tests.support.oracle_ops:read_by_metadata_location", metadata_location=table.metadata_location())
    return sorted(rows.column("id").to_pylist())


def only_new_data(table: CompactionTable, rewritten) -> bool:  # type: ignore[no-untyped-def]
    new = {f.file_path for g in rewritten for f in g.rewrite.added_files}
    return {f.file_path for f in table.data_files()} == new


def test_a_position_delete_during_the_rewrite_is_carried_over(table: CompactionTable) -> None:
    files = table.append_files(5, 200, payload_bytes=20)
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)
    concurrent = table.write_position_deletes(files[2], [0, 17, 199])
    table.commit(RowDelta([], [concurrent]))  # ingest deletes by position in a file being rewritten
    expected = table.id_multiset()
    assert not {400, 417, 599} & set(expected)

    outcome = table.committer(start, plan).commit(rewritten)

    assert outcome.committed and outcome.carry_rounds == 1
    assert [(g.result, g.deletes_carried_over) for g in outcome.groups] == [(GroupResult.COMMITTED, 3)]
    assert table.id_multiset() == expected
    assert only_new_data(table, rewritten)
    # the concurrent delete now names a replaced file: removed in the same commit
    assert concurrent.file_path in outcome.removed_delete_files
    assert concurrent.file_path not in table.live_paths()
    assert table.current().summary["floe.compaction.run-id"]
    assert not os.path.exists(rewritten[0].rewrite.position_map_path)


@pytest.mark.oracle
def test_carried_over_position_deletes_hold_in_iceberg_java(table: CompactionTable, iceberg_oracle: Any) -> None:
    files = table.append_files(4, 150, payload_bytes=20)
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)
    calls = []

    def ingest_deletes(pending: PendingCommit) -> None:
        calls.append(pending.attempt)
        if len(calls) == 1:  # lands while the compactor commits: its attempt must retry
            table.commit(RowDelta([], [table.write_position_deletes(files[1], [3, 4, 149])]))
            table.commit(RowDelta([], [table.write_position_deletes(files[3], [0])]))

    outcome = table.committer(start, plan, before_commit=ingest_deletes).commit(rewritten)

    assert outcome.committed and outcome.groups[0].deletes_carried_over == 4
    expected = sorted(set(range(600)) - {153, 154, 299, 450})
    assert table.id_multiset() == expected
    assert java_ids(iceberg_oracle, table) == expected


@pytest.mark.oracle
def test_a_concurrent_equality_delete_keeps_applying_to_the_new_files(
    partitioned_table: CompactionTable, iceberg_oracle: Any
) -> None:
    table = partitioned_table
    table.append_files(4, 100, categories=("a", "b"), payload_bytes=20)
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)

    def ingest_upserts(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            table.commit(RowDelta([], [table.write_equality_deletes([5, 399], partition=("a",))]))
            table.commit(RowDelta([], [table.write_equality_deletes([400, 799], partition=("b",))]))

    outcome = table.committer(start, plan, before_commit=ingest_upserts).commit(rewritten)

    assert outcome.committed and outcome.carry_rounds == 0
    assert all(g.deletes_carried_over == 0 for g in outcome.groups)
    expected = sorted(set(range(800)) - {5, 399, 400, 799})
    assert table.id_multiset() == expected
    assert java_ids(iceberg_oracle, table) == expected
    new_seq = {t.data_sequence_number for t in table.tasks()}
    assert new_seq == {start.sequence_number}  # older than the deletes, so they apply


def test_deletes_that_keep_coming_are_carried_over_round_after_round(table: CompactionTable) -> None:
    files = table.append_files(3, 100)
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)
    rounds = iter([[files[0], [1, 2]], [files[2], [50]], [files[0], [2, 3]]])

    def ingest(pending: PendingCommit) -> None:
        step = next(rounds, None)
        if step is not None:
            table.commit(RowDelta([], [table.write_position_deletes(step[0], step[1])]))

    outcome = table.committer(start, plan, before_commit=ingest).commit(rewritten)

    assert outcome.committed and outcome.carry_rounds == 3
    assert outcome.groups[0].deletes_carried_over == 4  # position 2 of files[0] is deleted twice, carried once
    assert table.id_multiset() == sorted(set(range(300)) - {1, 2, 3, 250})


def test_too_many_carry_over_rounds_give_up_on_the_group(table: CompactionTable) -> None:
    files = table.append_files(3, 100)
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)
    position = iter(range(100))

    def ingest(pending: PendingCommit) -> None:
        table.commit(RowDelta([], [table.write_position_deletes(files[1], [next(position)])]))

    outcome = table.committer(start, plan, before_commit=ingest, max_carry_rounds=2).commit(rewritten)

    assert not outcome.committed and outcome.groups[0].result == GroupResult.CONFLICTED
    assert all(not os.path.exists(f.file_path) for f in rewritten[0].rewrite.added_files)
    assert not [p for p in table.files_on_disk() if "-carry" in p]  # carried deletes of the lost group
    assert table.id_multiset() == sorted(set(range(300)) - {100, 101, 102})


def test_another_conflict_aborts_only_the_group_at_fault(partitioned_table: CompactionTable) -> None:
    table = partitioned_table
    files = table.append_files(3, 100, categories=("a", "b"))
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)
    group_a = next(g for g in rewritten if g.group.partition == ("a",))
    group_b = next(g for g in rewritten if g.group.partition == ("b",))
    table.commit(DeleteFiles([files[1]]))  # someone drops a file of partition a: no rewrite can carry that
    expected = table.id_multiset()

    outcome = table.committer(start, plan).commit(rewritten)

    results = {g.group_id: g.result for g in outcome.groups}
    assert results == {group_a.group_id: GroupResult.CONFLICTED, group_b.group_id: GroupResult.COMMITTED}
    assert files[1].file_path in (outcome.groups[group_a.group_id].error or "")
    assert table.id_multiset() == expected
    assert all(not os.path.exists(f.file_path) for f in group_a.rewrite.added_files)
    assert not os.path.exists(group_a.rewrite.position_map_path)
    live = {f.file_path for f in table.data_files()}
    assert {f.file_path for f in group_b.rewrite.added_files} <= live
    assert {files[0].file_path, files[2].file_path} <= live  # partition a untouched


def test_equality_deletes_conflict_when_new_files_take_a_new_sequence_number(
    partitioned_table: CompactionTable,
) -> None:
    table = partitioned_table
    table.append_files(2, 50, categories=("a", "b"))
    plan, start, options = table.plan(**ALL)
    rewritten = table.rewrite(plan, options)
    table.commit(RowDelta([], [table.write_position_deletes(table.data_files()[0], [0])]))  # forces a carry-over round
    table.commit(RowDelta([], [table.write_equality_deletes([10], partition=("a",))]))
    expected = table.id_multiset()

    outcome = table.committer(start, plan, use_starting_sequence_number=False).commit(rewritten)

    by_partition = {g.partition: r for g, r in zip(plan.groups, [o.result for o in outcome.groups])}
    assert by_partition[("a",)] == GroupResult.CONFLICTED
    assert table.id_multiset() == expected and 10 not in expected


def test_position_deletes_are_removed_once_every_file_they_name_is_replaced(table: CompactionTable) -> None:
    files = table.append_files(6, 100, payload_bytes=40)
    two_groups = small_target(**{"rewrite-all": "true", "max-file-group-size-bytes": str(3 * files[0].file_size_in_bytes + 100)})
    plan, start, options = table.plan(**two_groups)
    assert len(plan.groups) == 2
    first, second = ([t.data_file for t in g.tasks] for g in plan.groups)
    only_first = table.write_position_deletes(first[0], [1])
    md = table.metadata()
    writer = PositionDeleteWriter(table.io, f"{md.location}/data", md.schema(), md.spec(), ())
    writer.delete(first[1].file_path, 2)
    writer.delete(second[0].file_path, 3)
    [both] = writer.close()
    table.commit(RowDelta([], [only_first, both]))
    plan, start, options = table.plan(**two_groups)
    assert [[t.data_file.file_path for t in g.tasks] for g in plan.groups] == [
        [f.file_path for f in first], [f.file_path for f in second]
    ]
    rewritten = table.rewrite(plan, options)
    committer = table.committer(start, plan)
    expected = table.id_multiset()

    one = committer.commit([rewritten[0]])
    assert table.id_multiset() == expected
    assert set(one.removed_delete_files) == {only_first.file_path}
    assert both.file_path in table.live_paths()

    two = committer.commit([rewritten[1]])
    assert set(two.removed_delete_files) == {both.file_path}
    assert table.id_multiset() == expected
    assert not any(d.content == DataFileContent.POSITION_DELETES for t in table.tasks() for d in t.delete_files)
