"""Reading and writing the key index's files, through the table's file IO.

Files live beside the table, at ``<table location>.floe-key-index/``
(outside the table location, so that Iceberg's orphan-file removal, which
lists the table location, never takes them):

* ``segments/<bucket>-<uuid>.parquet``: segments (:mod:`.segments`);
* ``remaps/<uuid>.parquet``: the compactor's position maps;
* ``manifests/<snapshot id>-<uuid>.json``: versions of the index.

Every file is immutable, so decoded segments and remaps are kept in a
per-process cache keyed by path (bounded by ``FLOE_KEY_INDEX_CACHE_BYTES``,
default 1 GiB): a Spark worker that looked a bucket up once reads only the
new deltas of the next batch.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections import OrderedDict
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from commit.key_index.manifest import KEY_INDEX_PROPERTY, IndexManifest, SegmentRef, encode_manifest, manifest_from_json
from commit.key_index.segments import FILE, POS
from commit.position_map import PositionMap, read_position_map
from table.errors import MalformedFileError
from table.io import FileIO
from table.locations import key_index_beside
from table.metadata import TableMetadata

DEFAULT_CACHE_BYTES = 1 << 30


def index_location(metadata: TableMetadata) -> str:
    """The directory of the table's index files: where its manifest is, else beside the table."""
    current = metadata.properties.get(KEY_INDEX_PROPERTY)
    if current:
        return current.rsplit("/", 2)[0]
    return key_index_beside(metadata.location)


def segment_path(location: str, bucket: int) -> str:
    return f"{location}/segments/{bucket:05d}-{uuid.uuid4()}.parquet"


def remap_path(location: str) -> str:
    return f"{location}/remaps/{uuid.uuid4()}.parquet"


def manifest_path(location: str, snapshot_id: int) -> str:
    return f"{location}/manifests/{snapshot_id}-{uuid.uuid4()}.json"


def current_manifest(io: FileIO, metadata: TableMetadata) -> IndexManifest | None:
    """The index the table's metadata names, or None when it names none."""
    path = metadata.properties.get(KEY_INDEX_PROPERTY)
    return None if not path else read_manifest(io, path)


def read_manifest(io: FileIO, path: str) -> IndexManifest:
    try:
        obj = json.loads(io.read_bytes(path))
    except (OSError, ValueError) as e:
        raise MalformedFileError(path, None, f"cannot read key index manifest: {e}") from e
    return manifest_from_json(obj, path)


def write_manifest(io: FileIO, path: str, manifest: IndexManifest) -> None:
    io.write_bytes(path, encode_manifest(manifest))


def write_segment(
    io: FileIO, path: str, bucket: int, segment: pa.Table, *, base: bool, folded_remaps: int = 0
) -> SegmentRef:
    """Write ``segment`` (sorted by key) to ``path``; its reference for the manifest."""
    integral = [f.name for f in segment.schema if pa.types.is_integer(f.type)]
    with io.open_output(path) as sink:
        pq.write_table(
            segment,
            sink,
            compression="zstd",
            use_dictionary=[FILE],
            column_encoding=dict.fromkeys(integral, "DELTA_BINARY_PACKED"),
            row_group_size=1 << 20,
        )
    _CACHE.put(path, segment.combine_chunks(), segment.nbytes)
    return SegmentRef(bucket, path, segment.num_rows, io.size(path), base, folded_remaps)


def read_segment(io: FileIO, ref: SegmentRef) -> pa.Table:
    """The segment's rows, decoded once per process."""
    cached = _CACHE.get(ref.path)
    if cached is not None:
        return cached
    try:
        with io.open_input(ref.path) as source:
            table = pq.read_table(source, read_dictionary=[FILE]).combine_chunks()
    except (pa.ArrowException, OSError) as e:
        raise MalformedFileError(ref.path, None, f"cannot read key index segment: {e}") from e
    if table.schema.names[-2:] != [FILE, POS]:
        raise MalformedFileError(ref.path, None, "not a key index segment")
    _CACHE.put(ref.path, table, table.nbytes)
    return table


def read_remap(io: FileIO, path: str) -> PositionMap:
    cached = _CACHE.get(path)
    if cached is None:
        cached = read_position_map(io, path)
        _CACHE.put(path, cached, io.size(path) * 4)
    return cached


# ---------------------------------------------------------------------------


class _Cache:
    """A least-recently-used map of immutable decoded files, bounded by (estimated) bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, path: str) -> Any:
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                return None
            self._entries.move_to_end(path)
            return entry[0]

    def put(self, path: str, value: Any, size: int) -> None:
        with self._lock:
            if size > self.max_bytes or path in self._entries:
                return
            self._entries[path] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped


def _cache_bytes() -> int:
    raw = os.environ.get("FLOE_KEY_INDEX_CACHE_BYTES", "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_CACHE_BYTES


_CACHE = _Cache(_cache_bytes())
