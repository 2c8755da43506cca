"""What was committed since a starting snapshot, and whether it conflicts with a change.

An operation that read the table at snapshot S and commits later must know
what other writers did in between: the snapshots after S on the branch. Each
of them lists the manifests it wrote (``added_snapshot_id``), and in those,
the entries it ADDED or DELETED. Only those manifests are read, never the
whole table, as in Iceberg Java's ``MergingSnapshotProducer`` validations.

Which operations count follows Java: new data comes from ``append`` and
``overwrite``; new deletes from ``overwrite`` and ``delete`` (a ``replace``
re-expresses deletes that were already there); removed data files from
``overwrite``, ``replace`` and ``delete``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from commit.operations.errors import InvalidStartingSnapshot
from table.deletes.index import DeleteFileIndex
from table.expressions import BooleanExpression, bind
from table.io import FileIO
from table.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    read_manifest_entries,
    read_manifest_list,
)
from table.metadata import Snapshot, TableMetadata
from table.scan import FilePruner

NEW_DATA_OPERATIONS = frozenset({"append", "overwrite"})
NEW_DELETE_OPERATIONS = frozenset({"overwrite", "delete"})
REMOVED_DATA_OPERATIONS = frozenset({"overwrite", "replace", "delete"})


@dataclass(frozen=True)
class Change:
    """One file added or deleted by one snapshot."""

    snapshot: Snapshot
    entry: ManifestEntry

    @property
    def path(self) -> str:
        """The file's :attr:`~table.manifest.DataFile.location_key` (a DV's includes its offset)."""
        return self.entry.data_file.location_key


def snapshots_since(base: TableMetadata, parent: Snapshot | None, starting_snapshot_id: int | None) -> list[Snapshot]:
    """The branch's snapshots after ``starting_snapshot_id``, newest first (all of them for None).

    The starting snapshot must be the head or one of its ancestors: otherwise
    the history in between is unknown (expired, or another branch).
    """
    if parent is None:
        if starting_snapshot_id is None:
            return []
        raise InvalidStartingSnapshot(starting_snapshot_id, "the branch has no snapshot")
    history: list[Snapshot] = []
    for snapshot in base.ancestors_of(parent.snapshot_id):
        if snapshot.snapshot_id == starting_snapshot_id:
            return history
        history.append(snapshot)
    if starting_snapshot_id is None:
        return history
    raise InvalidStartingSnapshot(
        starting_snapshot_id,
        f"it is not an ancestor of the branch head {parent.snapshot_id} (expired, or on another branch)",
    )


def changes(
    io: FileIO,
    history: Iterable[Snapshot],
    content: ManifestContent,
    status: ManifestEntryStatus,
    operations: frozenset[str],
) -> Iterator[Change]:
    """Files of ``content`` that snapshots of ``operations`` in ``history`` added (or deleted)."""
    counted = "added_files_count" if status == ManifestEntryStatus.ADDED else "deleted_files_count"
    for snapshot in history:
        if snapshot.operation not in operations:
            continue
        for manifest in read_manifest_list(io, snapshot.manifest_list):
            if manifest.content != content or manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            if getattr(manifest, counted) == 0:
                continue
            for entry in read_manifest_entries(io, manifest):
                if entry.status == status and entry.snapshot_id == snapshot.snapshot_id:
                    yield Change(snapshot, entry)


def matching(changed: Iterable[Change], base: TableMetadata, row_filter: BooleanExpression) -> dict[str, int]:
    """Path -> snapshot id of the changed files that may hold rows matching ``row_filter``."""
    schema = base.schema()
    specs = {s.spec_id: s for s in base.partition_specs}
    pruner = FilePruner(bind(row_filter, schema), schema, specs)
    return {c.path: c.snapshot.snapshot_id for c in changed if pruner.file_might_match(c.entry.data_file)}


def removed_data_files(io: FileIO, history: Sequence[Snapshot], paths: Iterable[str]) -> dict[str, int]:
    """Path -> snapshot id for each of ``paths`` that a snapshot in ``history`` removed."""
    wanted = set(paths)
    if not wanted:
        return {}
    removed = changes(io, history, ManifestContent.DATA, ManifestEntryStatus.DELETED, REMOVED_DATA_OPERATIONS)
    return {c.path: c.snapshot.snapshot_id for c in removed if c.path in wanted}


def new_deletes_for(
    io: FileIO, base: TableMetadata, history: Sequence[Snapshot], data_entries: Iterable[ManifestEntry]
) -> dict[str, list[Change]]:
    """Data file path -> the additions of delete files in ``history`` that apply to it.

    Whether a delete applies is decided as scan planning decides it
    (partition, sequence numbers, ``file_path`` bounds, equality key ranges).
    """
    entries = list(data_entries)
    if not entries:
        return {}
    added = {
        c.path: c
        for c in changes(io, history, ManifestContent.DELETES, ManifestEntryStatus.ADDED, NEW_DELETE_OPERATIONS)
    }
    if not added:
        return {}
    deletes = [(_data_sequence_number(c.entry), c.entry.data_file) for c in added.values()]
    index = DeleteFileIndex(deletes, {s.spec_id: s for s in base.partition_specs}, base.schema())
    result = {}
    for entry in entries:
        applying = index.for_data_file(_data_sequence_number(entry), entry.data_file)
        if applying:
            result[entry.data_file.file_path] = [added[d.location_key] for d in applying]
    return result


def _data_sequence_number(entry: ManifestEntry) -> int:
    if entry.sequence_number is None:
        raise ValueError(f"{entry.data_file.file_path}: committed manifest entry without a data sequence number")
    return entry.sequence_number
