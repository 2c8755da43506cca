"""Expire old snapshots, then delete the files only they referenced.

Which snapshots stay follows the spec's "Snapshot Retention Policy" and
Iceberg Java's ``RemoveSnapshots``:

* refs other than ``main`` older than their ``max-ref-age-ms`` are dropped;
* every remaining branch head and tag is kept, and so is every snapshot the
  caller pins (a reader's or a compaction's starting snapshot);
* walking each branch back from its head, ancestors are kept while they are
  among the first ``min-snapshots-to-keep`` or newer than
  ``max-snapshot-age-ms`` (the ref's own settings, else the table's
  ``history.expire.*``, else the caller's);
* snapshots on no branch are kept while they are newer than the age limit;
* everything else expires.

Expiry is a metadata-only commit, retried like any other. Only after it has
landed are files deleted, and only files that no retained snapshot
references: the manifest lists of expired snapshots, the manifests they list
that no retained snapshot lists, and the data and delete files live in those
manifests but live in no retained manifest (Java's "reachable" cleanup). A
crash in between leaves orphans, never a dangling reference.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from commit.catalog.base import Catalog, LoadedTable
from commit.errors import commit_property
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.metadata_committer import BeforeCommit, CommittedMetadata, commit_metadata_change
from table import properties
from table.errors import TableError
from table.io import FileIO
from table.manifest import DataFileContent, ManifestEntryStatus, ManifestFile, read_manifest_entries, read_manifest_list
from table.metadata import MAIN_BRANCH, Snapshot, SnapshotRef, TableMetadata, now_ms

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------
# Which snapshots to keep (pure)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Retention:
    """Table-wide defaults; a ref's own settings override them for its branch."""

    now_ms: int
    expire_older_than_ms: int  # snapshots older than this may expire
    min_snapshots_to_keep: int
    max_ref_age_ms: int

    @classmethod
    def for_table(
        cls,
        metadata: TableMetadata,
        now_ms: int,
        older_than_ms: int | None = None,
        retain_last: int | None = None,
    ) -> Retention:
        props = metadata.properties
        max_age = commit_property(properties.MAX_SNAPSHOT_AGE_MS, props)
        return cls(
            now_ms=now_ms,
            expire_older_than_ms=now_ms - max_age if older_than_ms is None else older_than_ms,
            min_snapshots_to_keep=max(1, retain_last or commit_property(properties.MIN_SNAPSHOTS_TO_KEEP, props)),
            max_ref_age_ms=commit_property(properties.MAX_REF_AGE_MS, props),
        )


def retained_refs(metadata: TableMetadata, retention: Retention) -> dict[str, SnapshotRef]:
    """The refs that stay: ``main`` always, others while younger than their max ref age."""
    kept = {}
    for name, ref in metadata.refs.items():
        max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else retention.max_ref_age_ms
        age = retention.now_ms - metadata.snapshot_by_id(ref.snapshot_id).timestamp_ms
        if name == MAIN_BRANCH or age <= max_age:
            kept[name] = ref
    return kept


def snapshots_to_retain(
    metadata: TableMetadata, retention: Retention, refs: dict[str, SnapshotRef], pinned: Iterable[int] = ()
) -> set[int]:
    """Ids of the snapshots that stay, by the rules in the module docstring."""
    keep = {i for i in pinned if any(s.snapshot_id == i for s in metadata.snapshots)}
    on_refs: set[int] = set()
    for ref in refs.values():
        keep.add(ref.snapshot_id)
        if ref.is_branch:
            lineage = [s.snapshot_id for s in metadata.ancestors_of(ref.snapshot_id)]
            on_refs.update(lineage)
            keep.update(_branch_retained(metadata, ref, retention))
        else:
            on_refs.add(ref.snapshot_id)
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in on_refs and snapshot.timestamp_ms >= retention.expire_older_than_ms:
            keep.add(snapshot.snapshot_id)
    return keep


def _branch_retained(metadata: TableMetadata, ref: SnapshotRef, retention: Retention) -> list[int]:
    older_than = retention.expire_older_than_ms
    if ref.max_snapshot_age_ms is not None:
        older_than = retention.now_ms - ref.max_snapshot_age_ms
    min_keep = ref.min_snapshots_to_keep or retention.min_snapshots_to_keep
    kept: list[int] = []
    for ancestor in metadata.ancestors_of(ref.snapshot_id):
        if len(kept) >= min_keep and ancestor.timestamp_ms < older_than:
            break
        kept.append(ancestor.snapshot_id)
    return kept


def expire(metadata: TableMetadata, retention: Retention, pinned: Iterable[int] = ()) -> TableMetadata | None:
    """``metadata`` without expired snapshots and dropped refs; None when nothing expires."""
    refs = retained_refs(metadata, retention)
    keep = snapshots_to_retain(metadata, retention, refs, pinned)
    expired = [s.snapshot_id for s in metadata.snapshots if s.snapshot_id not in keep]
    dropped_refs = [name for name in metadata.refs if name not in refs]
    if not expired and not dropped_refs:
        return None
    for name in dropped_refs:
        metadata = metadata.remove_ref(name)
    return metadata.remove_snapshots(expired)


# --------------------------------------------------------------------------
# Which files to delete
# --------------------------------------------------------------------------


@dataclass
class ExpiredFiles:
    """Files that only expired snapshots referenced."""

    manifest_lists: list[str] = field(default_factory=list)
    manifests: list[str] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)
    delete_files: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        return [*self.data_files, *self.delete_files, *self.manifests, *self.manifest_lists]


def unreferenced_files(io: FileIO, expired: Iterable[Snapshot], retained: Iterable[Snapshot]) -> ExpiredFiles:
    """What ``expired`` snapshots reference and ``retained`` ones do not, found by reading manifests."""
    expired, retained = list(expired), list(retained)
    retained_lists = {s.manifest_list for s in retained}
    retained_manifests = _manifests_of(io, retained)
    kept_paths = set(retained_manifests)
    gone_manifests = {p: m for p, m in _manifests_of(io, expired).items() if p not in kept_paths}
    result = ExpiredFiles(
        manifest_lists=sorted({s.manifest_list for s in expired} - retained_lists),
        manifests=sorted(gone_manifests),
    )
    candidates = _live_files(io, gone_manifests.values())
    if candidates:
        still_live = _live_files(io, retained_manifests.values())
        for path, content in sorted(candidates.items()):
            if path not in still_live:
                target = result.data_files if content == DataFileContent.DATA else result.delete_files
                target.append(path)
    return result


def _manifests_of(io: FileIO, snapshots: Iterable[Snapshot]) -> dict[str, ManifestFile]:
    found: dict[str, ManifestFile] = {}
    for snapshot in snapshots:
        for manifest in read_manifest_list(io, snapshot.manifest_list):
            found.setdefault(manifest.manifest_path, manifest)
    return found


def _live_files(io: FileIO, manifests: Iterable[ManifestFile]) -> dict[str, DataFileContent]:
    """Path -> content of every file a live (ADDED or EXISTING) entry of ``manifests`` lists."""
    live: dict[str, DataFileContent] = {}
    for manifest in manifests:
        for entry in read_manifest_entries(io, manifest):
            if entry.status != ManifestEntryStatus.DELETED:
                live[entry.data_file.file_path] = DataFileContent(entry.data_file.content)
    return live


# --------------------------------------------------------------------------
# The operation
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpireResult:
    """What expired, what was deleted, and what could not be deleted (orphans to retry)."""

    expired_snapshot_ids: frozenset[int]
    metadata_location: str | None
    deleted: ExpiredFiles
    failed_deletes: tuple[str, ...] = ()


class ExpireSnapshots:
    """Expires snapshots of one table and deletes the files only they referenced.

    ``older_than_ms`` (an absolute timestamp) and ``retain_last`` override the
    table's ``history.expire.*`` properties; ``pinned`` snapshots are never
    expired; with ``clean_files=False`` only the metadata changes.
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: TableIdentifierLike,
        *,
        older_than_ms: int | None = None,
        retain_last: int | None = None,
        pinned: Iterable[int] = (),
        clean_files: bool = True,
        io: FileIO | None = None,
        before_commit: BeforeCommit | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.catalog = catalog
        self.identifier = to_table_identifier(identifier)
        self.older_than_ms = older_than_ms
        self.retain_last = retain_last
        self.pinned = frozenset(pinned)
        self.clean_files = clean_files
        self._io = io
        self._before_commit = before_commit
        self._sleep = sleep
        self._clock_ms = clock_ms

    def commit(self) -> ExpireResult:
        io = self._io or self.catalog.load_table(self.identifier).io
        result = commit_metadata_change(
            self.catalog,
            self.identifier,
            self._build,
            lambda _: False,
            what="snapshot expiry",
            io=io,
            before_commit=self._before_commit,
            sleep=self._sleep,
        )
        if result is None:
            return ExpireResult(frozenset(), None, ExpiredFiles())
        return self._clean(io, result)

    def _build(self, loaded: LoadedTable, attempt: int) -> TableMetadata | None:
        retention = Retention.for_table(loaded.metadata, self._clock_ms(), self.older_than_ms, self.retain_last)
        return expire(loaded.metadata, retention, self.pinned)

    def _clean(self, io: FileIO, result: CommittedMetadata) -> ExpireResult:
        kept_ids = {s.snapshot_id for s in result.metadata.snapshots}
        expired = [s for s in result.base.snapshots if s.snapshot_id not in kept_ids]
        expired_ids = frozenset(s.snapshot_id for s in expired)
        if not self.clean_files or not expired:
            return ExpireResult(expired_ids, result.location, ExpiredFiles())
        try:
            doomed = unreferenced_files(io, expired, result.metadata.snapshots)
        except (TableError, OSError) as e:  # the expiry landed: nothing after it may fail it
            log.warning(
                "expire snapshots of %s: the expiry landed, but its files were left for orphan-file "
                "removal: reading the manifest lists failed: %s",
                self.identifier,
                e,
            )
            return ExpireResult(expired_ids, result.location, ExpiredFiles())
        failed = []
        for path in doomed.all():
            try:
                io.delete(path)
            except TableError as e:
                log.warning("expire snapshots of %s: could not delete %s: %s", self.identifier, path, e)
                failed.append(path)
        return ExpireResult(expired_ids, result.location, doomed, tuple(failed))
