"""Delete files under the table's location that no table state references (Java's ``DeleteOrphanFiles``).

Failed writes, crashed commits and abandoned rewrites leave files behind that
nothing points at. A file is an orphan when it is under the table's location
and is none of: the current metadata file, a file of the metadata
log, a statistics file, a manifest list, manifest, data or delete file of any
retained snapshot (entries of every status: a file named anywhere is kept).
Only files older than the safety window go, so the files of commits still in
flight (written, not yet referenced) are never touched.

This is the only place that lists storage, and it never decides what the
table contains: a listing that misses a file leaves an orphan for next time.
A ``write.data.path`` or ``write.metadata.path`` outside the table location
is not listed: other tables may write there too, and their files would look
like this table's orphans.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from commit.catalog.base import Catalog
from commit.identifiers import TableIdentifierLike, to_table_identifier
from table.errors import TableError
from table.io import FileEntry, FileIO, to_fs_path
from table.locations import locations_outside_table
from table.manifest import ManifestFile, read_manifest_entries, read_manifest_list
from table.metadata import TableMetadata, now_ms

log = logging.getLogger(__name__)

MIN_ORPHAN_AGE_MS = 24 * 60 * 60 * 1000
"""Below a day, a slow commit's files could be taken for orphans (Iceberg warns likewise)."""


@dataclass(frozen=True)
class OrphanResult:
    deleted: tuple[str, ...]
    failed: tuple[str, ...]
    listed: int


def referenced_files(io: FileIO, metadata: TableMetadata, metadata_location: str) -> set[str]:
    """File-system paths of every file the table state references (see the module docstring)."""
    found = {metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    for statistics in (*metadata.statistics, *metadata.partition_statistics):
        if "statistics-path" in statistics:
            found.add(statistics["statistics-path"])
    manifests: dict[str, ManifestFile] = {}
    for snapshot in metadata.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in read_manifest_list(io, snapshot.manifest_list):
            manifests.setdefault(manifest.manifest_path, manifest)
    for path, manifest in manifests.items():
        found.add(path)
        found.update(e.data_file.file_path for e in read_manifest_entries(io, manifest))
    return {to_fs_path(p) for p in found}


def orphan_candidates(listed: Iterable[FileEntry], referenced: set[str], older_than_ms: int) -> Iterator[FileEntry]:
    """Listed files that nothing references and that were last modified before ``older_than_ms``."""
    for entry in listed:
        if entry.mtime_ms is None or entry.mtime_ms >= older_than_ms:
            continue
        if to_fs_path(entry.location) not in referenced:
            yield entry


def remove_orphan_files(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    older_than_ms: int,
    *,
    clock_ms: Callable[[], int] = now_ms,
) -> OrphanResult:
    """Delete the table's orphan files older than ``older_than_ms`` (a duration, at least a day)."""
    if older_than_ms < MIN_ORPHAN_AGE_MS:
        raise ValueError(f"orphan files must be at least a day old to be removed, got {older_than_ms} ms")
    ident = to_table_identifier(identifier)
    loaded = catalog.load_table(ident)
    io = loaded.io
    cutoff = clock_ms() - older_than_ms
    for outside in locations_outside_table(loaded.metadata):
        log.info(
            "orphan files under %s are not removed: it is outside the table location and may be shared",
            outside,
            extra={"table": str(ident)},
        )
    listed = list(io.list_prefix(loaded.metadata.location.rstrip("/")))
    referenced = referenced_files(io, loaded.metadata, loaded.metadata_location)
    orphans = [e.location for e in orphan_candidates(listed, referenced, cutoff)]
    failed = []
    for path in orphans:
        try:
            io.delete(path)
        except TableError as e:  # left for the next run; reported in the result
            log.warning("could not delete orphan file", extra={"table": str(ident), "path": path, "error": str(e)})
            failed.append(path)
    log.info(
        "removed orphan files",
        extra={
            "table": str(ident),
            "listed": len(listed),
            "deleted": len(orphans) - len(failed),
            "failed": len(failed),
        },
    )
    return OrphanResult(tuple(p for p in orphans if p not in failed), tuple(failed), len(listed))
