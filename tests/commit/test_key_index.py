"""The key index's pure rules: buckets, segments (lookup, resolution, remaps), manifest changes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commit.key_index.bucket_change import find_keys, write_change
from commit.key_index.key_hash import key_buckets
from commit.key_index.manifest import (
    IndexChange,
    KeyIndexConflict,
    SegmentRef,
    apply_change,
    empty_manifest,
    encode_manifest,
    manifest_from_json,
    retire,
)
from commit.key_index.segments import lookup, make_segment, remap_segment, resolve
from commit.key_index.store import read_manifest, write_manifest
from commit.position_map import FilePositions, PositionMap
from table.errors import ValidationError
from table.io import FileIO
from table.transforms import BucketTransform


def segment(entries: dict[int, tuple[str | None, int]]) -> pa.Table:
    keys = pa.table({"k1": pa.array(list(entries), pa.int64())})
    return make_segment(keys, pa.array([v[0] for v in entries.values()], pa.string()),
                        pa.array([v[1] for v in entries.values()], pa.int64()))


def test_a_single_key_is_bucketed_as_icebergs_bucket_transform() -> None:
    values = pa.array([1, 2, 3, 1 << 40, -5], pa.int64())
    assert key_buckets([values], 16).to_pylist() == BucketTransform(16).apply_arrow(values).to_pylist()


def test_a_compound_key_combines_its_columns() -> None:
    a = pa.array([1, 1, 2], pa.int64())
    b = pa.array(["x", "y", "x"])
    buckets = key_buckets([a, b], 1000).to_pylist()
    assert all(0 <= v < 1000 for v in buckets)
    assert len(set(buckets)) == 3
    assert key_buckets([a, b], 1000).to_pylist() == buckets  # deterministic


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 99)), max_size=20),
                min_size=1, max_size=5),
       st.lists(st.integers(-2, 32), max_size=15, unique=True))
def test_lookup_and_resolve_agree_with_newest_wins(history, wanted) -> None:  # type: ignore[no-untyped-def]
    """Each dict is one segment (key -> pos, None: tombstone); the newest segment holding a key wins."""
    def path(i: int, k: int) -> str:  # a few files per segment, some shared with other segments
        return f"f{i % 3}-{k % 3}"

    segments = [segment({k: (None if p is None else path(i, k), p or 0) for k, p in s.items()})
                for i, s in enumerate(history)]
    truth: dict[int, tuple[str, int]] = {}
    for i, s in enumerate(history):
        for k, p in s.items():
            if p is None:
                truth.pop(k, None)
            else:
                truth[k] = (path(i, k), p)

    files, positions = lookup(pa.table({"k1": pa.array(wanted, pa.int64())}), segments)
    found = [(f, p) if f is not None else None for f, p in zip(files.to_pylist(), positions.to_pylist())]
    assert found == [truth.get(k) for k in wanted]

    resolved = resolve(segments)
    assert resolved.column("k1").to_pylist() == sorted(truth)
    assert list(zip(resolved.column("file").to_pylist(), resolved.column("pos").to_pylist())) == [
        truth[k] for k in sorted(truth)]


def test_lookup_of_string_and_compound_keys_uses_a_join() -> None:
    keys = pa.table({"k1": pa.array(["a", "b", "c"]), "k2": pa.array([1, 2, 3], pa.int32())})
    base = make_segment(keys, pa.array(["f", "f", "f"]), pa.array([0, 1, 2], pa.int64()))
    delta = make_segment(keys.slice(1, 1), pa.array([None], pa.string()), pa.array([0], pa.int64()))
    wanted = pa.table({"k1": pa.array(["c", "b", "z"]), "k2": pa.array([3, 2, 1], pa.int32())})
    files, positions = lookup(wanted, [base, delta])
    assert files.to_pylist() == ["f", None, None]
    assert positions.to_pylist() == [2, None, None]


def test_remaps_move_entries_that_point_at_rewritten_files() -> None:
    rewrite = PositionMap(("new",), {"old": FilePositions(pa.array([0, 2, 3], pa.int64()), (0,), (0,), (10,))})
    moved = remap_segment(segment({1: ("old", 2), 2: ("other", 5), 3: ("old", 1)}), [rewrite])
    # key 3's row (old, 1) was not written out: it is nowhere, so its entry goes
    assert moved.to_pydict() == {"k1": [1, 2], "file": ["new", "other"], "pos": [11, 5]}


def ref(path: str, bucket: int = 0, base: bool = False, rows: int = 1, folded: int = 0) -> SegmentRef:
    return SegmentRef(bucket, path, rows, 10, base, folded)


def test_a_change_appends_deltas_and_replaces_what_a_merge_consumed() -> None:
    start = empty_manifest((1,), 2)
    first, _ = apply_change(start, IndexChange((ref("b0", base=True), ref("d1", 1))), 100)
    second, dropped = apply_change(first, IndexChange((ref("d0"),)), 101)
    assert [s.path for s in second.bucket(0)] == ["b0", "d0"]
    assert second.snapshot_id == 101 and dropped == []

    merged, dropped = apply_change(second, IndexChange((ref("b0-2", base=True),), replaced=("b0", "d0")), 102)
    assert [s.path for s in merged.bucket(0)] == ["b0-2"]
    assert sorted(dropped) == ["b0", "d0"]


def test_a_merge_that_missed_a_newer_delta_cannot_be_rebased() -> None:
    start, _ = apply_change(empty_manifest((1,), 1), IndexChange((ref("b0", base=True),)), 1)
    raced, _ = apply_change(start, IndexChange((ref("d-new"),)), 2)
    with pytest.raises(KeyIndexConflict):
        apply_change(raced, IndexChange((ref("b0-2", base=True),), replaced=("b0",)), 3)
    gone, _ = apply_change(raced, IndexChange((ref("b0-3", base=True),), replaced=("b0", "d-new")), 3)
    with pytest.raises(KeyIndexConflict):
        apply_change(gone, IndexChange((ref("b0-4", base=True),), replaced=("b0",)), 4)


def test_remaps_are_numbered_in_order_and_dropped_once_every_base_folded_them() -> None:
    start, _ = apply_change(empty_manifest((1,), 2), IndexChange((ref("a", 0, True), ref("b", 1, True))), 1)
    remapped, _ = apply_change(start, IndexChange(remaps=(("m1", ("x",)), ("m2", ("y",)))), 2)
    assert [(r.remap_id, r.path) for r in remapped.remaps] == [(1, "m1"), (2, "m2")]
    assert [r.remap_id for r in remapped.pending_remaps(0)] == [1, 2]

    one, dropped = apply_change(remapped, IndexChange((ref("a2", 0, True, folded=2),), replaced=("a",)), 3)
    assert [r.remap_id for r in one.pending_remaps(0)] == [] and [r.remap_id for r in one.pending_remaps(1)] == [1, 2]
    assert dropped == ["a"]
    both, dropped = apply_change(one, IndexChange((ref("b2", 1, True, folded=1),), replaced=("b",)), 4)
    assert [r.remap_id for r in both.remaps] == [2]
    assert dropped == ["b", "m1"]


def test_the_manifest_round_trips_through_json_and_refuses_other_files(tmp_path: Path) -> None:
    manifest, _ = apply_change(empty_manifest((1, 2), 4), IndexChange((ref("a", 3, True),), remaps=(("m", ("x",)),)), 9)
    path = str(tmp_path / "m.json")
    write_manifest(FileIO.for_location(path), path, manifest)
    assert read_manifest(FileIO.for_location(path), path) == manifest
    assert manifest_from_json(json.loads(encode_manifest(manifest)), "x") == manifest
    with pytest.raises(ValidationError, match="not a Floe key index manifest"):
        manifest_from_json({"format": "other"}, "some.json")


def test_bucket_files_hold_a_batch_change_and_merge_when_deltas_grow(tmp_path: Path) -> None:
    io = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "index")
    manifest = empty_manifest((1,), 1, None)
    rng = random.Random(7)
    truth: dict[int, tuple[str, int]] = {}
    for batch in range(12):
        keys = rng.sample(range(3000), 500)
        files, positions = [], []
        for i, k in enumerate(keys):
            if rng.random() < 0.1:
                truth.pop(k, None)
                files.append(None)
                positions.append(0)
            else:
                truth[k] = (f"data-{batch}", i)
                files.append(f"data-{batch}")
                positions.append(i)
        entries = pa.table({"k1": pa.array(keys, pa.int64()), "file": pa.array(files, pa.string()),
                            "pos": pa.array(positions, pa.int64())})
        change = write_change(io, manifest, location, 0, entries, max_deltas=3)
        manifest, _ = apply_change(manifest, IndexChange((change.segment,), change.replaced), batch)
        assert len(manifest.bucket(0)) <= 4

    wanted = list(range(3000))
    files, positions = find_keys(io, manifest, 0, pa.table({"k1": pa.array(wanted, pa.int64())}))
    found = {k: (f, p) for k, f, p in zip(wanted, files.to_pylist(), positions.to_pylist()) if f is not None}
    assert found == truth
    assert any(s.base for s in manifest.bucket(0))


def test_retired_files_are_deleted_only_after_the_grace_period() -> None:
    manifest = empty_manifest((1,), 1)
    manifest, expired = retire(manifest, ["a", "b"], now_ms=1_000, grace_ms=100)
    assert expired == [] and [p for p, _ in manifest.retired] == ["a", "b"]
    manifest, expired = retire(manifest, ["c"], now_ms=1_050, grace_ms=100)
    assert expired == []
    manifest, expired = retire(manifest, [], now_ms=1_100, grace_ms=100)
    assert expired == ["a", "b"] and manifest.retired == (("c", 1_050),)
    assert manifest_from_json(json.loads(encode_manifest(manifest)), "x") == manifest


def test_a_uuid_key_is_indexed_as_its_16_bytes(tmp_path: Path) -> None:
    """Arrow sorts, groups and joins no extension type: a uuid key is kept, bucketed and found as its bytes,
    from a table batch (the uuid extension type) as from a Parquet file (fixed_size_binary(16))."""
    import uuid

    from commit.key_index.segments import keys_of
    from table.arrow_schema import type_to_arrow
    from table.schema import Schema
    from table.types import NestedField, UUIDType

    schema = Schema(NestedField(1, "id", UUIDType(), required=True), identifier_field_ids=[1])
    values = [uuid.UUID(int=random.Random(3).getrandbits(128) + i).bytes for i in range(200)]
    as_extension = pa.ExtensionArray.from_storage(type_to_arrow(UUIDType()), pa.array(values, pa.binary(16)))
    keys = keys_of(pa.table({"id": as_extension}), schema, (1,))
    assert keys.schema.field("k1").type == pa.binary(16)
    assert keys.equals(keys_of(pa.table({"id": pa.array(values, pa.binary(16))}), schema, (1,)))
    assert key_buckets(keys.columns, 8).to_pylist() == BucketTransform(8).apply_arrow(as_extension).to_pylist()

    io, location = FileIO.for_location(str(tmp_path)), str(tmp_path / "index")
    entries = keys.append_column("file", pa.array(["data-0"] * 200)).append_column("pos", pa.array(range(200)))
    change = write_change(io, empty_manifest((1,), 1, None), location, 0, entries)
    manifest, _ = apply_change(empty_manifest((1,), 1, None), IndexChange((change.segment,), ()), 1)
    files, positions = find_keys(io, manifest, 0, keys.take(pa.array([5, 150])))
    assert files.to_pylist() == ["data-0", "data-0"] and positions.to_pylist() == [5, 150]
