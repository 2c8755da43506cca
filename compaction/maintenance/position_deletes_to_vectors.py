"""Rewrite an upgraded table's v2 position delete files as deletion vectors (spec Appendix E,
"Version 3": existing position delete files stay valid, but a DV must merge them).

After ``floe table upgrade --format-version 3`` a table's old position delete
files still apply. This step folds them into DVs ahead of compaction: every
data file that has position delete files gets one DV holding them and its
existing DV, if any. The commit is a ``replace``: rows do not change. It
removes what the new DVs replace: each DV, each position delete file that
names one data file, and each that names several once every one of them has
a DV in this commit or before it (until then, the spec keeps it, and readers
ignore it for files that have a DV).

A concurrent commit that adds or replaces a DV of one of these data files
makes this one fail (``DuplicateDeletionVectors`` or ``MissingFiles``): run it
again. Nothing here is written until the plan is known, and a failed commit
deletes what it wrote.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from commit.catalog.base import Catalog
from commit.errors import CommitStateUnknown
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.operations.rewrite_files import RewriteFiles
from commit.snapshot_producer import SnapshotProducer
from table.deletes.positions import referenced_data_files
from table.deletes.writers import DeletionVectorWriter
from table.errors import ValidationError
from table.manifest import DataFile
from table.scan import TableScan
from table.tasks import FileScanTask

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VectorRewriteResult:
    """What the rewrite did: DVs written, position delete files removed, the snapshot (None: nothing to do)."""

    vectors: int
    removed_position_deletes: int
    kept_position_deletes: int
    snapshot_id: int | None


def tasks_with_position_files(tasks: list[FileScanTask]) -> list[FileScanTask]:
    """The tasks whose data file still takes deletes from v2 position delete files (pure)."""
    return [t for t in tasks if any(not d.is_deletion_vector for d in t.position_deletes)]


def removable(
    position_files: dict[str, DataFile], named: dict[str, frozenset[str]], with_vectors: set[str]
) -> list[DataFile]:
    """The position delete files every data file of which has a DV now (pure)."""
    return [f for key, f in sorted(position_files.items()) if named[key] <= with_vectors]


def rewrite_position_deletes(catalog: Catalog, identifier: TableIdentifierLike) -> VectorRewriteResult:
    """Fold the table's position delete files into deletion vectors, in one ``replace`` commit."""
    ident = to_table_identifier(identifier)
    loaded = catalog.load_table(ident)
    metadata = loaded.metadata
    if not metadata.tracks_row_lineage:
        raise ValidationError(
            f"table {ident} is format version {metadata.format_version}: deletion vectors need "
            f"version 3 (floe table upgrade {ident} --format-version 3)"
        )
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return VectorRewriteResult(0, 0, 0, None)
    io = loaded.io
    tasks = list(TableScan(io, metadata).plan_files())
    todo = tasks_with_position_files(tasks)
    if not todo:
        return VectorRewriteResult(0, 0, 0, None)
    writer = DeletionVectorWriter(io, f"{metadata.location}/data")
    for task in todo:
        data = task.data_file
        writer.merge_existing(data.file_path, task.position_deletes, data.spec_id, data.partition)
    vectors = writer.close()
    with_vectors = {t.data_file.file_path for t in tasks if any(d.is_deletion_vector for d in t.position_deletes)}
    with_vectors |= {v.referenced_data_file for v in vectors if v.referenced_data_file is not None}
    position_files = {d.location_key: d for t in todo for d in t.position_deletes if not d.is_deletion_vector}
    named = {key: referenced_data_files(io, f) for key, f in position_files.items()}
    gone = {f.location_key: f for f in writer.replaced}
    gone.update((f.location_key, f) for f in removable(position_files, named, with_vectors))
    operation = RewriteFiles(
        [],
        [],
        starting_snapshot_id=snapshot.snapshot_id,
        replaced_delete_files=list(gone.values()),
        added_delete_files=vectors,
    )
    try:
        committed = SnapshotProducer(catalog, ident, operation, io=io).commit()
    except CommitStateUnknown:
        raise  # the DVs may be in the table now: keep them
    except BaseException:
        writer.abort()
        raise
    removed = sum(1 for f in gone.values() if not f.is_deletion_vector)
    result = VectorRewriteResult(len(vectors), removed, len(position_files) - removed, committed.snapshot_id)
    log.info("rewrote position deletes as deletion vectors", extra={"table": str(ident), **vars(result)})
    return result
