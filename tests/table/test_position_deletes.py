"""Position deletes on the read path: grouping a delete file's rows by data
file, the scan's cache of delete files, the per-batch keep mask and filter,
and end-to-end reads against a Python model (many small delete files, deletes
of other files, repeats, positions past the end, empty and unsorted files,
rows on batch boundaries)."""

from __future__ import annotations

import random
import uuid
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.arrow_schema import schema_to_arrow
from table.deletes import positions as positions_module
from table.deletes.filter import filter_rows, keep_mask, sorted_positions
from table.deletes.positions import (
    PositionCache,
    deleted_positions,
    group_by_path,
    read_positions,
    referenced_data_files,
)
from table.deletes.writers import PositionDeleteWriter
from table.errors import ValidationError
from table.manifest import DataFile, DataFileContent, FileFormat
from table.parquet.writer import DataFileWriter
from table.reader import read_tasks
from table.scan import TableScan
from table.schema import Schema
from table.types import IntegerType, LongType, NestedField, StringType
from tests.table.helpers import HandTable

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "note", StringType()),
    NestedField(4, "value", IntegerType()),
)


def _positions(parts: Sequence[pa.Array]) -> list[int]:
    return [p for part in parts for p in part.to_pylist()]


# --------------------------------------------------------------------------
# group_by_path
# --------------------------------------------------------------------------


def test_a_sorted_file_is_grouped_into_one_slice_per_data_file() -> None:
    paths = pa.array(["a", "a", "b", "c", "c", "c"]).dictionary_encode()
    positions = pa.array([1, 5, 0, 2, 3, 9], pa.int64())
    groups = group_by_path(paths, positions)
    assert {name: _positions(parts) for name, parts in groups.items()} == {"a": [1, 5], "b": [0], "c": [2, 3, 9]}
    assert all(len(parts) == 1 for parts in groups.values())
    # slices of the column read, not copies
    assert groups["c"][0].buffers()[1].address == positions.buffers()[1].address


def test_unsorted_rows_and_plain_strings_are_grouped_in_row_order() -> None:
    paths = pa.array(["b", "a", "b", "a", "b", "c"])
    positions = pa.array([7, 3, 1, 3, 4, 0], pa.int32())
    groups = group_by_path(paths, positions)
    assert {name: _positions(parts) for name, parts in groups.items()} == {"a": [3, 3], "b": [7, 1, 4], "c": [0]}
    assert all(part.type == pa.int64() for parts in groups.values() for part in parts)
    assert all(len(parts) == 1 for parts in groups.values())


def test_null_paths_name_no_file_and_empty_input_has_no_group() -> None:
    paths = pa.array(["a", None, None, "a"]).dictionary_encode()
    groups = group_by_path(paths, pa.array([1, 2, 3, 4], pa.int64()))
    assert {name: _positions(parts) for name, parts in groups.items()} == {"a": [1, 4]}
    assert group_by_path(pa.array([], pa.string()), pa.array([], pa.int64())) == {}
    with pytest.raises(ValidationError, match="2 file paths but 1 positions"):
        group_by_path(pa.array(["a", "b"]), pa.array([1], pa.int64()))


# --------------------------------------------------------------------------
# sorted_positions, keep_mask, filter_rows
# --------------------------------------------------------------------------


def test_sorted_positions_merges_parts_keeping_repeats_and_dropping_nulls() -> None:
    parts = [pa.array([9, 2, 2], pa.int64()), pa.array([5, None, 2], pa.int32()), pa.array([], pa.int64())]
    merged = sorted_positions(parts)
    assert merged.dtype == np.int64 and merged.tolist() == [2, 2, 2, 5, 9]
    assert sorted_positions([]).tolist() == []


@pytest.mark.parametrize(
    ("start", "length", "deleted", "kept"),
    [
        (10, 5, [9, 15, 16], None),  # just outside both ends of the batch
        (10, 5, [10], [11, 12, 13, 14]),  # the first row
        (10, 5, [14], [10, 11, 12, 13]),  # the last row
        (10, 5, [9, 10, 14, 15], [11, 12, 13]),  # both ends, neighbours outside
        (10, 5, [11, 11, 11, 13], [10, 12, 14]),  # repeats
        (10, 5, [10, 11, 12, 13, 14], []),  # every row
        (0, 3, [1, 10**12], [0, 2]),  # far past the end of the file
        (0, 3, [], None),
    ],
)
def test_keep_mask_at_batch_boundaries(start: int, length: int, deleted: list[int], kept: Optional[list[int]]) -> None:
    mask = keep_mask(np.array(deleted, np.int64), start, length)
    if kept is None:
        assert mask is None
        return
    assert mask is not None and mask.buffers()[0] is None  # no validity bitmap: filter_rows' fast path
    rows = pa.array(range(start, start + length), pa.int64())
    assert rows.filter(mask).to_pylist() == kept


@settings(max_examples=200, deadline=None)
@given(
    deleted=st.lists(st.integers(0, 200), max_size=60),
    start=st.integers(0, 150),
    length=st.integers(1, 80),
)
def test_keep_mask_agrees_with_a_python_model(deleted: list[int], start: int, length: int) -> None:
    mask = keep_mask(sorted_positions([pa.array(deleted, pa.int64())]), start, length)
    expected = [p for p in range(start, start + length) if p not in set(deleted)]
    rows = pa.array(range(start, start + length), pa.int64())
    assert (rows.to_pylist() if mask is None else rows.filter(mask).to_pylist()) == expected


def _mixed_batch(length: int) -> pa.RecordBatch:
    rng = random.Random(length)
    return pa.record_batch(
        {
            "id": pa.array(range(length), pa.int64()),
            "name": pa.array([rng.choice(["a", "bb", None, "cccc"]) for _ in range(length)]),
            "empty": pa.nulls(length, pa.string()),
            "point": pa.nulls(length, pa.struct([("x", pa.int32())])),
            "uuid": pa.nulls(length, pa.uuid()),
            "tags": pa.array([[i] if i % 3 else None for i in range(length)], pa.list_(pa.int64())),
        }
    )


@pytest.mark.parametrize("with_validity", [False, True])
def test_filter_rows_is_batch_filter(with_validity: bool) -> None:
    batch = _mixed_batch(300)
    rng = random.Random(3)
    bools = [rng.random() < 0.8 for _ in range(310)]
    if with_validity:
        bools = [None if i % 17 == 0 else b for i, b in enumerate(bools)]  # a null drops the row
    keep = pa.array(bools, pa.bool_()).slice(7, 300)  # a bitmap at an offset
    filtered = filter_rows(batch, keep)
    assert filtered.schema == batch.schema
    assert filtered.equals(batch.filter(keep))
    assert filter_rows(batch, pa.repeat(pa.scalar(False), 300)).num_rows == 0


# --------------------------------------------------------------------------
# Reading delete files, and the scan's cache of them
# --------------------------------------------------------------------------


class _Files(HandTable):
    """Data and delete files written by Floe's writers (or by hand)."""

    def __init__(self, tmp_path: Any) -> None:
        super().__init__(str(tmp_path / "table"), SCHEMA)

    def data(self, count: int, first_id: int = 0) -> DataFile:
        rows = pa.table(
            {
                "id": pa.array(range(first_id, first_id + count), pa.int64()),
                "name": pa.array([f"n{i % 7}" for i in range(count)]),
                "note": pa.nulls(count, pa.string()),
                "value": pa.array(range(count), pa.int32()),
            },
            schema=schema_to_arrow(SCHEMA),
        )
        writer = DataFileWriter(self.io, f"{self.location}/data", SCHEMA, self.metadata.spec(), ())
        writer.write(rows)
        (data_file,) = writer.close()
        return data_file

    def positions(self, deletes: Sequence[tuple[str, int]]) -> DataFile:
        writer = PositionDeleteWriter(self.io, f"{self.location}/data", SCHEMA, self.metadata.spec(), ())
        for path, pos in deletes:
            writer.delete(path, pos)
        (delete_file,) = writer.close()
        return delete_file

    def by_hand(self, deletes: Sequence[tuple[str, int]]) -> DataFile:
        """A delete file in the order given (the spec wants it sorted), with no metrics."""
        schema = pa.schema([
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
        ])
        columns = [pa.array([d[0] for d in deletes], pa.string()), pa.array([d[1] for d in deletes], pa.int64())]
        rows = pa.table(columns, schema=schema)
        path = f"{self.location}/data/hand-{uuid.uuid4().hex[:8]}.parquet"
        with self.io.open_output(path) as out:
            pq.write_table(rows, out, row_group_size=3)
        size = self.io.size(path)
        return DataFile(DataFileContent.POSITION_DELETES, path, FileFormat.PARQUET, (), len(deletes), size)


def test_a_delete_file_naming_several_data_files_is_read_once(tmp_path: Any) -> None:
    files = _Files(tmp_path)
    a, b, c, d = (f"s3://b/{name}.parquet" for name in "abcd")
    shared = files.positions([(a, 3), (a, 1), (c, 0), (b, 2)])
    cache = PositionCache()
    found = {path: _positions(cache.positions(files.io, shared, path)) for path in (a, b, c, d)}
    assert found == {a: [1, 3], b: [2], c: [0], d: []}
    assert (cache.reads, cache.hits) == (1, 3)


def test_each_needed_row_group_is_read_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _Files(tmp_path)
    a, b, c, d, e, z = (f"s3://b/{name}.parquet" for name in "abcdez")
    # row groups of 3 rows: [a a b] [b c c] [d d e] [e]; their file_path statistics say which paths each may hold
    groups = files.by_hand([(a, 0), (a, 1), (b, 2), (b, 3), (c, 4), (c, 5), (d, 6), (d, 7), (e, 8), (e, 9)])
    read: list[int] = []
    original = positions_module._OpenDeletes.read
    monkeypatch.setattr(positions_module._OpenDeletes, "read", lambda self, g: read.append(g) or original(self, g))
    cache = PositionCache()
    found = [(path, _positions(cache.positions(files.io, groups, path))) for path in (a, b, c, d, z, e, a)]
    assert found == [(a, [0, 1]), (b, [2, 3]), (c, [4, 5]), (d, [6, 7]), (z, []), (e, [8, 9]), (a, [0, 1])]
    assert read == [0, 1, 2, 3]
    assert (cache.reads, cache.hits) == (4, 3)  # a, b (group 1), d, e (group 3) open the file


def test_files_for_one_data_file_or_over_budget_are_not_kept(tmp_path: Any) -> None:
    files = _Files(tmp_path)
    pinned = files.positions([("s3://b/a.parquet", 1), ("s3://b/a.parquet", 2)])  # its bounds name a.parquet only
    shared = files.positions([("s3://b/a.parquet", 4), ("s3://b/b.parquet", 5)])
    cache = PositionCache()
    for _ in range(2):
        assert _positions(cache.positions(files.io, pinned, "s3://b/a.parquet")) == [1, 2]
    assert (cache.reads, cache.hits) == (2, 0)
    nothing_kept = PositionCache(max_bytes=0)
    for _ in range(2):
        assert _positions(nothing_kept.positions(files.io, shared, "s3://b/b.parquet")) == [5]
    assert (nothing_kept.reads, nothing_kept.hits) == (2, 0)


def test_the_least_recently_used_file_leaves_a_full_cache(tmp_path: Any) -> None:
    files = _Files(tmp_path)
    one = files.positions([("s3://b/a.parquet", i) for i in range(10)] + [("s3://b/b.parquet", 0)])
    two = files.positions([("s3://b/a.parquet", i) for i in range(10, 20)] + [("s3://b/b.parquet", 1)])
    cache = PositionCache(max_bytes=8 * 11)  # one file
    for delete_file in (one, two, two, one):
        cache.positions(files.io, delete_file, "s3://b/b.parquet")
    assert (cache.reads, cache.hits) == (3, 1)
    with pytest.raises(ValidationError, match=">= 0 bytes"):
        PositionCache(max_bytes=-1)


def test_read_positions_matches_paths_through_the_dictionary(tmp_path: Any) -> None:
    files = _Files(tmp_path)
    a, b, c = (f"s3://b/{name}.parquet" for name in "abc")
    unsorted = files.by_hand([(b, 5), (a, 1), (c, 2), (b, 0)])
    tables = list(read_positions(files.io, unsorted, [b]))
    assert all(pa.types.is_dictionary(t.column("file_path").type) for t in tables)
    assert [p for t in tables for p in t.column("pos").to_pylist()] == [5, 0]
    assert referenced_data_files(files.io, unsorted) == {a, b, c}
    assert deleted_positions(files.io, [unsorted], [b, c]) == {b: [0, 5], c: [2]}


# --------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_many_small_delete_files_read_like_a_python_model(tmp_path: Any, batch_size: int, cache_bytes: int) -> None:
    files = _Files(tmp_path)
    data = [files.data(count, first_id) for count, first_id in ((40, 0), (23, 1000), (1, 2000))]
    rng = random.Random(batch_size)
    deletes: list[DataFile] = []
    deleted: set[tuple[str, int]] = set()
    for _ in range(25):  # one small delete file per "batch", each naming several data files
        chosen = [(rng.choice(data).file_path, rng.randrange(45)) for _ in range(rng.randrange(1, 6))]
        chosen.append(("s3://elsewhere/other.parquet", rng.randrange(5)))  # a file of another table
        deletes.append(files.positions(chosen))
        deleted.update(chosen)
    repeats = sorted(deleted)[:5]
    deletes.append(files.by_hand(list(reversed(repeats)) + repeats))  # unsorted, and repeats earlier deletes
    deletes.append(files.by_hand([]))  # empty
    deletes.append(files.by_hand([(data[0].file_path, 39), (data[0].file_path, 40), (data[0].file_path, 10**9)]))
    deleted.add((data[0].file_path, 39))
    files.commit(data=data)
    files.commit(deletes=deletes)

    scan = TableScan(files.io, files.metadata)
    batches = read_tasks(
        files.io, scan.plan_files(), SCHEMA, batch_size=batch_size, position_cache_bytes=cache_bytes,
        with_positions=True,
    )
    result = pa.Table.from_batches(list(batches))
    first_ids = {0: 0, 1: 1000, 2: 2000}
    expected = [
        first_ids[i] + pos
        for i, f in enumerate(data)
        for pos in range(f.record_count)
        if (f.file_path, pos) not in deleted
    ]
    assert sorted(result.column("id").to_pylist()) == expected
    assert [i % 1000 for i in result.column("id").to_pylist()] == result.column("_pos").to_pylist()
    assert result.column("note").null_count == result.num_rows


def test_reads_sharing_a_cache_read_a_delete_file_once(tmp_path: Any) -> None:
    files = _Files(tmp_path)
    one, two = files.data(5), files.data(4, first_id=100)
    files.commit(data=[one, two])
    files.commit(deletes=[files.positions([(one.file_path, 0), (two.file_path, 3), (two.file_path, 1)])])
    tasks = list(TableScan(files.io, files.metadata).plan_files())
    cache = PositionCache()
    batches = [b for task in tasks for b in read_tasks(files.io, [task], SCHEMA, position_cache=cache)]
    assert sorted(i for b in batches for i in b.column("id").to_pylist()) == [1, 2, 3, 4, 100, 102]
    assert (cache.reads, cache.hits) == (1, 1)
