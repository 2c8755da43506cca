"""``floe index check|rebuild``: verify a table's key index, or build a new one from the table.

Both read the table once, the key of every live row with its position: the
cost the index exists to avoid per batch (docs/upsert-index-design.md),
paid here on request. ``rebuild`` commits only the table property
``floe.key-index``, in a metadata swap of its own that refuses when the head
changed data files since the rebuild read the table, so the index a table
names always describes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from commit.catalog.base import Catalog, LoadedTable
from commit.key_index.manifest import (
    KEY_INDEX_PROPERTY,
    IndexManifest,
    apply_change,
    describes,
    empty_manifest,
    retire,
)
from commit.key_index.rebuild import BuiltIndex, build_index, index_problems
from commit.key_index.segments import resolve
from commit.key_index.store import current_manifest, index_location, manifest_path, read_segment, write_manifest
from commit.metadata_committer import CommitFiles, commit_metadata_change
from service.failures import CommandError
from table import properties
from table.errors import TableError
from table.io import FileIO
from table.metadata import MAIN_BRANCH, TableMetadata, now_ms

log = logging.getLogger("floe.index")


@dataclass(frozen=True)
class CheckResult:
    """What ``floe index check`` prints, and whether the index agrees with the table."""

    lines: list[str]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


# ---------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------


def check_index(catalog: Catalog, identifier: str) -> CheckResult:
    """Compare the table's index with a read of the table; the summary and every disagreement found."""
    loaded = catalog.load_table(identifier)
    io, metadata = loaded.io, loaded.metadata
    manifest = current_manifest(io, metadata)
    if manifest is None:
        raise CommandError(
            f"table {identifier} has no key index ({KEY_INDEX_PROPERTY} is not set); "
            f"build one with 'floe index rebuild {identifier}'"
        )
    missing = _missing_files(io, manifest)
    problems = list(missing)
    if not describes(manifest, metadata):
        problems.append(
            f"the index describes snapshot {manifest.snapshot_id}, not the head {_head_id(metadata)}: "
            "snapshots since changed data files (ingest rebuilds it before its next batch)"
        )
    if not missing:  # with a file missing, the comparison would only fail on it
        problems += _compare(io, metadata, manifest, identifier)
    live = None if missing else _live_keys(io, manifest)
    return CheckResult(_summary(metadata, manifest, live, problems), problems)


def _compare(io: FileIO, metadata: TableMetadata, manifest: IndexManifest, identifier: str) -> list[str]:
    """:func:`index_problems`, logged: it reads every live row's key, which takes a while on a big table."""
    log.info(
        "checking the key index of %s against the table (reading %s)",
        identifier,
        _data_files(metadata),
        extra={"table": identifier},
    )
    started = time.monotonic()
    problems = index_problems(io, metadata, manifest)
    log.info(
        "checked the key index of %s in %.1f s: %d problem(s)",
        identifier,
        time.monotonic() - started,
        len(problems),
        extra={"table": identifier},
    )
    return problems


def _missing_files(io: FileIO, manifest: IndexManifest) -> list[str]:
    """Segments and remaps the manifest names but storage lacks (a cleanup that went too far)."""
    paths = [s.path for s in manifest.segments] + [r.path for r in manifest.remaps]
    return [f"index file {path} is missing" for path in paths if not io.exists(path)]


def _summary(metadata: TableMetadata, manifest: IndexManifest, live: int | None, problems: Sequence[str]) -> list[str]:
    """The index at a glance, then each problem (or ``problems: none``)."""
    bases = sum(1 for s in manifest.segments if s.base)
    head = _head_id(metadata)
    state = "the head" if manifest.snapshot_id == head else f"head is {head}"
    lines = [
        f"index:      {metadata.properties[KEY_INDEX_PROPERTY]}",
        f"key fields: {_key_names(metadata, manifest.key_ids)}",
        f"snapshot:   {manifest.snapshot_id} ({state})",
        f"buckets:    {manifest.buckets} ({len({s.bucket for s in manifest.segments})} with segments)",
        f"segments:   {len(manifest.segments)} ({bases} bases, {len(manifest.segments) - bases} deltas), "
        f"{manifest.size_bytes} bytes",
        f"entries:    {manifest.entries} ({'?' if live is None else live} live keys)",
        f"remaps:     {len(manifest.remaps)}",
    ]
    return lines + ([f"problem:    {p}" for p in problems] or ["problems:   none"])


def _live_keys(io: FileIO, manifest: IndexManifest) -> int:
    """Keys whose newest entry is not a tombstone (segments are cached, so the check reads them once)."""
    return sum(resolve([read_segment(io, r) for r in manifest.bucket(b)]).num_rows for b in range(manifest.buckets))


def _key_names(metadata: TableMetadata, key_ids: Sequence[int]) -> str:
    schema = metadata.schema()
    names = []
    for field_id in key_ids:
        try:
            names.append(f"{schema.find_column_name(field_id)} (id {field_id})")
        except TableError:
            names.append(f"id {field_id} (not in the current schema)")
    return ", ".join(names)


# ---------------------------------------------------------------------------
# rebuild
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RebuildResult:
    """A committed new index: where, of which snapshot, how big, how long it took."""

    identifier: str
    manifest_path: str
    manifest: IndexManifest
    seconds: float

    def lines(self) -> list[str]:
        m = self.manifest
        return [
            f"rebuilt the key index of {self.identifier} at snapshot {m.snapshot_id}: {m.entries} keys in "
            f"{m.buckets} buckets ({len(m.segments)} segments, {m.size_bytes} bytes) in {self.seconds:.1f} s",
            f"index: {self.manifest_path}",
        ]


def rebuild_index(catalog: Catalog, identifier: str) -> RebuildResult:
    """Build a fresh index from the table, commit its manifest as ``floe.key-index``, drop the old one's files."""
    started = time.monotonic()
    loaded = catalog.load_table(identifier)
    io, metadata = loaded.io, loaded.metadata
    previous = _readable_manifest(io, metadata, identifier)
    key_ids = _key_ids(metadata, previous, identifier)
    buckets = properties.KEY_INDEX_BUCKETS.read(metadata.properties)
    location = index_location(metadata)
    log.info(
        "building the key index of %s from the table (reading %s, %d buckets)",
        identifier,
        _data_files(metadata),
        buckets,
        extra={"table": identifier},
    )
    built = build_index(io, metadata, key_ids, buckets, location)
    path, manifest = _commit(catalog, io, identifier, built, location)
    seconds = time.monotonic() - started
    log.info(
        "rebuilt the key index of %s: %d keys in %.1f s",
        identifier,
        manifest.entries,
        seconds,
        extra={"table": identifier, "manifest": path},
    )
    return RebuildResult(identifier, path, manifest, seconds)


def _readable_manifest(io: FileIO, metadata: TableMetadata, identifier: str) -> IndexManifest | None:
    """The current index, or None: an unreadable one is what a rebuild replaces, so it only warns."""
    try:
        return current_manifest(io, metadata)
    except TableError as error:
        log.warning(
            "the current key index of %s cannot be read (%s); rebuilding from the schema's key",
            identifier,
            error,
            extra={"table": identifier},
        )
        return None


def _key_ids(metadata: TableMetadata, previous: IndexManifest | None, identifier: str) -> tuple[int, ...]:
    """The current index's key (ingest checks batches against it), else the schema's identifier fields."""
    if previous is not None:
        return previous.key_ids
    key_ids = metadata.schema().identifier_field_ids
    if not key_ids:
        raise CommandError(
            f"table {identifier} has neither a key index nor identifier fields, so nothing says "
            "which columns are its key; a Floe upsert job builds the index, with its key, "
            "at its first batch"
        )
    return tuple(key_ids)


def _commit(
    catalog: Catalog, io: FileIO, identifier: str, built: BuiltIndex, location: str
) -> tuple[str, IndexManifest]:
    """Point the table at the new index; the new files are deleted if that fails for sure.

    The replaced index's files are retired, not deleted (an ingest batch in
    flight may still read them): a later commit deletes them after the grace
    period (:func:`commit.key_index.manifest.retire`).
    """
    head = built.snapshot_id
    manifest, _ = apply_change(empty_manifest(built.manifest.key_ids, built.manifest.buckets, head), built.change, head)  # type: ignore[arg-type]  # None: a table without snapshots
    files = CommitFiles(io)
    segments = [files.add(p) for p in built.change.paths]
    attempt = _Attempt(io, files, manifest, location, identifier)
    committed = commit_metadata_change(
        catalog,
        identifier,
        attempt.build,
        lambda metadata: metadata.properties.get(KEY_INDEX_PROPERTY) in attempt.paths,
        what="key index",
        files=files,
        keep=lambda done: [done.location, *segments, done.metadata.properties[KEY_INDEX_PROPERTY]],
    )
    if committed is not None:
        _delete_all(io, attempt.expired, identifier)
        return committed.metadata.properties[KEY_INDEX_PROPERTY], attempt.written
    return attempt.paths[-1], attempt.written


class _Attempt:
    """Each attempt's metadata: the property moved to a manifest written for it (the replaced index's
    files retired in it), refused if the head changed data files meanwhile."""

    def __init__(self, io: FileIO, files: CommitFiles, manifest: IndexManifest, location: str, identifier: str) -> None:
        self.io, self.files, self.manifest, self.location, self.identifier = io, files, manifest, location, identifier
        self.paths: list[str] = []
        self.expired: list[str] = []
        self.written = manifest

    def build(self, loaded: LoadedTable, _attempt: int) -> TableMetadata | None:
        if not describes(self.manifest, loaded.metadata):
            raise CommandError(
                f"table {self.identifier} changed data files while the key index was being rebuilt (it read "
                f"snapshot {self.manifest.snapshot_id}, the head is now {_head_id(loaded.metadata)}); nothing was "
                f"committed: run 'floe index rebuild {self.identifier}' again (ingest also rebuilds it before "
                "its next batch)"
            )
        previous = _readable_manifest(self.io, loaded.metadata, self.identifier)
        manifest, old = self.manifest, []
        if previous is not None:
            manifest = replace(manifest, retired=previous.retired)
            old = sorted(
                {s.path for s in previous.segments}
                | {r.path for r in previous.remaps}
                | {loaded.metadata.properties[KEY_INDEX_PROPERTY]}
            )
        self.written, self.expired = retire(manifest, old, now_ms())
        path = self.files.add(manifest_path(self.location, self.manifest.snapshot_id or 0))
        write_manifest(self.io, path, self.written)
        self.paths.append(path)
        return loaded.metadata.set_properties({KEY_INDEX_PROPERTY: path})


def _delete_all(io: FileIO, paths: Iterable[str], identifier: str) -> None:
    for path in paths:
        try:
            io.delete(path)
        except TableError as error:
            log.warning(
                "could not delete a retired key index file (an orphan now): %s",
                error,
                extra={"table": identifier, "path": path},
            )


# ---------------------------------------------------------------------------


def _head_id(metadata: TableMetadata) -> int | None:
    head = metadata.snapshot_for_ref(MAIN_BRANCH)
    return None if head is None else head.snapshot_id


def _data_files(metadata: TableMetadata) -> str:
    """The head's data files as its summary counts them, for a log line (no scan planned just to log)."""
    head = metadata.snapshot_for_ref(MAIN_BRANCH)
    count = "0" if head is None else head.summary.get("total-data-files")
    return "its data files" if count is None else f"{count} data files"
