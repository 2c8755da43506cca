"""Snapshot expiry: which snapshots go (age, count, refs, pins), and that the
files deleted afterwards are exactly those no retained snapshot references."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from commit.catalog.base import Catalog
from commit.metadata_committer import CommitFiles, MetadataCommitter, PendingCommit
from commit.operations.expire_snapshots import ExpireSnapshots
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from table.manifest import DataFile, read_manifest_list
from table.metadata import Snapshot
from tests.commit.producer_support import CommitTable


@dataclass
class History:
    """S1 append f1; S2 append f2; S3 delete row 0 of f1 (d1); S4 compact f1+d1 into f3."""

    table: CommitTable
    f1: DataFile
    f2: DataFile
    f3: DataFile
    d1: DataFile
    s1: Snapshot
    s2: Snapshot
    s3: Snapshot
    s4: Snapshot

    def manifests(self, snapshot: Snapshot) -> set[str]:
        return {m.manifest_path for m in read_manifest_list(self.table.io, snapshot.manifest_list)}

    def expire(self, **options: object) -> object:
        options.setdefault("sleep", lambda s: None)
        return ExpireSnapshots(self.table.catalog, self.table.identifier, **options).commit()  # type: ignore[arg-type]


def _pause() -> None:
    time.sleep(0.003)  # distinct snapshot timestamps


@pytest.fixture()
def history(sqlite_catalog: Catalog) -> History:
    table = CommitTable.create(sqlite_catalog)
    f1, s1 = table.append([1, 2])
    _pause()
    f2, s2 = table.append([3])
    _pause()
    d1 = table.write_position_deletes(f1, [0])
    s3 = table.commit(RowDelta([], [d1]))
    _pause()
    f3 = table.write_data([2])
    s4 = table.commit(RewriteFiles([f1], [f3], starting_snapshot_id=s3.snapshot_id, replaced_delete_files=[d1]))
    _pause()
    return History(table, f1, f2, f3, d1, s1, s2, s3, s4)


def _referenced(table: CommitTable) -> set[str]:
    """Every file the retained snapshots reach, plus the metadata files."""
    md = table.metadata()
    files = {p for p in table.files_on_disk() if p.endswith(".metadata.json")}
    for s in md.snapshots:
        files.add(s.manifest_list)
        files.update(m.manifest_path for m in table.manifests(s))
        files.update(table.live_paths(s))
    return files


def test_expire_all_but_the_last_deletes_exactly_the_unreferenced_files(history: History) -> None:
    table = history.table
    before = table.files_on_disk()
    kept_manifests = history.manifests(history.s4)
    gone_manifests = (history.manifests(history.s1) | history.manifests(history.s2) | history.manifests(history.s3)) - kept_manifests

    result = history.expire(older_than_ms=int(time.time() * 1000) + 1, retain_last=1)

    assert result.expired_snapshot_ids == {history.s1.snapshot_id, history.s2.snapshot_id, history.s3.snapshot_id}
    assert [s.snapshot_id for s in table.metadata().snapshots] == [history.s4.snapshot_id]
    assert result.deleted.data_files == [history.f1.file_path]
    assert result.deleted.delete_files == [history.d1.file_path]
    assert set(result.deleted.manifests) == gone_manifests and len(gone_manifests) == 2
    assert set(result.deleted.manifest_lists) == {history.s1.manifest_list, history.s2.manifest_list, history.s3.manifest_list}
    assert result.failed_deletes == ()
    after = table.files_on_disk()
    assert before - after == set(result.deleted.all())
    assert after - {result.metadata_location} == _referenced(table) - {result.metadata_location}
    assert table.ids() == [2, 3]


def test_retain_last_keeps_the_newest_snapshots_and_their_files(history: History) -> None:
    result = history.expire(older_than_ms=int(time.time() * 1000) + 1, retain_last=2)
    assert result.expired_snapshot_ids == {history.s1.snapshot_id, history.s2.snapshot_id}
    # S3 still lists every manifest and file of S1 and S2: only their manifest lists go.
    assert result.deleted.data_files == result.deleted.delete_files == result.deleted.manifests == []
    assert set(result.deleted.manifest_lists) == {history.s1.manifest_list, history.s2.manifest_list}
    assert Path(history.f1.file_path).exists() and Path(history.d1.file_path).exists()
    assert history.table.rows(snapshot_id=history.s3.snapshot_id) == [{"id": 2, "data": "v2", "category": "a"}, {"id": 3, "data": "v3", "category": "a"}]


def test_age_limit_keeps_newer_snapshots(history: History) -> None:
    result = history.expire(older_than_ms=history.s3.timestamp_ms)
    assert result.expired_snapshot_ids == {history.s1.snapshot_id, history.s2.snapshot_id}


def test_defaults_expire_nothing_recent(history: History) -> None:
    pointer = history.table.metadata_location()
    result = history.expire()  # history.expire.max-snapshot-age-ms: five days
    assert result.expired_snapshot_ids == frozenset() and result.metadata_location is None
    assert history.table.metadata_location() == pointer


def test_pinned_snapshots_and_their_files_stay(history: History) -> None:
    result = history.expire(older_than_ms=int(time.time() * 1000) + 1, pinned=[history.s1.snapshot_id])
    assert result.expired_snapshot_ids == {history.s2.snapshot_id, history.s3.snapshot_id}
    assert Path(history.f1.file_path).exists()  # S1 still reads it
    assert result.deleted.delete_files == [history.d1.file_path]  # no retained snapshot has d1 live
    assert history.table.rows(snapshot_id=history.s1.snapshot_id) == [
        {"id": 1, "data": "v1", "category": "a"},
        {"id": 2, "data": "v2", "category": "a"},
    ]


def test_branch_heads_are_never_expired(history: History) -> None:
    table = history.table
    committer = MetadataCommitter(table.catalog, table.identifier, CommitFiles(table.io))
    committer.commit(lambda loaded, _: loaded.metadata.set_branch("audit", history.s2.snapshot_id), lambda _: False)

    result = history.expire(older_than_ms=int(time.time() * 1000) + 1)
    assert result.expired_snapshot_ids == {history.s1.snapshot_id, history.s3.snapshot_id}
    assert table.metadata().refs["audit"].snapshot_id == history.s2.snapshot_id
    assert Path(history.f1.file_path).exists() and Path(history.f2.file_path).exists()
    assert [r["id"] for r in table.rows(snapshot_id=history.s2.snapshot_id)] == [1, 2, 3]


def test_expiry_retries_a_lost_race(history: History) -> None:
    table = history.table
    appended: list[Snapshot] = []

    def concurrent_append(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            appended.append(table.append([4])[1])

    result = history.expire(older_than_ms=int(time.time() * 1000) + 1, retain_last=2, before_commit=concurrent_append)
    assert result.expired_snapshot_ids == {history.s1.snapshot_id, history.s2.snapshot_id, history.s3.snapshot_id}
    assert [s.snapshot_id for s in table.metadata().snapshots] == [history.s4.snapshot_id, appended[0].snapshot_id]
    assert table.ids() == [2, 3, 4]
    assert set(table.files_on_disk()) - {result.metadata_location} == _referenced(table) - {result.metadata_location}
