"""The key index moves with the snapshots of a real table in a real catalog.

Commits wrap their operation in :class:`WithKeyIndex` (ingest) or
:class:`WithRemaps` (the compactor); another engine's commits do not. The
index must then describe the head, catch up with other writers' deletes,
follow rewrites, and refuse to move past data it has not seen.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from commit.catalog.base import Catalog
from commit.key_index.bucket_change import find_keys, write_change
from commit.key_index.key_hash import key_buckets
from commit.key_index.manifest import IndexChange, KeyIndexStale, describes, empty_manifest
from commit.key_index.operation import KeyIndexUpdate, WithKeyIndex, WithRemaps
from commit.key_index.rebuild import index_problems
from commit.key_index.store import current_manifest, index_location
from commit.operations.fast_append import FastAppend
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.row_delta import RowDelta
from commit.position_map import FilePositions, PositionMap, write_position_map
from table.scan import TableScan
from tests.commit.producer_support import CommitTable

BUCKETS = 2


@pytest.fixture()
def table(sqlite_catalog: Catalog) -> CommitTable:
    return CommitTable.create(sqlite_catalog)


def indexed_append(table: CommitTable, ids: list[int]) -> str:
    """Append a file of ``ids`` and index its rows, as an ingest batch does; the file's path."""
    metadata = table.metadata()
    manifest = current_manifest(table.io, metadata)
    first = manifest is None
    manifest = manifest or empty_manifest((1,), BUCKETS)
    data_file = table.write_data(ids)
    keys = pa.array(ids, pa.int64())
    buckets = key_buckets([keys], BUCKETS)
    changes = []
    location = index_location(metadata)
    for bucket in sorted(set(buckets.to_pylist())):
        mine = [i for i, b in zip(ids, buckets.to_pylist()) if b == bucket]
        entries = pa.table({"k1": pa.array(mine, pa.int64()), "file": [data_file.file_path] * len(mine),
                            "pos": pa.array([ids.index(i) for i in mine], pa.int64())})
        changes.append(write_change(table.io, manifest, location, bucket, entries))
    change = IndexChange(tuple(c.segment for c in changes), tuple(p for c in changes for p in c.replaced))
    update = KeyIndexUpdate((change,), (1,), BUCKETS, location, table.identifier, rebuilt=first,
                            rebuilt_from=None)
    table.commit(WithKeyIndex(FastAppend([data_file]), update))
    return data_file.file_path


def located(table: CommitTable, ids: list[int]) -> dict[int, tuple[str, int]]:
    metadata = table.metadata()
    manifest = current_manifest(table.io, metadata)
    assert manifest is not None
    found = {}
    keys = pa.array(ids, pa.int64())
    for bucket in range(BUCKETS):
        mine = [i for i, b in zip(ids, key_buckets([keys], BUCKETS).to_pylist()) if b == bucket]
        files, positions = find_keys(table.io, manifest, bucket, pa.table({"k1": pa.array(mine, pa.int64())}))
        found.update({i: (f, p) for i, f, p in zip(mine, files.to_pylist(), positions.to_pylist()) if f})
    return found


def assert_clean(table: CommitTable) -> None:
    metadata = table.metadata()
    manifest = current_manifest(table.io, metadata)
    assert manifest is not None and describes(manifest, metadata)
    assert index_problems(table.io, metadata, manifest) == []


def test_each_indexed_commit_moves_the_index_to_its_snapshot(table: CommitTable) -> None:
    first = indexed_append(table, list(range(10)))
    second = indexed_append(table, [20, 21])
    assert located(table, [0, 9, 20, 21]) == {0: (first, 0), 9: (first, 9), 20: (second, 0), 21: (second, 1)}
    assert current_manifest(table.io, table.metadata()).snapshot_id == table.current().snapshot_id
    assert_clean(table)


def test_another_engines_delete_becomes_tombstones_at_the_next_indexed_commit(table: CommitTable) -> None:
    path = indexed_append(table, list(range(10)))
    [data_file] = [t.data_file for t in TableScan(
        table.io, table.metadata()).plan_files()]
    table.commit(RowDelta([], [table.write_position_deletes(data_file, [3, 4])]))  # not Floe: no index update
    assert describes(current_manifest(table.io, table.metadata()), table.metadata()), "a delete changes no data file"

    indexed_append(table, [30])
    assert set(located(table, list(range(10)))) == set(range(10)) - {3, 4}
    assert located(table, [5])[5] == (path, 5)
    assert_clean(table)


def test_a_batch_of_transaction_markers_only_keeps_the_index_current(table: CommitTable) -> None:
    indexed_append(table, [1, 2])
    table.commit(RowDelta([], []))  # a batch that read no record: its Kafka offsets only, no file
    assert table.current().summary["changed-partition-count"] == "0"
    assert describes(current_manifest(table.io, table.metadata()), table.metadata())
    indexed_append(table, [3])
    assert_clean(table)


def test_another_engines_append_makes_the_index_stale_and_the_next_commit_refuses(table: CommitTable) -> None:
    indexed_append(table, [1, 2])
    table.append([100])
    assert not describes(current_manifest(table.io, table.metadata()), table.metadata())
    with pytest.raises(KeyIndexStale, match="changed data files"):
        indexed_append(table, [3])


def test_a_rewrite_registers_its_position_map_and_entries_follow_it(table: CommitTable, tmp_path: Path) -> None:
    old = indexed_append(table, [0, 1, 2, 3])
    [old_file] = [t.data_file for t in TableScan(
        table.io, table.metadata()).plan_files()]
    new_file = table.write_data([0, 1, 2, 3])
    map_path = str(tmp_path / "group.positions.parquet")
    write_position_map(table.io, map_path, PositionMap((new_file.file_path,), {
        old: FilePositions(pa.array([0, 1, 2, 3], pa.int64()), (0,), (0,), (0,))}))
    start = table.current().snapshot_id
    remaps = WithRemaps(RewriteFiles([old_file], [new_file], starting_snapshot_id=start), [(map_path, (old,))])
    table.commit(remaps)

    assert remaps.registered
    assert located(table, [0, 3]) == {0: (new_file.file_path, 0), 3: (new_file.file_path, 3)}
    assert_clean(table)
    indexed_append(table, [2])  # a later upsert of key 2 wins over the remap
    assert located(table, [2])[2][1] == 0 and located(table, [2])[2][0] != new_file.file_path
