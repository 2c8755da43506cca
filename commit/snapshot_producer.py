"""The commit loop: turn an operation into a snapshot and swap it into the catalog.

Iceberg Java's ``SnapshotProducer``, with the operation kept apart: a
:class:`SnapshotOperation` says what changes (``validate`` against a base,
``produce`` the snapshot's manifests and summary); this module decides how the
change is committed (spec: "Optimistic Concurrency", "Commit Conflict
Resolution and Retry", "Metastore Tables"):

1. load the table (refresh) and take ``last-sequence-number + 1``;
2. have the operation validate against that base and produce its manifests:
   an operation writes each new manifest once, with null sequence numbers
   that later inherit the snapshot's, and reuses it on every retry;
3. write a new manifest list (it carries the attempt's sequence number) and
   the next ``<version>-<uuid>.metadata.json`` with the metadata log;
4. compare-and-swap the catalog pointer. :class:`CommitConflict` (another
   writer won) means back off and go to 1; nothing else is retried.

When the catalog cannot tell whether the swap happened
(:class:`CommitStateUnknown`), the table is reloaded until it can be told:
the commit landed if our snapshot is in the branch's ancestry (or our
metadata file is current or in the metadata log). While that cannot be
settled, the original error is raised and nothing is deleted.

Every file the commit writes is tracked. After success the files of failed
attempts are deleted; after a failure everything the commit wrote is deleted,
but never the data or delete files the caller handed in. A process that dies
leaves its files behind; :meth:`SnapshotProducer.written_files` lists them.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional

from commit.catalog import Catalog, LoadedTable
from commit.errors import CatalogDatabaseError, CommitConflict, CommitFailed, CommitStateUnknown
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.retry import RetryPolicy
from commit.summary import OPERATION, with_totals
from table import properties
from table.errors import TableError
from table.io import FileIO
from table.locations import metadata_location
from table.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestFile,
    read_manifest_entries,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from table.metadata import MAIN_BRANCH, Snapshot, TableMetadata, metadata_file_name, parse_metadata_version
from table.metadata_json import write_table_metadata
from table.partitioning import PartitionSpec

log = logging.getLogger(__name__)



class CommitNotApplied(CommitFailed):
    """The catalog could not report the outcome, and a reload proved the commit did not land.

    The files the commit wrote have been deleted; the table is as it was.
    The caller may start the operation again from the start.
    """


# --------------------------------------------------------------------------
# Files written by one commit
# --------------------------------------------------------------------------


class WrittenFiles:
    """Every file one commit wrote (manifests, manifest lists, metadata), in order.

    A path is recorded before its file is written, so a half-written file is
    never forgotten. Deleting forgets only the files that were deleted.
    """

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._paths: dict[str, None] = {}

    def add(self, path: str) -> str:
        self._paths[path] = None
        return path

    def paths(self) -> list[str]:
        return list(self._paths)

    def delete_except(self, keep: Iterable[str]) -> list[str]:
        """Delete every recorded file not in ``keep``; the paths that could not be deleted."""
        kept = set(keep)
        failed = []
        for path in [p for p in self._paths if p not in kept]:
            try:
                self.io.delete(path)
                del self._paths[path]
            except TableError as e:
                log.warning("could not delete uncommitted file %s: %s", path, e)
                failed.append(path)
        return failed

    def delete_all_after(self, error: BaseException) -> None:
        """Delete everything after a failed commit, noting on ``error`` what could not go."""
        failed = self.delete_except(())
        if failed:
            error.add_note(f"files left behind by the failed commit (delete them): {failed}")


class ManifestOutput:
    """Names and writes the new manifests of one commit (``<uuid>-m<n>.avro``), tracking each."""

    def __init__(self, files: WrittenFiles, metadata_dir: str, commit_uuid: str, snapshot_id: int) -> None:
        self._files = files
        self._dir = metadata_dir
        self._uuid = commit_uuid
        self._snapshot_id = snapshot_id
        self._count = 0

    def write(
        self,
        base: TableMetadata,
        spec: PartitionSpec,
        content: ManifestContent,
        entries: Iterable[ManifestEntry],
    ) -> ManifestFile:
        path = self._files.add(f"{self._dir}/{self._uuid}-m{self._count}.avro")
        self._count += 1
        return write_manifest(self._files.io, path, base.schema(), spec, self._snapshot_id, entries, content)


# --------------------------------------------------------------------------
# What an operation sees and returns
# --------------------------------------------------------------------------


@dataclass
class Attempt:
    """One try at committing: the refreshed base and what the new snapshot will be."""

    number: int
    base: TableMetadata
    parent: Optional[Snapshot]
    snapshot_id: int
    sequence_number: int
    io: FileIO
    manifests: ManifestOutput
    _parent_manifests: Optional[list[ManifestFile]] = field(default=None, repr=False)

    def parent_manifests(self) -> list[ManifestFile]:
        """The manifests of the parent snapshot (read once per attempt)."""
        if self._parent_manifests is None:
            self._parent_manifests = (
                [] if self.parent is None else read_manifest_list(self.io, self.parent.manifest_list)
            )
        return self._parent_manifests

    def read_entries(self, manifest: ManifestFile) -> Iterable[ManifestEntry]:
        return read_manifest_entries(self.io, manifest)

    def write_manifest(self, spec_id: int, content: ManifestContent, entries: Iterable[ManifestEntry]) -> ManifestFile:
        return self.manifests.write(self.base, self.base.spec_by_id(spec_id), content, entries)


@dataclass(frozen=True)
class Produced:
    """An operation's snapshot: all of its manifests, and its summary without totals."""

    manifests: list[ManifestFile]
    summary: Mapping[str, str]


class SnapshotOperation(ABC):
    """A change that becomes one snapshot. Implementations keep what they wrote
    across attempts (written manifests are reused, never rewritten)."""

    #: the summary ``operation``: append, overwrite, delete or replace
    operation: str

    @abstractmethod
    def validate(self, attempt: Attempt) -> None:
        """Raise a ValidationException when the change no longer applies to ``attempt.base``."""

    @abstractmethod
    def produce(self, attempt: Attempt) -> Produced:
        """The manifests and summary of the new snapshot, on top of ``attempt.parent``."""


@dataclass(frozen=True)
class PendingCommit:
    """A written metadata file about to be swapped in (handed to the before-commit hook)."""

    attempt: int
    base_location: str
    base: TableMetadata
    new_location: str
    metadata: TableMetadata


@dataclass(frozen=True)
class CommittedMetadata:
    """The result of a successful swap: from which base, to which file."""

    base_location: str
    base: TableMetadata
    location: str
    metadata: TableMetadata
    attempts: int
    settled_unknown: bool = False  # the swap's outcome had to be checked by reloading


BeforeCommit = Callable[[PendingCommit], None]
BuildMetadata = Callable[[LoadedTable, int], Optional[TableMetadata]]
Landed = Callable[[TableMetadata], bool]


# --------------------------------------------------------------------------
# Writing metadata versions and swapping them in
# --------------------------------------------------------------------------


class MetadataCommitter:
    """Writes each attempt's metadata file and swaps it in, retrying only lost races.

    ``build(loaded, attempt)`` makes the new metadata from a fresh load of
    the table, or None when there is nothing (left) to change;
    ``landed(metadata)`` tells from a reloaded table whether this commit is
    in it (used only when the swap's outcome is unknown).
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: TableIdentifierLike,
        files: WrittenFiles,
        *,
        before_commit: Optional[BeforeCommit] = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        unit_random: Callable[[], float] = random.random,
    ) -> None:
        self.catalog = catalog
        self.identifier = to_table_identifier(identifier)
        self.files = files
        self._before_commit = before_commit
        self._sleep = sleep
        self._clock = clock
        self._random = unit_random

    def commit(self, build: BuildMetadata, landed: Landed) -> Optional[CommittedMetadata]:
        """Commit; None when ``build`` found nothing to change."""
        loaded = self.catalog.load_table(self.identifier)
        backoff = RetryPolicy.for_commits(loaded.metadata.properties).backoff(self._clock, self._random)
        attempt = 1
        while True:
            updated = build(loaded, attempt)
            if updated is None:
                return None
            location, metadata = self._write(loaded, updated)
            if self._before_commit is not None:
                self._before_commit(PendingCommit(attempt, loaded.metadata_location, loaded.metadata, location, metadata))
            try:
                self.catalog.swap_metadata_location(self.identifier, loaded.metadata_location, location)
                self._delete_dropped_metadata(loaded.metadata, metadata)
                return CommittedMetadata(loaded.metadata_location, loaded.metadata, location, metadata, attempt)
            except CommitConflict as conflict:
                delay_ms = backoff.next_delay_ms()
                if delay_ms is None:
                    conflict.add_note(f"gave up after {attempt} attempt(s)")
                    raise
                log.info("commit to %s lost the race (attempt %d); retrying in %.0f ms", self.identifier, attempt, delay_ms)
                self._sleep(delay_ms / 1000.0)
            except CommitStateUnknown as unknown:
                return self._settle(unknown, loaded, location, metadata, attempt, landed)
            loaded = self.catalog.load_table(self.identifier)
            attempt += 1

    def _delete_dropped_metadata(self, base: TableMetadata, committed: TableMetadata) -> None:
        """After a commit: delete the metadata files that left the log, if the table asks for it.

        The commit has landed, so a failed delete is only logged: the file is
        then an orphan for orphan-file removal.
        """
        for path in base.metadata_files_dropped_by(committed):
            try:
                self.files.io.delete(path)
            except (OSError, TableError) as error:
                log.warning("could not delete an old metadata file after a commit",
                            extra={"table": str(self.identifier), "path": path, "error": str(error)})

    def _write(self, loaded: LoadedTable, updated: TableMetadata) -> tuple[str, TableMetadata]:
        """Write ``updated`` as the next metadata version, logging the file it replaces."""
        base = loaded.metadata
        stamp = max(_now_ms(), updated.last_updated_ms, base.last_updated_ms)
        metadata = updated.with_metadata_log(loaded.metadata_location, timestamp_ms=base.last_updated_ms)
        metadata = metadata.with_last_updated_ms(stamp)
        compressed = properties.METADATA_COMPRESSION.read(metadata.properties) == "gzip"
        name = metadata_file_name(parse_metadata_version(loaded.metadata_location) + 1, compressed)
        location = self.files.add(f"{metadata_location(metadata)}/{name}")
        write_table_metadata(self.files.io, location, metadata)
        return location, metadata

    def _settle(
        self,
        unknown: CommitStateUnknown,
        loaded: LoadedTable,
        location: str,
        metadata: TableMetadata,
        attempt: int,
        landed: Landed,
    ) -> CommittedMetadata:
        """Reload until the outcome is known: landed (success) or not (:class:`CommitNotApplied`)."""
        current = self._reload_for_check(unknown, loaded.metadata.properties)
        logged = {e.metadata_file for e in current.metadata.metadata_log}
        if current.metadata_location == location or location in logged or landed(current.metadata):
            log.warning("commit to %s had an unknown outcome; a reload shows it landed", self.identifier)
            return CommittedMetadata(loaded.metadata_location, loaded.metadata, location, metadata, attempt, True)
        raise CommitNotApplied(
            str(self.identifier),
            f"commit to table {self.identifier} did not land: the catalog reported an unknown outcome "
            f"({unknown}), and a reload shows the table at {current.metadata_location!r} without it",
        ) from unknown

    def _reload_for_check(self, unknown: CommitStateUnknown, properties: Mapping[str, str]) -> LoadedTable:
        """Reload the table, retrying failures per ``commit.status-check.*``; give up with ``unknown``."""
        backoff = RetryPolicy.for_status_checks(properties).backoff(self._clock, self._random)
        while True:
            try:
                return self.catalog.load_table(self.identifier)
            except (CatalogDatabaseError, TableError) as e:
                delay_ms = backoff.next_delay_ms()
                if delay_ms is None:
                    unknown.add_note(f"the outcome could not be checked: reloading failed {backoff.attempts} time(s), last: {e}")
                    raise unknown from e
                self._sleep(delay_ms / 1000.0)
            except Exception as e:
                unknown.add_note(f"the outcome could not be checked: {e!r}")
                raise unknown from e


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_snapshot_id() -> int:
    """A random positive 63-bit id, as Java derives one from a random UUID."""
    value = uuid.uuid4().int
    return ((value >> 64) ^ value) & ((1 << 63) - 1) or 1


# --------------------------------------------------------------------------
# The snapshot producer
# --------------------------------------------------------------------------


class SnapshotProducer:
    """Commits one :class:`SnapshotOperation` as one snapshot on ``branch``.

    ``before_commit`` runs after each attempt's metadata file is written and
    before the swap: tests use it to make a real concurrent commit, or to
    crash. ``snapshot_properties`` are extra summary entries.
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: TableIdentifierLike,
        operation: SnapshotOperation,
        *,
        branch: str = MAIN_BRANCH,
        io: Optional[FileIO] = None,
        before_commit: Optional[BeforeCommit] = None,
        snapshot_properties: Optional[Mapping[str, str]] = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.catalog = catalog
        self.identifier = to_table_identifier(identifier)
        self.operation = operation
        self.branch = branch
        self.snapshot_id = new_snapshot_id()
        self.commit_uuid = str(uuid.uuid4())
        self.snapshot_properties = dict(snapshot_properties or {})
        self._io = io
        self._before_commit = before_commit
        self._sleep = sleep
        self._files: Optional[WrittenFiles] = None
        self._output: Optional[ManifestOutput] = None
        self._lists: dict[str, list[ManifestFile]] = {}  # manifest list -> its manifests
        self._committed = False

    def written_files(self) -> list[str]:
        """Files this producer wrote and has not deleted: after a crash, the orphans."""
        return [] if self._files is None else self._files.paths()

    def commit(self) -> Snapshot:
        """Commit, retrying lost races; the committed snapshot."""
        if self._committed:
            raise CommitFailed(str(self.identifier), f"snapshot {self.snapshot_id} was already committed")
        pointer = self.catalog.load_pointer(self.identifier)
        files = self._files = WrittenFiles(self._io or FileIO.for_location(pointer.metadata_location))
        committer = MetadataCommitter(
            self.catalog, self.identifier, files, before_commit=self._before_commit, sleep=self._sleep
        )
        try:
            result = committer.commit(self._build, self._landed)
            assert result is not None, "a snapshot is always a change"
        except CommitStateUnknown:
            raise  # it may have landed: every file may be part of the table
        except Exception as error:
            error.add_note(f"commit of a {self.operation.operation} snapshot to table {self.identifier}")
            files.delete_all_after(error)
            raise
        self._committed = True
        snapshot = result.metadata.snapshot_by_id(self.snapshot_id)
        self._clean_uncommitted(result, snapshot)
        return snapshot

    def _build(self, loaded: LoadedTable, number: int) -> TableMetadata:
        """One attempt: validate, produce, write the manifest list; the new metadata."""
        base = loaded.metadata
        attempt = self._attempt(base, number)
        self.operation.validate(attempt)
        produced = self.operation.produce(attempt)
        list_path = self._write_manifest_list(attempt, produced.manifests)
        parent = attempt.parent
        summary = with_totals({**self.snapshot_properties, **produced.summary}, None if parent is None else parent.summary)
        snapshot = Snapshot(
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=None if parent is None else parent.snapshot_id,
            sequence_number=attempt.sequence_number,
            timestamp_ms=max(_now_ms(), base.last_updated_ms),
            manifest_list=list_path,
            summary={OPERATION: self.operation.operation, **summary},
            schema_id=base.current_schema_id,
        )
        return base.add_snapshot(snapshot).set_branch(self.branch, self.snapshot_id)

    def _attempt(self, base: TableMetadata, number: int) -> Attempt:
        assert self._files is not None
        if any(s.snapshot_id == self.snapshot_id for s in base.snapshots):
            raise CommitFailed(str(self.identifier), f"snapshot id {self.snapshot_id} is already taken")
        if self._output is None:
            self._output = ManifestOutput(self._files, metadata_location(base), self.commit_uuid, self.snapshot_id)
        return Attempt(
            number=number,
            base=base,
            parent=base.snapshot_for_ref(self.branch),
            snapshot_id=self.snapshot_id,
            sequence_number=base.next_sequence_number,
            io=self._files.io,
            manifests=self._output,
        )

    def _write_manifest_list(self, attempt: Attempt, manifests: list[ManifestFile]) -> str:
        assert self._files is not None
        name = f"snap-{self.snapshot_id}-{attempt.number}-{self.commit_uuid}.avro"
        path = self._files.add(f"{metadata_location(attempt.base)}/{name}")
        parent_id = None if attempt.parent is None else attempt.parent.snapshot_id
        write_manifest_list(self._files.io, path, self.snapshot_id, parent_id, attempt.sequence_number, manifests)
        self._lists[path] = list(manifests)
        return path

    def _landed(self, current: TableMetadata) -> bool:
        head = current.refs.get(self.branch)
        if head is None:
            return False
        return any(s.snapshot_id == self.snapshot_id for s in current.ancestors_of(head.snapshot_id))

    def _clean_uncommitted(self, result: CommittedMetadata, snapshot: Snapshot) -> None:
        """Delete what failed attempts wrote: their lists, metadata and unused manifests."""
        assert self._files is not None
        committed = self._lists.get(snapshot.manifest_list)
        if committed is None:  # cannot tell which manifests are in use: keep them all
            log.warning("committed manifest list %s is not one this commit wrote", snapshot.manifest_list)
            return
        keep = {result.location, snapshot.manifest_list, *(m.manifest_path for m in committed)}
        self._files.delete_except(keep)
