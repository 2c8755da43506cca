"""Remove delete files that apply to no live data file (Iceberg Java's ``RemoveDanglingDeletes``).

A delete file stays in the table until something removes it, long after the
rows it deleted were rewritten away; every reader still plans it. Which
deletes are dangling is decided from the manifests alone, by the same rules
scan planning uses to apply them (``table/scan.py``):

* an equality delete applies to data files with a *smaller* data sequence
  number, in its spec and partition (any partition when its spec is
  unpartitioned): it is dangling when its sequence number is <= the smallest
  data sequence number there (or there is no data there at all);
* a position delete applies to data files with a smaller or *equal* data
  sequence number in its spec and partition, and only to the files it names:
  it is dangling when its sequence number is < the smallest data sequence
  number there, or when none of the files it names is live. The names come
  from the ``file_path`` bounds when they pin one file, else from the file.

New data files always get a higher sequence number than every existing
delete, so a concurrent commit cannot make a dangling delete apply again
(only a rewrite that keeps old sequence numbers could, and the compactor's
lease keeps it from running at the same time).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from commit.catalog.base import Catalog
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.metadata_committer import BeforeCommit
from commit.operations.delete_files import DeleteFiles
from commit.snapshot_producer import SnapshotProducer
from table.deletes.positions import referenced_data_files
from table.errors import MalformedFileError
from table.io import FileIO
from table.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntryStatus,
    read_manifest_entries,
    read_manifest_list,
)
from table.metadata import Snapshot, TableMetadata
from table.partitioning import partition_key

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------
# Which deletes dangle (pure, given the live entries)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveFile:
    """A live file of a snapshot with its data sequence number."""

    sequence_number: int
    data_file: DataFile


@dataclass(frozen=True)
class DataSequenceBounds:
    """The smallest live data sequence number per (spec, partition), and overall."""

    by_partition: Mapping[tuple[int, tuple[Any, ...]], int]
    overall: int | None
    live_paths: Mapping[str, int]  # live data file -> its data sequence number

    @classmethod
    def of(cls, data: Iterable[LiveFile]) -> DataSequenceBounds:
        by_partition: dict[tuple[int, tuple[Any, ...]], int] = {}
        paths = {}
        for live in data:
            key = partition_key(live.data_file.spec_id, live.data_file.partition)
            by_partition[key] = min(by_partition.get(key, live.sequence_number), live.sequence_number)
            paths[live.data_file.file_path] = live.sequence_number
        overall = min(by_partition.values()) if by_partition else None
        return cls(by_partition, overall, paths)

    def smallest_for(self, delete_file: DataFile, is_global: bool) -> int | None:
        """The smallest data sequence number the delete could apply to; None when there is no data."""
        return (
            self.overall
            if is_global
            else self.by_partition.get(partition_key(delete_file.spec_id, delete_file.partition))
        )


def equality_delete_dangles(delete: LiveFile, bounds: DataSequenceBounds, is_global: bool) -> bool:
    smallest = bounds.smallest_for(delete.data_file, is_global)
    return smallest is None or delete.sequence_number <= smallest


def position_delete_dangles_by_sequence(delete: LiveFile, bounds: DataSequenceBounds) -> bool:
    """Dangling without reading the file: no data it could apply to in its partition."""
    smallest = bounds.smallest_for(delete.data_file, is_global=False)
    return smallest is None or delete.sequence_number < smallest


def position_delete_dangles(delete: LiveFile, referenced: Iterable[str], bounds: DataSequenceBounds) -> bool:
    """No file it names is live with a data sequence number it applies to (<= its own)."""
    live = bounds.live_paths
    return not any(p in live and live[p] <= delete.sequence_number for p in referenced)


# --------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class DanglingDeletesResult:
    removed: tuple[str, ...]
    snapshot_id: int | None


def find_dangling_deletes(io: FileIO, metadata: TableMetadata, snapshot: Snapshot) -> list[DataFile]:
    """The live delete files of ``snapshot`` that apply to no live data file."""
    data, deletes = _live_files(io, snapshot)
    bounds = DataSequenceBounds.of(data)
    specs = {s.spec_id: s for s in metadata.partition_specs}
    dangling = []
    for delete in deletes:
        f = delete.data_file
        if f.content == DataFileContent.EQUALITY_DELETES:
            if equality_delete_dangles(delete, bounds, specs[f.spec_id].is_unpartitioned):
                dangling.append(f)
        elif position_delete_dangles_by_sequence(delete, bounds) or position_delete_dangles(
            delete, referenced_data_files(io, f), bounds
        ):
            dangling.append(f)
    return dangling


def _live_files(io: FileIO, snapshot: Snapshot) -> tuple[list[LiveFile], list[LiveFile]]:
    data: list[LiveFile] = []
    deletes: list[LiveFile] = []
    for manifest in read_manifest_list(io, snapshot.manifest_list):
        target = data if manifest.content == ManifestContent.DATA else deletes
        for entry in read_manifest_entries(io, manifest):
            if entry.status == ManifestEntryStatus.DELETED:
                continue
            if entry.sequence_number is None:
                raise MalformedFileError(manifest.manifest_path, "sequence_number", "live entry without one")
            target.append(LiveFile(entry.sequence_number, entry.data_file))
    return data, deletes


def remove_dangling_deletes(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    *,
    before_commit: BeforeCommit | None = None,
    snapshot_properties: Mapping[str, str] | None = None,
) -> DanglingDeletesResult:
    """Find the dangling delete files of the current snapshot and remove them in one ``delete`` commit.

    Removing files that are live is all the commit needs to validate:
    a dangling delete cannot start to apply again (module docstring).
    """
    ident = to_table_identifier(identifier)
    loaded = catalog.load_table(ident)
    snapshot = loaded.metadata.current_snapshot()
    if snapshot is None:
        return DanglingDeletesResult((), None)
    io = loaded.io
    dangling = find_dangling_deletes(io, loaded.metadata, snapshot)
    if not dangling:
        return DanglingDeletesResult((), None)
    producer = SnapshotProducer(
        catalog,
        ident,
        DeleteFiles(delete_files=dangling),
        io=io,
        before_commit=before_commit,
        snapshot_properties=snapshot_properties,
    )
    committed = producer.commit()
    paths = tuple(sorted(f.file_path for f in dangling))
    log.info(
        "removed dangling delete files",
        extra={"table": str(ident), "delete_files": len(paths), "snapshot_id": committed.snapshot_id},
    )
    return DanglingDeletesResult(paths, committed.snapshot_id)
