"""Exactly-once batches: the batch state in snapshot summaries, and ``commit_batch``.

The pure checks run on snapshots built in memory; everything else commits to
a real catalog with real files and reads rows back through ``table/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commit.catalog.base import Catalog
from commit.batch_commit import BatchCommitStatus, batch_status, commit_batch, table_offsets
from commit.errors import InvalidArgument
from commit.exactly_once import (
    BATCH_ID,
    KAFKA_OFFSETS,
    WRITER_ID,
    BatchStatus,
    MalformedBatchSummary,
    StaleWriter,
    batch_summary,
    check_batch,
    committed_offsets,
    decode_offsets,
    encode_offsets,
    last_committed_batch,
)
from commit.metadata_committer import PendingCommit
from commit.operations.fast_append import FastAppend
from commit.snapshot_producer import SnapshotProducer
from table.metadata import Snapshot
from tests.commit.producer_support import CommitTable

T = "orders"


def _snapshot(snapshot_id: int, summary: dict[str, str]) -> Snapshot:
    return Snapshot(snapshot_id, None, snapshot_id, 0, f"/m/{snapshot_id}.avro", {"operation": "append", **summary})


def _history(*batches: tuple[str, int, dict]) -> list[Snapshot]:
    """Snapshots newest first, one per (writer, batch, offsets), ids counting down."""
    return [_snapshot(100 - i, batch_summary(w, b, o)) for i, (w, b, o) in enumerate(batches)]


# --------------------------------------------------------------------------
# Offsets in summaries (pure)
# --------------------------------------------------------------------------


def test_offsets_are_compact_sorted_json_with_string_partitions() -> None:
    text = encode_offsets({"b": {10: (5, 9), 2: (0, 3)}, "a": {0: [7, 7]}})
    assert text == '{"a":{"0":[7,7]},"b":{"2":[0,3],"10":[5,9]}}'
    assert decode_offsets(text) == {"a": {0: (7, 7)}, "b": {2: (0, 3), 10: (5, 9)}}
    summary = batch_summary("q-1", 42, {"b": {2: (0, 3)}})
    assert summary == {WRITER_ID: "q-1", BATCH_ID: "42", KAFKA_OFFSETS: '{"b":{"2":[0,3]}}'}
    assert all(isinstance(v, str) for v in summary.values())


@pytest.mark.parametrize(
    "offsets",
    [{"t": {0: (5, 4)}}, {"t": {0: (-1, 4)}}, {"t": {-1: (0, 1)}}, {"": {0: (0, 1)}}, {"t": {True: (0, 1)}},
     {"t": {0: (0,)}}, {"t": {0: (0.5, 1)}}],
)
def test_malformed_offsets_are_refused(offsets: dict) -> None:
    with pytest.raises(InvalidArgument):
        encode_offsets(offsets)


@pytest.mark.parametrize("text", ['{"t":{"x":[0,1]}}', '{"t":[0,1]}', "not json", '{"t":{"0":[2,1]}}'])
def test_malformed_offsets_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgument):
        decode_offsets(text)


def test_batch_identity_is_checked() -> None:
    with pytest.raises(InvalidArgument):
        batch_summary("", 1, {})
    with pytest.raises(InvalidArgument):
        batch_summary("w", -1, {})


# --------------------------------------------------------------------------
# Deciding what a batch is (pure)
# --------------------------------------------------------------------------

B1 = {T: {0: (0, 10)}}
B2 = {T: {0: (10, 20)}}
B3 = {T: {0: (20, 30)}}


def test_a_batch_after_the_last_one_is_new() -> None:
    history = _history(("other", 9, B3), ("w", 2, B2), ("w", 1, B1))
    verdict = check_batch(history, "w", 3, B3)
    assert verdict.status == BatchStatus.NEW and verdict.last is not None and verdict.last.batch_id == 2
    assert check_batch(history, "new-writer", 0, B1).status == BatchStatus.NEW
    assert check_batch([], "w", 0, B1) == check_batch([], "w", 0, None)


def test_the_same_batch_is_already_committed_the_last_or_an_older_one() -> None:
    history = _history(("w", 3, B3), ("other", 3, B1), ("w", 2, B2), ("w", 1, B1))
    last = check_batch(history, "w", 3, B3)
    assert last.status == BatchStatus.ALREADY_COMMITTED and last.committed is not None
    assert last.committed.snapshot.snapshot_id == 100
    older = check_batch(history, "w", 2, B2)
    assert older.status == BatchStatus.ALREADY_COMMITTED and older.committed is not None
    assert older.committed.snapshot.snapshot_id == 98 and older.last is not None and older.last.batch_id == 3
    # Without offsets (before the batch is read), the batch id decides.
    assert check_batch(history, "w", 1, None).status == BatchStatus.ALREADY_COMMITTED


def test_the_same_batch_id_with_other_offsets_is_fenced() -> None:
    history = _history(("w", 3, B3), ("w", 2, B2))
    with pytest.raises(StaleWriter) as caught:
        check_batch(history, "w", 3, B2)
    error = caught.value
    assert (error.writer_id, error.batch_id, error.last_committed_batch_id) == ("w", 3, 3)
    assert "'w'" in str(error) and "batch 3" in str(error) and encode_offsets(B3) in str(error)
    with pytest.raises(StaleWriter, match="last committed batch 3"):
        check_batch(history, "w", 2, B1)


def test_an_older_batch_that_was_never_committed_is_fenced() -> None:
    history = _history(("w", 5, B3), ("w", 2, B2))  # batches 3 and 4 were never committed
    with pytest.raises(StaleWriter) as caught:
        check_batch(history, "w", 4, B3)
    assert caught.value.last_committed_batch_id == 5 and "not in the branch's history" in str(caught.value)
    with pytest.raises(StaleWriter):
        check_batch(history, "w", 0, None)


def test_a_malformed_batch_summary_is_an_error_naming_the_snapshot() -> None:
    bad = _snapshot(7, {WRITER_ID: "w", BATCH_ID: "seven", KAFKA_OFFSETS: "{}"})
    with pytest.raises(MalformedBatchSummary) as caught:
        check_batch([bad], "w", 8, B1)
    assert caught.value.snapshot_id == 7 and caught.value.key == BATCH_ID
    assert check_batch([bad], "someone-else", 0, B1).status == BatchStatus.NEW  # other writers are not read


# --------------------------------------------------------------------------
# commit_batch on a real catalog
# --------------------------------------------------------------------------


@pytest.fixture()
def table(sqlite_catalog: Catalog) -> CommitTable:
    return CommitTable.create(sqlite_catalog)


def _commit(table: CommitTable, writer: str, batch: int, offsets: dict, ids: list[int], **options):  # type: ignore[no-untyped-def]
    return commit_batch(table.catalog, table.identifier, writer, batch, offsets, [table.write_data(ids)], **options)


def test_a_batch_commits_its_files_and_its_state(table: CommitTable) -> None:
    _commit(table, "w", 0, B1, [1, 2])
    upsert = table.write_data([2, 3])
    delete = table.write_equality_deletes([2])
    result = commit_batch(table.catalog, table.identifier, "w", 1, B2, [upsert], [delete],
                          snapshot_properties={"engine": "spark"})

    assert result.status == BatchCommitStatus.COMMITTED and result.committed and result.attempts == 1
    current = table.current()
    assert result.snapshot == current and current.operation == "overwrite"
    assert current.summary[WRITER_ID] == "w" and current.summary[BATCH_ID] == "1"
    assert json.loads(current.summary[KAFKA_OFFSETS]) == {T: {"0": [10, 20]}}
    assert current.summary["engine"] == "spark" and current.summary["added-equality-delete-files"] == "1"
    assert table.ids() == [1, 2, 3]  # id 2: the old row deleted, the new one kept (same sequence number)
    batch = last_committed_batch(table.metadata(), "w")
    assert batch is not None and batch.batch_id == 1 and batch.snapshot == current


def test_a_pure_append_may_be_a_fast_append(table: CommitTable) -> None:
    merged = _commit(table, "w", 0, B1, [1])
    fast = _commit(table, "w", 1, B2, [2], fast_append=True)
    assert merged.snapshot.operation == fast.snapshot.operation == "append"
    assert table.ids() == [1, 2] and len(table.manifests()) == 2


def test_a_replayed_batch_is_skipped_and_changes_nothing(table: CommitTable) -> None:
    first = _commit(table, "w", 0, B1, [1])
    second = _commit(table, "w", 1, B2, [2])
    pointer, on_disk = table.metadata_location(), table.files_on_disk()

    replay_last = commit_batch(table.catalog, table.identifier, "w", 1, B2, [table.write_data([2])])
    replay_older = commit_batch(table.catalog, table.identifier, "w", 0, B1, [table.write_data([1])])

    assert replay_last.status == replay_older.status == BatchCommitStatus.SKIPPED
    assert not replay_last.committed and replay_last.attempts == 1
    assert replay_last.snapshot == second.snapshot and replay_older.snapshot == first.snapshot
    assert table.metadata_location() == pointer and table.ids() == [1, 2]
    new_files = table.files_on_disk() - on_disk
    assert all("/data/" in p for p in new_files) and len(new_files) == 2  # only the replays' own data files


def test_a_stale_writer_is_fenced_and_changes_nothing(table: CommitTable) -> None:
    _commit(table, "w", 0, B1, [1])
    _commit(table, "w", 1, B2, [2])
    pointer = table.metadata_location()
    with pytest.raises(StaleWriter) as caught:
        _commit(table, "w", 1, B3, [3])  # a replica that read other offsets for batch 1
    assert (caught.value.writer_id, caught.value.batch_id, caught.value.last_committed_batch_id) == ("w", 1, 1)
    assert table.metadata_location() == pointer and table.ids() == [1, 2]
    assert batch_status(table.catalog, table.identifier, "w", 2).status == BatchStatus.NEW
    assert batch_status(table.catalog, table.identifier, "w", 1).status == BatchStatus.ALREADY_COMMITTED


def test_writers_are_independent_and_offsets_merge_across_them(table: CommitTable) -> None:
    _commit(table, "old-query", 7, {T: {0: (0, 10), 1: (0, 5)}, "audit": {0: (3, 4)}}, [1])
    table.append([2])  # a commit that records no batch
    _commit(table, "new-query", 0, {T: {0: (10, 12), 1: (5, 5)}}, [3])  # a restart under a new query id
    _commit(table, "new-query", 1, {T: {0: (12, 15)}}, [4])

    metadata = table.metadata()
    assert committed_offsets(metadata) == {T: {0: 15, 1: 5}, "audit": {0: 4}}
    assert table_offsets(table.catalog, table.identifier) == committed_offsets(metadata)
    assert committed_offsets(metadata, "old-query") == {T: {0: 10, 1: 5}, "audit": {0: 4}}
    assert committed_offsets(metadata, "nobody") == {}
    assert committed_offsets(metadata, partitions={T: [1, 9]}) == {T: {1: 5}}
    assert last_committed_batch(metadata, "old-query").batch_id == 7  # type: ignore[union-attr]
    assert last_committed_batch(metadata, "nobody") is None
    assert _commit(table, "old-query", 8, {T: {0: (15, 16)}}, [5]).committed


def test_batches_on_another_branch_do_not_count_on_main(table: CommitTable) -> None:
    table.append([1])
    audit = _commit(table, "w", 0, B1, [2], branch="audit")
    assert audit.committed and table.metadata().refs["audit"].snapshot_id == audit.snapshot.snapshot_id
    assert committed_offsets(table.metadata()) == {}
    assert committed_offsets(table.metadata(), branch="audit") == {T: {0: 10}}
    assert _commit(table, "w", 0, B1, [2]).committed  # new on main
    assert table.ids() == [1, 2]


def test_floe_keys_cannot_be_overridden(table: CommitTable) -> None:
    with pytest.raises(InvalidArgument, match="floe.batch-id"):
        _commit(table, "w", 0, B1, [1], snapshot_properties={BATCH_ID: "9"})


def test_a_malformed_summary_in_the_table_stops_the_writer(table: CommitTable) -> None:
    bad = SnapshotProducer(table.catalog, table.identifier, FastAppend([table.write_data([1])]),
                           snapshot_properties={WRITER_ID: "w", BATCH_ID: "3"})  # offsets missing
    bad_snapshot = bad.commit()
    with pytest.raises(MalformedBatchSummary) as caught:
        _commit(table, "w", 4, B1, [2])
    assert caught.value.snapshot_id == bad_snapshot.snapshot_id and caught.value.key == KAFKA_OFFSETS
    assert table.ids() == [1]


def test_the_check_runs_again_after_a_lost_race(catalog: Catalog) -> None:
    """A replica of the same query lands the same batch first: the retry sees it and skips."""
    table = CommitTable.create(catalog)
    _commit(table, "w", 0, B1, [1])
    replica: list = []

    def replica_wins(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            replica.append(_commit(table, "w", 1, B2, [2]))

    result = _commit(table, "w", 1, B2, [2], before_commit=replica_wins)

    [winner] = replica
    assert winner.committed and result.status == BatchCommitStatus.SKIPPED and result.attempts == 2
    assert result.snapshot == winner.snapshot == table.current()
    assert [s.summary.get(BATCH_ID) for s in table.metadata().snapshots] == ["0", "1"]
    assert table.ids() == [1, 2]
    # The loser's first attempt left nothing: every metadata file on disk is the table's.
    metadata = table.metadata()
    reachable = {e.metadata_file for e in metadata.metadata_log} | {table.metadata_location()}
    reachable |= {s.manifest_list for s in metadata.snapshots}
    reachable |= {m.manifest_path for s in metadata.snapshots for m in table.manifests(s)}
    assert {p for p in table.files_on_disk() if "/metadata/" in p} == reachable


def test_a_lost_race_to_another_batch_retries_and_commits(table: CommitTable) -> None:
    def other_writer_wins(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            _commit(table, "other", 0, B3, [9])

    result = _commit(table, "w", 0, B1, [1], before_commit=other_writer_wins)
    assert result.committed and result.attempts == 2
    assert result.snapshot.sequence_number == 2 and table.ids() == [1, 9]
    assert committed_offsets(table.metadata()) == {T: {0: 10}}  # the newest batch for the partition wins


def test_an_empty_batch_still_records_its_offsets(table: CommitTable) -> None:
    _commit(table, "w", 0, B1, [1])
    empty = commit_batch(table.catalog, table.identifier, "w", 1, {T: {0: (10, 10), 1: (0, 0)}})
    assert empty.committed and empty.snapshot.summary.get("added-data-files") is None
    assert committed_offsets(table.metadata()) == {T: {0: 10, 1: 0}}
    assert table.ids() == [1] and Path(empty.snapshot.manifest_list).exists()
