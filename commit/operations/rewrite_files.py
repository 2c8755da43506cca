"""Replace files with new ones holding the same rows (compaction): a ``replace`` snapshot.

Iceberg Java's ``RewriteFiles``, with the validations a merge-on-read table
needs when other writers keep deleting rows while a compaction runs:

* every replaced file must still be live;
* the new data files get an explicit data sequence number: the starting
  snapshot's (the one the compactor read). Equality deletes committed since
  then have higher sequence numbers, so they still apply to the new files:
  they are not a conflict. (Without that, they are.)
* a position delete committed since then names a row by its position in a
  replaced file, which the new files do not have: that is a conflict. The
  :class:`~commit.operations.errors.RewriteConflict` carries exactly which
  positions of which replaced files were deleted, read from those delete
  files, so the compactor can translate them into position deletes against
  its new files and retry, adding them to the same commit
  (``added_delete_files``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from commit.errors import InvalidArgument
from commit.operations.base import FileChangeOperation, FileOrPath
from commit.operations.errors import ReplacedFilesTooNew, RewriteConflict
from commit.operations.validation import Change, new_deletes_for, snapshots_since
from commit.snapshot_producer import Attempt
from table.deletes.positions import deleted_positions
from table.manifest import DataFile, DataFileContent, ManifestContent, ManifestEntry
from table.metadata import Snapshot


class RewriteFiles(FileChangeOperation):
    """Replaces ``replaced_data_files`` by ``added_data_files`` (and delete files likewise).

    ``starting_snapshot_id`` is the snapshot the rewrite read. The new data
    files take ``data_sequence_number`` if given, else the starting
    snapshot's (unless ``keep_starting_sequence_number`` is False: then they
    inherit the commit's, and later equality deletes become conflicts).
    """

    operation = "replace"
    remove_action = "replace files"

    def __init__(
        self,
        replaced_data_files: Iterable[FileOrPath],
        added_data_files: Sequence[DataFile],
        *,
        starting_snapshot_id: int,
        replaced_delete_files: Iterable[FileOrPath] = (),
        added_delete_files: Sequence[DataFile] = (),
        keep_starting_sequence_number: bool = True,
        data_sequence_number: int | None = None,
    ) -> None:
        super().__init__(
            add_data=added_data_files,
            add_deletes=added_delete_files,
            remove_data=replaced_data_files,
            remove_deletes=replaced_delete_files,
        )
        if not self.data_filter.paths and not self.delete_filter.paths:
            raise InvalidArgument("a rewrite must replace at least one file")
        self.starting_snapshot_id = starting_snapshot_id
        self.keep_starting_sequence_number = keep_starting_sequence_number
        self.new_data.data_sequence_number = data_sequence_number

    def validate(self, attempt: Attempt) -> None:
        super().validate(attempt)
        history = snapshots_since(attempt.base, attempt.parent, self.starting_snapshot_id)
        start_sequence_number = attempt.base.snapshot_by_id(self.starting_snapshot_id).sequence_number
        if self.keep_starting_sequence_number and self.new_data.data_sequence_number is None:
            self.new_data.data_sequence_number = start_sequence_number  # fixed before any manifest is written
        if self.data_filter.paths:
            data_manifests = [m for m in attempt.parent_manifests() if m.content == ManifestContent.DATA]
            replaced = list(self.data_filter.locate(attempt, data_manifests).values())
            self._check_sequence_numbers(replaced)
            self._check_new_deletes(attempt, history, replaced, start_sequence_number)

    def _check_sequence_numbers(self, replaced: list[ManifestEntry]) -> None:
        """The new files must not be older than what they replace: equality deletes that came
        between would then delete their rows, though they never applied to the originals."""
        seq = self.new_data.data_sequence_number
        if seq is None:
            return
        newer = [e.data_file.file_path for e in replaced if e.sequence_number is not None and e.sequence_number > seq]
        if newer:
            raise ReplacedFilesTooNew(seq, newer)

    def _check_new_deletes(
        self, attempt: Attempt, history: list[Snapshot], replaced: list[ManifestEntry], start_sequence_number: int
    ) -> None:
        conflicts = new_deletes_for(attempt.io, attempt.base, history, replaced)
        position: dict[str, Change] = {}
        equality: dict[str, Change] = {}
        for applying in conflicts.values():
            for change in applying:
                kind = change.entry.data_file.content
                (position if kind == DataFileContent.POSITION_DELETES else equality)[change.path] = change
        if self._equality_deletes_still_apply(start_sequence_number):
            equality = {}
        if position or equality:
            files = [c.entry.data_file for c in position.values()]
            positions = deleted_positions(attempt.io, files, conflicts.keys())
            raise RewriteConflict(positions, position.keys(), equality.keys(), self.starting_snapshot_id)

    def _equality_deletes_still_apply(self, start_sequence_number: int) -> bool:
        """Deletes committed after the start have higher sequence numbers than the new files'."""
        seq = self.new_data.data_sequence_number
        return seq is not None and seq <= start_sequence_number
