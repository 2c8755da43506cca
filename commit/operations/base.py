"""What the file-level operations share (Iceberg Java's ``MergingSnapshotProducer``).

A snapshot that adds and removes files is made of:

* new manifests for the added data and delete files, written once and
  reused on every retry (entries have null sequence numbers and inherit the
  snapshot's; a rewrite may instead give its data files an explicit data
  sequence number);
* the parent's manifests, with those that list removed files rewritten
  (:mod:`commit.operations.manifest_filter`);
* all of it merged per the table's manifest merge settings.

Operations subclass :class:`FileChangeOperation` and add their own
validation; :class:`ConflictChecks` adds the optional "nothing conflicting
was committed since snapshot S" checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Self, TypeAlias

from commit.errors import InvalidArgument
from commit.operations.errors import (
    ConflictingDataFiles,
    ConflictingDeleteFiles,
    DuplicateDeletionVectors,
    MissingFiles,
)
from commit.operations.manifest_filter import ManifestFilter
from commit.operations.manifest_merge import Bin, ManifestMerger, MergeSettings
from commit.operations.validation import (
    NEW_DATA_OPERATIONS,
    NEW_DELETE_OPERATIONS,
    changes,
    matching,
    new_deletes_for,
    snapshots_since,
)
from commit.snapshot_producer import Attempt, Produced, SnapshotOperation
from commit.summary import SummaryBuilder
from table.expressions import ALWAYS_TRUE, BooleanExpression
from table.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from table.metadata import Snapshot, TableMetadata

FileOrPath: TypeAlias = DataFile | str


def check_content(files: Sequence[DataFile], allowed: set[DataFileContent], role: str) -> None:
    """Refuse files of the wrong kind (a delete file among data files, ...)."""
    wrong = [f.file_path for f in files if DataFileContent(f.content) not in allowed]
    if wrong:
        kinds = sorted(c.name.lower() for c in allowed)
        raise InvalidArgument(f"{role} must be {' or '.join(kinds)} files; these are not: {wrong}")


def paths_of(files: Iterable[FileOrPath]) -> list[str]:
    return [f if isinstance(f, str) else f.location_key for f in files]


def check_specs(base: TableMetadata, files: Iterable[DataFile]) -> None:
    known = {s.spec_id for s in base.partition_specs}
    unknown = sorted({f.spec_id for f in files} - known)
    if unknown:
        raise InvalidArgument(f"table {base.location} has no partition spec {unknown} used by added files")


class NewManifests:
    """The manifests listing files a commit adds: written on first use, then reused."""

    def __init__(self, files: Sequence[DataFile], content: ManifestContent) -> None:
        self.files = tuple(files)
        self.content = content
        self.data_sequence_number: int | None = None  # explicit, else inherited
        self._written: list[ManifestFile] | None = None

    def get(self, attempt: Attempt) -> list[ManifestFile]:
        if self._written is None:
            by_spec: dict[int, list[DataFile]] = {}
            for f in self.files:
                by_spec.setdefault(f.spec_id, []).append(f)
            self._written = [
                attempt.write_manifest(spec_id, self.content, self._entries(attempt.snapshot_id, files))
                for spec_id, files in sorted(by_spec.items())
            ]
        return self._written

    def _entries(self, snapshot_id: int, files: list[DataFile]) -> list[ManifestEntry]:
        seq = self.data_sequence_number
        return [ManifestEntry(ManifestEntryStatus.ADDED, snapshot_id, seq, None, f) for f in files]


class FileChangeOperation(SnapshotOperation):
    """Adds data/delete files and removes files by path; subclasses name and validate the change."""

    #: what removing is called in errors ("delete files", "replace files", ...)
    remove_action = "remove files"

    def __init__(
        self,
        *,
        add_data: Sequence[DataFile] = (),
        add_deletes: Sequence[DataFile] = (),
        remove_data: Iterable[FileOrPath] = (),
        remove_deletes: Iterable[FileOrPath] = (),
    ) -> None:
        check_content(add_data, {DataFileContent.DATA}, "added data files")
        check_content(
            add_deletes, {DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES}, "added delete files"
        )
        self.new_data = NewManifests(add_data, ManifestContent.DATA)
        self.new_deletes = NewManifests(add_deletes, ManifestContent.DELETES)
        self.data_filter = ManifestFilter(ManifestContent.DATA, paths_of(remove_data))
        self.delete_filter = ManifestFilter(ManifestContent.DELETES, paths_of(remove_deletes))
        self._merger: ManifestMerger | None = None

    @property
    def added_data_files(self) -> tuple[DataFile, ...]:
        return self.new_data.files

    @property
    def added_delete_files(self) -> tuple[DataFile, ...]:
        return self.new_deletes.files

    def validate(self, attempt: Attempt) -> None:
        """The added files fit the table; every file to remove is still live."""
        check_specs(attempt.base, (*self.added_data_files, *self.added_delete_files))
        parent = attempt.parent_manifests()
        missing = self.data_filter.missing(attempt, parent) | self.delete_filter.missing(attempt, parent)
        if missing:
            raise MissingFiles(self.remove_action, missing)
        self._check_one_vector_per_file(attempt)

    def _check_one_vector_per_file(self, attempt: Attempt) -> None:
        """v3: each added DV's data file keeps no other live DV than those this commit removes."""
        targets = {
            f.referenced_data_file for f in self.added_delete_files if f.is_deletion_vector and f.referenced_data_file
        }
        if not targets:
            return
        live = live_vectors(attempt, targets)
        removed = self.delete_filter.paths
        clashing = {path: dv.file_path for path, dv in live.items() if dv.location_key not in removed}
        if clashing:
            raise DuplicateDeletionVectors(clashing)

    def produce(self, attempt: Attempt) -> Produced:
        parent = attempt.parent_manifests()
        data = self.data_filter.apply(attempt, [m for m in parent if m.content == ManifestContent.DATA])
        deletes = self.delete_filter.apply(attempt, [m for m in parent if m.content == ManifestContent.DELETES])
        manifests = [*self.new_data.get(attempt), *data, *self.new_deletes.get(attempt), *deletes]
        return Produced(self._merge(attempt, manifests), self._summary(attempt).build())

    def removed_entries(self, attempt: Attempt) -> list[ManifestEntry]:
        """The live entries (in the parent) of every file this operation removes."""
        parent = attempt.parent_manifests()
        found = {**self.data_filter.locate(attempt, parent), **self.delete_filter.locate(attempt, parent)}
        return list(found.values())

    def _merge(self, attempt: Attempt, manifests: list[ManifestFile]) -> list[ManifestFile]:
        if self._merger is None:
            settings = MergeSettings.from_properties(attempt.base.properties)
            self._merger = ManifestMerger(settings, attempt.snapshot_id)

        def write(b: Bin, entries: Iterator[ManifestEntry]) -> ManifestFile:
            return attempt.write_manifest(b.spec_id, b.content, entries)

        return self._merger.merge(manifests, attempt.read_entries, write)

    def _summary(self, attempt: Attempt) -> SummaryBuilder:
        builder = SummaryBuilder.for_table(attempt.base)
        for f in (*self.added_data_files, *self.added_delete_files):
            builder.added_file(f)
        for entry in self.removed_entries(attempt):
            builder.deleted_file(entry.data_file)
        return builder


def live_vectors(attempt: Attempt, data_paths: Iterable[str]) -> dict[str, DataFile]:
    """Data file -> its live deletion vector in the parent, for each of ``data_paths`` that has one."""
    wanted = set(data_paths)
    found: dict[str, DataFile] = {}
    for manifest in attempt.parent_manifests():
        if (
            manifest.content != ManifestContent.DELETES
            or manifest.added_files_count + manifest.existing_files_count == 0
        ):
            continue
        for entry in attempt.read_entries(manifest):
            f = entry.data_file
            if (
                entry.status != ManifestEntryStatus.DELETED
                and f.is_deletion_vector
                and f.referenced_data_file in wanted
            ):
                found[f.referenced_data_file] = f
    return found


class ConflictChecks:
    """Optional checks against what other writers committed since a starting snapshot.

    Without :meth:`validate_from_snapshot`, the checks look at the branch's
    whole history (conservative, as in Java).
    """

    starting_snapshot_id: int | None = None
    conflicting_data_filter: BooleanExpression | None = None
    conflicting_delete_filter: BooleanExpression | None = None

    def validate_from_snapshot(self, snapshot_id: int) -> Self:
        """Check only what was committed after ``snapshot_id`` (the snapshot the writer read)."""
        self.starting_snapshot_id = snapshot_id
        return self

    def validate_no_conflicting_data_files(self, row_filter: BooleanExpression = ALWAYS_TRUE) -> Self:
        """Fail if data files that may hold rows matching ``row_filter`` were added since the start."""
        self.conflicting_data_filter = row_filter
        return self

    def validate_no_conflicting_delete_files(self, row_filter: BooleanExpression = ALWAYS_TRUE) -> Self:
        """Fail if delete files that may delete rows matching ``row_filter`` were added since the start."""
        self.conflicting_delete_filter = row_filter
        return self

    def history(self, attempt: Attempt) -> list[Snapshot]:
        return snapshots_since(attempt.base, attempt.parent, self.starting_snapshot_id)

    def check_conflicts(self, attempt: Attempt, removed: Sequence[ManifestEntry] = ()) -> None:
        """Run the checks that were asked for; ``removed`` are entries of data files being removed,
        which must not have gained deletes since the start either."""
        if self.conflicting_data_filter is None and self.conflicting_delete_filter is None:
            return
        history = self.history(attempt)
        io, base = attempt.io, attempt.base
        if self.conflicting_data_filter is not None:
            added = changes(io, history, ManifestContent.DATA, ManifestEntryStatus.ADDED, NEW_DATA_OPERATIONS)
            found = matching(added, base, self.conflicting_data_filter)
            if found:
                raise ConflictingDataFiles(found, str(self.conflicting_data_filter))
        if self.conflicting_delete_filter is not None:
            added = changes(io, history, ManifestContent.DELETES, ManifestEntryStatus.ADDED, NEW_DELETE_OPERATIONS)
            found = matching(added, base, self.conflicting_delete_filter)
            for applying in new_deletes_for(io, base, history, removed).values():
                found.update({c.path: c.snapshot.snapshot_id for c in applying})
            if found:
                raise ConflictingDeleteFiles(found, str(self.conflicting_delete_filter))
