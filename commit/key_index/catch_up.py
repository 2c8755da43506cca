"""Bringing the key index up to deletes that other writers committed.

An analyst's ``DELETE`` in merge-on-read mode (Spark, Trino) adds delete
files and leaves data files alone: the index still describes the table
(:func:`commit.key_index.manifest.describes`), but the deleted rows' keys
keep entries. Deleting such a row again would be harmless; an index that
says a deleted key is live is not clean, though, and ``floe index check``
would say so. So before a batch, the deletes committed since the index's
snapshot become tombstones: a position delete names a row, whose key is
read from its data file; an equality delete on the key names the key. An
equality delete on other columns cannot be mapped to keys without reading
the table: :class:`CatchUpImpossible`, and the index is rebuilt instead.

Catching up happens inside the commit that moves the index
(:mod:`commit.key_index.operation`), on the index that commit produces, so
a key the commit itself wrote again keeps its new entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from commit.key_index.bucket_change import BucketChange, find_keys, write_change
from commit.key_index.key_hash import key_buckets
from commit.key_index.manifest import IndexManifest
from commit.key_index.segments import FILE, POS, key_column, key_name
from commit.operations.validation import changes, snapshots_since
from table.errors import ValidationError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntryStatus
from table.metadata import Snapshot, TableMetadata
from table.schema import Schema

ANY_OPERATION = frozenset({"append", "overwrite", "replace", "delete"})


class CatchUpImpossible(ValidationError):
    """Deletes since the index's snapshot that cannot be mapped to keys: the index must be rebuilt."""


def foreign_deletes(io: FileIO, metadata: TableMetadata, since: int | None, head: Snapshot | None) -> list[DataFile]:
    """Delete files that snapshots after ``since`` up to ``head`` added (none of them Floe's: every
    Floe commit that changes data moves the index to its own snapshot)."""
    history = snapshots_since(metadata, head, since)
    return [
        c.entry.data_file
        for c in changes(io, history, ManifestContent.DELETES, ManifestEntryStatus.ADDED, ANY_OPERATION)
    ]


def check_catch_up(added: Sequence[DataFile], key_ids: Sequence[int]) -> None:
    """Raise :class:`CatchUpImpossible` when a delete file cannot be mapped to keys."""
    for delete_file in added:
        if delete_file.content == DataFileContent.EQUALITY_DELETES and sorted(delete_file.equality_ids or ()) != sorted(
            key_ids
        ):
            raise CatchUpImpossible(
                f"equality delete file {delete_file.file_path} deletes by field ids {delete_file.equality_ids}, "
                f"not by the key {list(key_ids)}"
            )


def catch_up(
    io: FileIO, metadata: TableMetadata, manifest: IndexManifest, location: str, added: Sequence[DataFile]
) -> list[BucketChange]:
    """Tombstones, per bucket of ``manifest``, for the keys whose rows the delete files ``added`` removed."""
    check_catch_up(added, manifest.key_ids)
    if not added:
        return []
    schema = metadata.schema()
    found = [k for k in (_deleted_rows(io, schema, manifest.key_ids, f) for f in added) if k is not None and k.num_rows]
    if not found:
        return []
    deleted = pa.concat_tables(found)
    names = [key_name(i) for i in manifest.key_ids]
    buckets = key_buckets([deleted.column(n) for n in names], manifest.buckets)
    result = []
    for bucket in pc.unique(buckets).to_pylist():
        mine = _still_indexed(io, manifest, bucket, deleted.filter(pc.equal(buckets, bucket)), names)
        if mine.num_rows:
            entries = mine.append_column(FILE, pa.nulls(mine.num_rows, pa.string())).append_column(
                POS, pa.array([0] * mine.num_rows, pa.int64())
            )
            result.append(write_change(io, manifest, location, bucket, entries))
    return result


def _still_indexed(io: FileIO, manifest: IndexManifest, bucket: int, deleted: pa.Table, names: list[str]) -> pa.Table:
    """The distinct keys whose entry is the deleted row (a rewritten delete file may name rows deleted long ago)."""
    keys = deleted.select(names)
    files, positions = find_keys(io, manifest, bucket, keys)
    by_key = pc.is_null(deleted.column(FILE))  # an equality delete: the key itself
    at_row = pc.and_(pc.equal(files, deleted.column(FILE)), pc.equal(positions, deleted.column(POS)))
    hit = pc.and_(pc.is_valid(files), pc.or_(by_key, at_row.fill_null(False)))
    chosen = keys.filter(hit)
    return chosen.group_by(names).aggregate([])


def _deleted_rows(io: FileIO, schema: Schema, key_ids: Sequence[int], delete_file: DataFile) -> pa.Table | None:
    """Keys a delete file removes, with the row's ``file`` and ``pos`` (null for an equality delete)."""
    if delete_file.content == DataFileContent.EQUALITY_DELETES:
        keys = _read_keys(io, delete_file.file_path, schema, key_ids, None)
        return keys.append_column(FILE, pa.nulls(keys.num_rows, pa.string())).append_column(
            POS, pa.nulls(keys.num_rows, pa.int64())
        )
    with io.open_input(delete_file.file_path) as source:
        targets = pq.read_table(source, columns=["file_path", "pos"])
    found = []
    for path in pc.unique(targets.column("file_path")).to_pylist():
        if not io.exists(path):
            continue  # a rewritten delete file may still name a data file compacted away
        positions = targets.filter(pc.equal(targets.column("file_path"), path)).column("pos")
        keys = _read_keys(io, path, schema, key_ids, positions)
        found.append(
            keys.append_column(FILE, pa.array([path] * keys.num_rows, pa.string())).append_column(
                POS, positions.combine_chunks().cast(pa.int64())
            )
        )
    return pa.concat_tables(found) if found else None


def _read_keys(
    io: FileIO, path: str, schema: Schema, key_ids: Sequence[int], positions: pa.ChunkedArray | None
) -> pa.Table:
    """The key columns of a file (by the key fields' current top-level names), at ``positions`` if given."""
    names = [schema.find_column_name(i) for i in key_ids]
    if any("." in n for n in names):
        raise CatchUpImpossible(f"nested key {names} in {path}: the index is rebuilt instead")
    with io.open_input(path) as source:
        table = pq.read_table(source, columns=names)
    if positions is not None:
        table = table.take(positions.combine_chunks())
    return pa.table({key_name(i): key_column(table.column(n), schema, i) for i, n in zip(key_ids, names)})
