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

Steps 3 and 4 are :class:`commit.metadata_committer.MetadataCommitter`'s.
When the catalog cannot tell whether the swap happened
(:class:`CommitStateUnknown`), the table is reloaded until it can be told:
the commit landed if our snapshot is in the branch's ancestry (or our
metadata file is current or in the metadata log). While that cannot be
settled, the original error is raised and nothing is deleted.

Every file the commit writes is tracked (:class:`~commit.metadata_committer.CommitFiles`). After success the files of failed
attempts are deleted; after a failure everything the commit wrote is deleted,
but never the data or delete files the caller handed in. A process that dies
leaves its files behind; :meth:`SnapshotProducer.written_files` lists them.
"""

from __future__ import annotations

import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from commit.catalog.base import Catalog, LoadedTable
from commit.errors import CommitFailed
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.metadata_committer import BeforeCommit, CommitFiles, CommittedMetadata, commit_metadata_change
from commit.summary import OPERATION, with_totals
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
from table.metadata import MAIN_BRANCH, Snapshot, TableMetadata, now_ms
from table.partitioning import PartitionSpec

log = logging.getLogger(__name__)


class ManifestOutput:
    """Names and writes the new manifests of one commit (``<uuid>-m<n>.avro``), tracking each."""

    def __init__(self, files: CommitFiles, metadata_dir: str, commit_uuid: str, snapshot_id: int) -> None:
        self._files = files
        self._dir = metadata_dir
        self._uuid = commit_uuid
        self._snapshot_id = snapshot_id
        self._count = 0

    def track(self, path: str) -> str:
        return self._files.add(path)

    def write(
        self,
        base: TableMetadata,
        spec: PartitionSpec,
        content: ManifestContent,
        entries: Iterable[ManifestEntry],
    ) -> ManifestFile:
        path = self._files.add(f"{self._dir}/{self._uuid}-m{self._count}.avro")
        self._count += 1
        return write_manifest(
            self._files.io,
            path,
            base.schema(),
            spec,
            self._snapshot_id,
            entries,
            content,
            format_version=base.format_version,
        )


# --------------------------------------------------------------------------
# What an operation sees and returns
# --------------------------------------------------------------------------


@dataclass
class Attempt:
    """One try at committing: the refreshed base and what the new snapshot will be."""

    number: int
    base: TableMetadata
    parent: Snapshot | None
    snapshot_id: int
    sequence_number: int
    io: FileIO
    manifests: ManifestOutput
    _parent_manifests: list[ManifestFile] | None = field(default=None, repr=False)

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

    def track(self, path: str) -> str:
        """Record a file this attempt is about to write: deleted unless the commit uses it (:attr:`Produced.files`)."""
        return self.manifests.track(path)


@dataclass(frozen=True)
class Produced:
    """An operation's snapshot: all of its manifests, and its summary without totals."""

    manifests: list[ManifestFile]
    summary: Mapping[str, str]
    properties: Mapping[str, str] = field(default_factory=dict)
    """Table properties the snapshot's metadata sets with it (the key index's pointer)."""
    files: tuple[str, ...] = ()
    """Other files the attempt wrote that the committed metadata uses (kept, as its manifests are)."""


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


class WrappingOperation(SnapshotOperation):
    """An operation that adds to ``inner``'s snapshot (a batch record, the key index): the
    summary ``operation`` and validation are ``inner``'s; subclasses extend :meth:`produce`."""

    def __init__(self, inner: SnapshotOperation) -> None:
        self.inner = inner

    @property
    def operation(self) -> str:  # type: ignore[override]  # a property where the base has a class attribute
        return self.inner.operation

    def validate(self, attempt: Attempt) -> None:
        self.inner.validate(attempt)

    def produce(self, attempt: Attempt) -> Produced:
        return self.inner.produce(attempt)


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
        io: FileIO | None = None,
        before_commit: BeforeCommit | None = None,
        snapshot_properties: Mapping[str, str] | None = None,
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
        self._files: CommitFiles | None = None
        self._output: ManifestOutput | None = None
        self._lists: dict[str, list[ManifestFile]] = {}  # manifest list -> its manifests
        self._extra: dict[str, tuple[str, ...]] = {}  # manifest list -> other files its attempt produced

    @property
    def io(self) -> FileIO:
        """The FileIO the commit wrote through: the table's (known once :meth:`commit` has run)."""
        if self._files is None:
            raise CommitFailed(str(self.identifier), "the producer has not committed yet")
        return self._files.io

    def written_files(self) -> list[str]:
        """Files this producer wrote and has not deleted: after a crash, the orphans."""
        return [] if self._files is None else self._files.paths()

    def commit(self) -> Snapshot:
        """Commit, retrying lost races; the committed snapshot.

        A producer commits once, successful or not: a failed commit has deleted
        what it wrote, so a retry needs a new operation and a new producer.
        """
        if self._files is not None:
            raise CommitFailed(
                str(self.identifier),
                f"snapshot {self.snapshot_id} was already committed, or tried: "
                "a producer commits once; retry with a new operation and producer",
            )
        files = self._files = CommitFiles(self._io or self.catalog.load_table(self.identifier).io)
        result = commit_metadata_change(
            self.catalog,
            self.identifier,
            self._build,
            self._landed,
            what=f"{self.operation.operation} snapshot",
            files=files,
            keep=self._committed_files,
            before_commit=self._before_commit,
            sleep=self._sleep,
        )
        assert result is not None, "a snapshot is always a change"
        return result.metadata.snapshot_by_id(self.snapshot_id)

    def _build(self, loaded: LoadedTable, number: int) -> TableMetadata:
        """One attempt: validate, produce, write the manifest list; the new metadata."""
        base = loaded.metadata
        attempt = self._attempt(base, number)
        self.operation.validate(attempt)
        produced = self.operation.produce(attempt)
        list_path, added_rows = self._write_manifest_list(attempt, produced.manifests)
        parent = attempt.parent
        summary = with_totals(
            {**self.snapshot_properties, **produced.summary}, None if parent is None else parent.summary
        )
        snapshot = Snapshot(
            snapshot_id=self.snapshot_id,
            parent_snapshot_id=None if parent is None else parent.snapshot_id,
            sequence_number=attempt.sequence_number,
            timestamp_ms=max(now_ms(), base.last_updated_ms),
            manifest_list=list_path,
            summary={OPERATION: self.operation.operation, **summary},
            schema_id=base.current_schema_id,
            # v3 row lineage: assigned from the base of this attempt, so reassigned on every retry
            first_row_id=base.next_row_id if base.tracks_row_lineage else None,
            added_rows=added_rows if base.tracks_row_lineage else None,
        )
        self._extra[list_path] = produced.files
        metadata = base.add_snapshot(snapshot).set_branch(self.branch, self.snapshot_id)
        return metadata.set_properties(produced.properties) if produced.properties else metadata

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

    def _write_manifest_list(self, attempt: Attempt, manifests: list[ManifestFile]) -> tuple[str, int]:
        """The manifest list's path and the row ids it assigned (v3; 0 in v2)."""
        assert self._files is not None
        base = attempt.base
        name = f"snap-{self.snapshot_id}-{attempt.number}-{self.commit_uuid}.avro"
        path = self._files.add(f"{metadata_location(base)}/{name}")
        parent_id = None if attempt.parent is None else attempt.parent.snapshot_id
        added_rows = write_manifest_list(
            self._files.io,
            path,
            self.snapshot_id,
            parent_id,
            attempt.sequence_number,
            manifests,
            first_row_id=base.next_row_id if base.tracks_row_lineage else None,
            format_version=base.format_version,
        )
        self._lists[path] = list(manifests)
        return path, added_rows

    def _landed(self, current: TableMetadata) -> bool:
        head = current.refs.get(self.branch)
        if head is None:
            return False
        return any(s.snapshot_id == self.snapshot_id for s in current.ancestors_of(head.snapshot_id))

    def _committed_files(self, result: CommittedMetadata) -> set[str] | None:
        """What the table now uses of the files written: the rest, from lost attempts, is deleted."""
        snapshot = result.metadata.snapshot_by_id(self.snapshot_id)
        committed = self._lists.get(snapshot.manifest_list)
        if committed is None:  # cannot tell which manifests are in use: keep them all
            log.warning("committed manifest list %s is not one this commit wrote", snapshot.manifest_list)
            return None
        extra = self._extra.get(snapshot.manifest_list, ())
        return {result.location, snapshot.manifest_list, *(m.manifest_path for m in committed), *extra}
