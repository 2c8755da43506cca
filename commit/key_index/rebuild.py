"""Building the key index from the table alone, and checking an index against the table.

Both read the table once: the key columns of every live row with its
position (Floe's reader, deletes applied). That is the per-batch cost the
index exists to avoid (docs/key-index-design.md, design A), paid here
only to create an index, to replace a stale one, or to verify one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from commit.key_index.bucket_change import build_base, find_keys
from commit.key_index.key_hash import key_buckets
from commit.key_index.manifest import IndexChange, IndexManifest
from commit.key_index.segments import FILE, POS, keys_of, resolve
from commit.key_index.store import read_segment
from table.deletes.positions import PositionCache
from table.io import FileIO
from table.metadata import MAIN_BRANCH, TableMetadata
from table.reader import read_tasks
from table.scan import TableScan
from table.schema import ROW_POSITION
from table.tasks import FileScanTask


def live_rows(io: FileIO, metadata: TableMetadata, key_ids: Sequence[int]) -> Iterator[pa.Table]:
    """Per data file: the keys of its live rows, named for a segment, with ``file`` and ``pos``."""
    if metadata.snapshot_for_ref(MAIN_BRANCH) is None:
        return
    schema = metadata.schema()
    names = [schema.find_column_name(i).split(".")[0] for i in key_ids]
    scan = TableScan(io, metadata, selected_fields=sorted(set(names)), ref=MAIN_BRANCH)
    projected = scan.projected_schema()
    deletes = PositionCache()  # a streaming writer's delete file names many data files: read it once
    for task in scan.plan_files():
        for batch in read_tasks(
            io, [task], projected, table_schema=scan.schema(), with_positions=True, position_cache=deletes
        ):
            keys = keys_of(batch, projected, key_ids)
            n = batch.num_rows
            one_file = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), [task.data_file.file_path])
            yield keys.append_column(FILE, one_file).append_column(
                POS, batch.column(ROW_POSITION.name).cast(pa.int64())
            )


def live_files(io: FileIO, metadata: TableMetadata) -> list[FileScanTask]:
    """The tasks of ``main``'s live data files (their paths, specs and partitions)."""
    if metadata.snapshot_for_ref(MAIN_BRANCH) is None:
        return []
    return list(TableScan(io, metadata, selected_fields=(), ref=MAIN_BRANCH).plan_files())


@dataclass(frozen=True)
class BuiltIndex:
    """A new index of the table at ``snapshot_id``: its manifest and the change that creates it."""

    manifest: IndexManifest
    change: IndexChange
    snapshot_id: int | None


def build_index(io: FileIO, metadata: TableMetadata, key_ids: Sequence[int], buckets: int, location: str) -> BuiltIndex:
    """Write a base per bucket from the table's live rows (the index is not committed here)."""
    head = metadata.snapshot_for_ref(MAIN_BRANCH)
    head_id = None if head is None else head.snapshot_id
    parts: dict[int, list[pa.Table]] = {}
    for rows in live_rows(io, metadata, key_ids):
        bucket_of = key_buckets(rows.columns[: len(key_ids)], buckets)
        for bucket in pc.unique(bucket_of).to_pylist():
            parts.setdefault(bucket, []).append(rows.filter(pc.equal(bucket_of, bucket)))
    refs = tuple(
        build_base(io, location, b, pa.concat_tables(tables).unify_dictionaries())
        for b, tables in sorted(parts.items())
    )
    change = IndexChange(refs)
    manifest = IndexManifest(tuple(key_ids), buckets, head_id, refs)
    return BuiltIndex(manifest, change, head_id)


def index_problems(io: FileIO, metadata: TableMetadata, manifest: IndexManifest, limit: int = 20) -> list[str]:
    """Where the index and the table disagree (empty when they agree), at most ``limit`` lines.

    Every live row must be found at its own position, and the index must
    hold no more live keys than the table has rows.
    """
    problems: list[str] = []
    checked = 0
    for rows in live_rows(io, metadata, manifest.key_ids):
        checked += rows.num_rows
        keys = rows.select(rows.column_names[: len(manifest.key_ids)])
        bucket_of = key_buckets(keys.columns, manifest.buckets)
        for bucket in pc.unique(bucket_of).to_pylist():
            mine = pc.equal(bucket_of, bucket)
            files, positions = find_keys(io, manifest, bucket, keys.filter(mine))
            expected = rows.filter(mine)
            wrong = pc.invert(
                pc.and_(
                    pc.equal(files, expected.column(FILE).cast(pa.string())).fill_null(False),
                    pc.equal(positions, expected.column(POS)).fill_null(False),
                )
            )
            names = [metadata.schema().find_column_name(i) for i in manifest.key_ids]
            found = pa.table({"found": files, "found_pos": positions}).filter(wrong).to_pylist()
            for row, at in zip(expected.filter(wrong).slice(0, limit - len(problems)).to_pylist(), found):
                problems.append(_misplaced(row, at, names))
            if len(problems) >= limit:
                return problems
    return problems + _surplus(io, manifest, checked)


def _misplaced(row: dict, at: dict, names: list[str]) -> str:
    key = ", ".join(f"{name}={value!r}" for name, value in zip(names, list(row.values())[: len(names)]))
    said = "no entry" if at["found"] is None else f"{at['found']} at {at['found_pos']}"
    return f"key {key}: its live row is {row[FILE]} at {row[POS]}, the index says {said}"


def _surplus(io: FileIO, manifest: IndexManifest, live: int) -> list[str]:
    indexed = sum(resolve([read_segment(io, r) for r in manifest.bucket(b)]).num_rows for b in range(manifest.buckets))
    if indexed > live:
        return [f"the index holds {indexed} live keys, the table {live} live rows: {indexed - live} stale entries"]
    return []
