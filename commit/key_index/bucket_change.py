"""One bucket of the key index: finding keys in it and writing a batch's change to it.

The composition of :mod:`.segments` (pure) and :mod:`.store` (files): what
ingest's lookup and index tasks call, once per bucket they hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from commit.key_index.manifest import IndexManifest, SegmentRef
from commit.key_index.segments import lookup, make_segment, remap, remap_segment, resolve
from commit.key_index.store import read_remap, read_segment, segment_path, write_segment
from table.io import FileIO

DEFAULT_MAX_DELTAS = 8


def find_keys(io: FileIO, manifest: IndexManifest, bucket: int, keys: pa.Table) -> tuple[pa.Array, pa.Array]:
    """``file`` and ``pos`` of each key's live row (null ``file``: no live row), rewrites followed."""
    segments = [read_segment(io, ref) for ref in manifest.bucket(bucket)]
    files, positions = lookup(keys, segments)
    pending = manifest.pending_remaps(bucket)
    if not pending or files.null_count == len(files):
        return files, positions
    rewritten = set().union(*(r.old_files for r in pending))
    moving = pc.is_in(files, value_set=pa.array(sorted(rewritten), pa.string())).fill_null(False)
    if not pc.any(moving).as_py():
        return files, positions
    maps = [read_remap(io, r.path) for r in pending]
    return remap(files, positions, maps)


@dataclass(frozen=True)
class BucketChange:
    """The segment a batch wrote to one bucket, and the segments it replaces (a merge)."""

    segment: SegmentRef
    replaced: tuple[str, ...] = ()


def write_change(
    io: FileIO,
    manifest: IndexManifest,
    location: str,
    bucket: int,
    entries: pa.Table,
    max_deltas: int = DEFAULT_MAX_DELTAS,
) -> BucketChange:
    """Write ``entries`` (keys, file, pos; null file: deleted) to ``bucket``.

    A delta, unless the bucket's deltas would number more than ``max_deltas``
    or hold more entries than a quarter of its base: then a new base, with
    every pending remap folded in, replaces the bucket's segments.
    """
    delta = make_segment(entries.select(entries.column_names[:-2]), entries.column(-2), entries.column(-1))
    refs = manifest.bucket(bucket)
    deltas = [r for r in refs if not r.base]
    base_rows = sum(r.rows for r in refs if r.base)
    if len(deltas) < max_deltas and sum(r.rows for r in deltas) + delta.num_rows <= max(base_rows // 4, 1024):
        ref = write_segment(io, segment_path(location, bucket), bucket, delta, base=False)
        return BucketChange(ref)
    merged = resolve([*(read_segment(io, r) for r in refs), delta])
    pending = manifest.pending_remaps(bucket)
    merged = remap_segment(merged, [read_remap(io, r.path) for r in pending])
    folded = max([r.remap_id for r in pending], default=_folded(refs))
    ref = write_segment(io, segment_path(location, bucket), bucket, merged, base=True, folded_remaps=folded)
    return BucketChange(ref, tuple(r.path for r in refs))


def build_base(io: FileIO, location: str, bucket: int, entries: pa.Table, folded_remaps: int = 0) -> SegmentRef:
    """A base holding ``entries`` (a rebuild): keys with the position of their live row."""
    segment = make_segment(entries.select(entries.column_names[:-2]), entries.column(-2), entries.column(-1))
    return write_segment(io, segment_path(location, bucket), bucket, segment, base=True, folded_remaps=folded_remaps)


def _folded(refs: list[SegmentRef]) -> int:
    return next((r.folded_remaps for r in refs if r.base), 0)
