"""Maintenance steps on real tables: each removes exactly the files (or snapshots) it should."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import batch_summary, committed_offsets, last_committed_batch
from commit.operations.delete_files import DeleteFiles
from commit.operations.fast_append import FastAppend
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from compaction.maintenance import MaintenanceOptions
from compaction.maintenance.dangling_deletes import (
    DataSequenceBounds,
    LiveFile,
    equality_delete_dangles,
    find_dangling_deletes,
    remove_dangling_deletes,
)
from compaction.maintenance.expire_snapshots import ExpiryPolicy, expire_snapshots, ingest_checkpoint_snapshots
from compaction.maintenance.orphan_files import remove_orphan_files
from table.manifest import DataFile, DataFileContent, FileFormat
from tests.commit.producer_support import CommitTable
from tests.compaction.conftest import CompactionTable

DAY_MS = 24 * 60 * 60 * 1000


# --------------------------------------------------------------------------
# Dangling deletes
# --------------------------------------------------------------------------


def test_dangling_delete_files_are_removed_and_no_other(partitioned_table: CompactionTable) -> None:
    table = partitioned_table
    [a1] = table.append_files(1, 10, categories=("a",))
    a2, b1 = table.append_files(1, 10, categories=("a", "b"), first_id=10)
    gone = table.write_position_deletes(a2, [1])  # names a file that is removed next
    kept_position = table.write_position_deletes(b1, [2])
    table.commit(RowDelta([], [gone, kept_position]))
    table.commit(DeleteFiles([a2]))
    no_data = table.write_equality_deletes([1], partition=("c",))  # no data in partition c
    kept_equality = table.write_equality_deletes([25], partition=("b",))  # older data in b
    table.commit(RowDelta([], [no_data, kept_equality]))
    d_data = table.write_rows([100, 101], "d")
    same_commit_equality = table.write_equality_deletes([100], partition=("d",))  # same sequence number: no effect
    same_commit_position = table.write_position_deletes(d_data, [1])  # same sequence number: applies
    table.commit(RowDelta([d_data], [same_commit_equality, same_commit_position]))
    rows = table.id_multiset()

    result = remove_dangling_deletes(table.catalog, table.identifier)

    assert set(result.removed) == {gone.file_path, no_data.file_path, same_commit_equality.file_path}
    assert table.current().snapshot_id == result.snapshot_id and table.current().operation == "delete"
    assert table.id_multiset() == rows and 100 in rows and 101 not in rows
    assert table.delete_files() == {kept_position.file_path, kept_equality.file_path, same_commit_position.file_path}
    assert a1.file_path in {f.file_path for f in table.data_files()}
    assert remove_dangling_deletes(table.catalog, table.identifier).removed == ()


def test_a_rewritten_partition_leaves_its_older_equality_deletes_dangling(partitioned_table: CompactionTable) -> None:
    table = partitioned_table
    old = table.append_files(2, 10, categories=("a",))
    equality = table.write_equality_deletes([3], partition=("a",))
    table.commit(RowDelta([], [equality]))
    assert find_dangling_deletes(table.io, table.metadata(), table.current()) == []
    fresh = table.write_rows([0, 1, 2, 4, 5], "a")  # what a rewrite without the deleted row leaves
    table.commit(RewriteFiles(old, [fresh], starting_snapshot_id=table.current().snapshot_id, keep_starting_sequence_number=False))

    assert [f.file_path for f in find_dangling_deletes(table.io, table.metadata(), table.current())] == [equality.file_path]


def test_global_equality_deletes_compare_with_all_data() -> None:
    def data(seq: int, partition: tuple) -> LiveFile:  # type: ignore[type-arg]
        return LiveFile(seq, DataFile(DataFileContent.DATA, f"d{seq}{partition}", FileFormat.PARQUET, partition, 1, 1, spec_id=1))

    bounds = DataSequenceBounds.of([data(5, ("a",)), data(3, ("b",))])
    delete = LiveFile(4, DataFile(DataFileContent.EQUALITY_DELETES, "e", FileFormat.PARQUET, (), 1, 1, equality_ids=[1], spec_id=0))
    assert not equality_delete_dangles(delete, bounds, is_global=True)  # partition b's data is older
    assert equality_delete_dangles(LiveFile(3, delete.data_file), bounds, is_global=True)
    assert equality_delete_dangles(delete, DataSequenceBounds.of([]), is_global=True)


# --------------------------------------------------------------------------
# Snapshot expiry
# --------------------------------------------------------------------------


def append_batch(table: CommitTable, ids: list[int], writer: str, batch: int, offsets: dict) -> int:  # type: ignore[type-arg]
    summary = batch_summary(writer, batch, offsets)
    return table.commit(FastAppend([table.write_data(ids)]), snapshot_properties=summary).snapshot_id


def plain_append(table: CommitTable, ids: list[int]) -> int:
    return table.append(ids)[1].snapshot_id


def test_expiry_keeps_the_history_exactly_once_reads(table: CompactionTable) -> None:
    s0 = plain_append(table, [0])
    s1 = append_batch(table, [1], "w1", 0, {"t": {0: (0, 10), 1: (0, 5)}})
    s2 = plain_append(table, [2])
    s3 = append_batch(table, [3], "w2", 0, {"t": {0: (10, 20)}})
    s4 = plain_append(table, [4])
    s5 = append_batch(table, [5], "w2", 1, {"t": {0: (20, 30)}})
    s6 = plain_append(table, [6])
    assert ingest_checkpoint_snapshots(table.metadata()) == {s1, s2, s3, s4, s5, s6}  # w1 and partition 1 live at s1

    first = expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=1))
    assert first.expired_snapshot_ids == {s0}

    s7 = append_batch(table, [7], "w1", 1, {"t": {1: (5, 9)}})
    offsets = committed_offsets(table.metadata())
    second = expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=1))

    assert second.expired_snapshot_ids == {s1, s2, s3, s4}
    md = table.metadata()
    assert {s.snapshot_id for s in md.snapshots} == {s5, s6, s7}
    assert committed_offsets(md) == offsets == {"t": {0: 30, 1: 9}}
    assert last_committed_batch(md, "w1").batch_id == 1 and last_committed_batch(md, "w2").batch_id == 1
    assert table.ids() == [0, 1, 2, 3, 4, 5, 6, 7]


def test_expiry_by_count_and_age_without_ingest_writers(table: CompactionTable) -> None:
    ids = [plain_append(table, [i]) for i in range(5)]
    young = expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=DAY_MS, retain_last=1))
    assert young.expired_snapshot_ids == frozenset()

    old = expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=2))

    assert old.expired_snapshot_ids == set(ids[:3])
    assert [s.snapshot_id for s in table.metadata().snapshots] == ids[3:]
    assert table.ids() == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------
# Orphan files
# --------------------------------------------------------------------------


def age(paths, days: float) -> None:  # type: ignore[no-untyped-def]
    stamp = time.time() - days * 86400
    for path in paths:
        os.utime(path, (stamp, stamp))


def test_orphan_files_older_than_the_window_are_removed_and_nothing_else(sqlite_catalog: Catalog) -> None:
    base = CommitTable.create(sqlite_catalog, properties={"write.metadata.previous-versions-max": "2"})
    table = CompactionTable(base.catalog, base.identifier, base.io)
    table.append_files(2, 10)
    table.commit(RowDelta([], [table.write_position_deletes(table.data_files()[0], [0])]))
    table.append_files(1, 10, first_id=100)
    expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=2))
    uncommitted = table.write_rows([500, 501])  # a crashed ingest batch
    metadata_dir = Path(table.location) / "metadata"
    stray_manifest = metadata_dir / "crashed-commit-m0.avro"
    stray_manifest.write_bytes(b"half")
    leftover_map = metadata_dir / "compaction-run-00000.positions.parquet"  # a crashed compaction's
    leftover_map.write_bytes(b"map")
    md = table.metadata()
    in_log = {e.metadata_file for e in md.metadata_log} | {table.metadata_location()}
    off_log = {p for p in table.files_on_disk() if p.endswith(".metadata.json")} - in_log
    assert len(off_log) >= 2  # the log keeps 2 previous versions
    age(table.files_on_disk(), days=4)  # everything is old: only references protect
    young = table.write_rows([600])  # an ingest batch being committed right now
    before = table.files_on_disk()
    rows = table.ids()

    result = remove_orphan_files(table.catalog, table.identifier, 3 * DAY_MS)

    expected = {uncommitted.file_path, str(stray_manifest), str(leftover_map), *off_log}
    assert set(result.deleted) == expected and result.failed == ()
    assert table.files_on_disk() == before - expected
    assert young.file_path in table.files_on_disk()
    assert table.ids() == rows
    assert remove_orphan_files(table.catalog, table.identifier, 3 * DAY_MS).deleted == ()


def test_a_data_path_outside_the_table_location_is_never_listed(sqlite_catalog: Catalog, tmp_path: Path) -> None:
    """Several tables may share a data path: another table's files there are not this table's orphans."""
    shared = tmp_path / "shared-data"
    base = CommitTable.create(sqlite_catalog, properties={"write.data.path": str(shared)})
    table = CompactionTable(base.catalog, base.identifier, base.io)
    table.append_files(1, 10)
    shared.mkdir()
    foreign = shared / "other-table-00000.parquet"
    foreign.write_bytes(b"another table's data")
    orphan = table.write_rows([9])  # under the table location
    age([str(foreign), orphan.file_path], days=4)

    result = remove_orphan_files(table.catalog, table.identifier, 3 * DAY_MS)

    assert result.deleted == (orphan.file_path,) and foreign.exists()


def test_files_younger_than_the_window_stay(table: CompactionTable) -> None:
    table.append_files(1, 10)
    orphan = table.write_rows([9])
    age([orphan.file_path], days=2)
    assert remove_orphan_files(table.catalog, table.identifier, 3 * DAY_MS).deleted == ()
    assert os.path.exists(orphan.file_path)


def test_windows_under_a_day_are_refused(table: CompactionTable) -> None:
    with pytest.raises(ValueError, match="at least a day"):
        remove_orphan_files(table.catalog, table.identifier, 60 * 60 * 1000)
    with pytest.raises(ValueError):
        MaintenanceOptions(orphan_older_than_ms=60 * 60 * 1000)


# --------------------------------------------------------------------------
# On object storage (S3Proxy): expiry deletes and orphan cleanup lists through S3
# --------------------------------------------------------------------------


def test_expiry_and_orphan_cleanup_on_s3(s3proxy, tmp_path: Path) -> None:
    import uuid

    from table.io import FileIO

    bucket = s3proxy.create_bucket(f"maint-{uuid.uuid4().hex[:12]}")
    with SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}", f"{bucket}/warehouse") as catalog:
        base = CommitTable.create(catalog, properties={"write.metadata.previous-versions-max": "2"})
        table = CompactionTable(base.catalog, base.identifier, base.io)
        io = FileIO.for_location(table.location)
        assert table.location.startswith(f"{bucket}/warehouse/")

        def stored() -> set[str]:
            return {entry.location for entry in io.list_prefix(table.location)}

        table.append_files(2, 10)
        replaced = table.data_files()[0]
        table.commit(RewriteFiles([replaced], [table.write_data(list(range(1000, 1010)))],
                                  starting_snapshot_id=table.metadata().current_snapshot().snapshot_id))
        table.append_files(1, 10, first_id=100)
        rows = table.ids()
        expired = expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=1))
        assert expired.expired_snapshot_ids and not io.exists(replaced.file_path), "expiry deletes on S3"
        uncommitted = table.write_rows([500, 501])  # a crashed ingest batch
        stray = f"{table.location}/metadata/crashed-commit-m0.avro"
        io.write_bytes(stray, b"half")
        before = stored()

        young = remove_orphan_files(table.catalog, table.identifier, 3 * DAY_MS)
        later = remove_orphan_files(table.catalog, table.identifier, 3 * DAY_MS,
                                    clock_ms=lambda: int(time.time() * 1000) + 4 * DAY_MS)

        assert young.deleted == ()  # S3's last-modified times are now: nothing is old enough
        assert {uncommitted.file_path, stray} <= set(later.deleted) and later.failed == ()
        assert stored() == before - set(later.deleted)
        assert table.ids() == rows
