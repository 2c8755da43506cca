"""Manifest merging: the bin-packing plan (pure), the entries of a merged
manifest, and merge appends on a real table."""

from __future__ import annotations

from commit.catalog.base import Catalog
from commit.operations.fast_append import FastAppend
from commit.operations.manifest_merge import (
    ManifestMerger,
    MergeSettings,
    merged_entries,
    pack_end,
    plan_merge,
)
from commit.operations.merge_append import MergeAppend
from table.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_entries,
)
from tests.commit.producer_support import CommitTable

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, ManifestEntryStatus.DELETED


def _manifest(name: str, length: int, spec_id: int = 0, content: ManifestContent = ManifestContent.DATA) -> ManifestFile:
    return ManifestFile(name, length, spec_id, content, 1, 1, 1, 1, 0, 0, 1, 0, 0)


def _names(bins) -> list[tuple[list[str], bool]]:  # type: ignore[no-untyped-def]
    return [([m.manifest_path for m in b.manifests], b.merge) for b in bins]


def test_pack_end_leaves_the_first_bin_underfilled() -> None:
    assert pack_end([5, 5, 5], lambda w: w, 10) == [[5], [5, 5]]
    assert pack_end([1, 2, 3, 4], lambda w: w, 5) == [[1], [2, 3], [4]]
    assert pack_end([20, 1], lambda w: w, 10) == [[20], [1]]  # an oversized item gets a bin of its own


def test_first_bin_merges_only_at_min_count() -> None:
    manifests = [_manifest("new", 1), _manifest("a", 1), _manifest("b", 1)]
    few = plan_merge(manifests, MergeSettings(min_count_to_merge=4, target_size_bytes=100))
    assert _names(few) == [(["new", "a", "b"], False)]
    enough = plan_merge(manifests, MergeSettings(min_count_to_merge=3, target_size_bytes=100))
    assert _names(enough) == [(["new", "a", "b"], True)]


def test_older_bins_merge_whatever_their_count() -> None:
    manifests = [_manifest("new", 4), _manifest("a", 4), _manifest("b", 5), _manifest("c", 5)]
    bins = plan_merge(manifests, MergeSettings(min_count_to_merge=100, target_size_bytes=10))
    assert _names(bins) == [(["new", "a"], False), (["b", "c"], True)]


def test_bins_never_mix_specs_or_contents() -> None:
    manifests = [
        _manifest("new", 1, spec_id=1),
        _manifest("old-spec", 1, spec_id=0),
        _manifest("spec1", 1, spec_id=1),
        _manifest("del-new", 1, content=ManifestContent.DELETES),
        _manifest("del-old", 1, content=ManifestContent.DELETES),
        _manifest("old-spec-2", 1, spec_id=0),
    ]
    bins = plan_merge(manifests, MergeSettings(min_count_to_merge=2, target_size_bytes=100))
    assert _names(bins) == [
        (["new", "spec1"], True),  # higher spec ids first, as Java orders them
        (["old-spec", "old-spec-2"], True),
        (["del-new", "del-old"], True),
    ]
    assert [b.content for b in bins] == [ManifestContent.DATA, ManifestContent.DATA, ManifestContent.DELETES]


def test_single_manifests_and_disabled_merging_are_kept() -> None:
    manifests = [_manifest("new", 1), _manifest("a", 50)]
    assert _names(plan_merge(manifests, MergeSettings(min_count_to_merge=1, target_size_bytes=10))) == [
        (["new"], False),
        (["a"], False),
    ]
    disabled = MergeSettings(enabled=False, min_count_to_merge=1, target_size_bytes=1000)
    assert _names(plan_merge(manifests, disabled)) == [(["new"], False), (["a"], False)]


def test_settings_come_from_table_properties() -> None:
    assert MergeSettings.from_properties({}) == MergeSettings(True, 100, 8 * 1024 * 1024)
    props = {
        "commit.manifest-merge.enabled": "false",
        "commit.manifest.min-count-to-merge": "3",
        "commit.manifest.target-size-bytes": "1024",
    }
    assert MergeSettings.from_properties(props) == MergeSettings(False, 3, 1024)


def _entry(status: ManifestEntryStatus, snapshot_id: int, path: str) -> ManifestEntry:
    f = DataFile(DataFileContent.DATA, path, FileFormat.PARQUET, (), 1, 1)
    seq = None if status == ADDED and snapshot_id == 9 else 1
    return ManifestEntry(status, snapshot_id, seq, seq, f)


def test_merged_entries_keep_this_snapshots_changes_only() -> None:
    entries = [
        _entry(ADDED, 9, "mine"),
        _entry(DELETED, 9, "removed-now"),
        _entry(ADDED, 1, "old-add"),
        _entry(EXISTING, 1, "old"),
        _entry(DELETED, 1, "removed-before"),
    ]
    merged = {e.data_file.file_path: e for e in merged_entries(entries, snapshot_id=9)}
    assert {p: e.status for p, e in merged.items()} == {
        "mine": ADDED,
        "removed-now": DELETED,
        "old-add": EXISTING,
        "old": EXISTING,
    }
    assert merged["mine"].sequence_number is None  # inherits the new snapshot's
    assert merged["old-add"].sequence_number == 1


def test_merge_append_keeps_few_manifests(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties={"commit.manifest.min-count-to-merge": "3"})
    for i in range(5):
        table.commit(MergeAppend([table.write_data([i])]))
        assert len(table.manifests()) <= 2
    assert table.ids() == [0, 1, 2, 3, 4]
    entries = [e for m in table.manifests() for e in read_manifest_entries(table.io, m)]
    assert sorted(e.sequence_number for e in entries) == [1, 2, 3, 4, 5]  # kept through merging
    added = [e for e in entries if e.status == ADDED]
    assert len(added) == 1 and added[0].snapshot_id == table.current().snapshot_id


def test_disabled_merging_leaves_one_manifest_per_append(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(
        sqlite_catalog,
        properties={"commit.manifest-merge.enabled": "false", "commit.manifest.min-count-to-merge": "2"},
    )
    for i in range(3):
        table.commit(MergeAppend([table.write_data([i])]))
    assert len(table.manifests()) == 3


def test_fast_append_never_merges(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties={"commit.manifest.min-count-to-merge": "2"})
    for i in range(3):
        table.commit(FastAppend([table.write_data([i])]))
    assert len(table.manifests()) == 3


def test_a_bin_merged_in_an_earlier_attempt_is_not_rewritten() -> None:
    written: list[tuple[str, ...]] = []

    def write(b, entries):  # type: ignore[no-untyped-def]
        list(entries)
        written.append(tuple(m.manifest_path for m in b.manifests))
        return _manifest(f"merged-{len(written)}", 1)

    merger = ManifestMerger(MergeSettings(min_count_to_merge=2, target_size_bytes=100), snapshot_id=9)
    first_attempt = merger.merge([_manifest("new", 1), _manifest("a", 1)], lambda m: [], write)
    retry_same_base = merger.merge([_manifest("new", 1), _manifest("a", 1)], lambda m: [], write)
    retry_new_base = merger.merge([_manifest("new", 1), _manifest("c", 1), _manifest("a", 1)], lambda m: [], write)
    assert first_attempt == retry_same_base
    assert written == [("new", "a"), ("new", "c", "a")]
    assert [m.manifest_path for m in retry_new_base] == ["merged-2"]
