"""Add data files and row-level deletes in one commit (upserts, merge-on-read deletes).

Iceberg Java's ``RowDelta``. Its own validation: every data file that a new
position delete points at must still be in the table, or the deleted rows
would come back when that file is rewritten (a compaction moved them) or
the delete would silently apply to nothing. The files pointed at are taken
from each position delete file's ``file_path`` bounds when lower equals upper
(the file deletes rows of one data file), plus any ``referenced_data_files``
the writer names. Data files added by the same commit are exempt: an upsert
may delete rows it writes.

With :meth:`validate_from_snapshot` only the removals committed since that
snapshot are read; without it, the referenced files are looked up among the
parent's live files. The conflict filters of
:class:`~commit.operations.base.ConflictChecks` are optional.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from commit.operations.base import ConflictChecks, FileChangeOperation
from commit.operations.errors import MissingReferencedDataFiles
from commit.operations.manifest_filter import ManifestFilter
from commit.operations.validation import removed_data_files
from commit.snapshot_producer import Attempt
from table.deletes.index import referenced_data_file
from table.manifest import DataFile, DataFileContent, ManifestContent


class RowDelta(FileChangeOperation, ConflictChecks):
    """Adds ``data_files`` and ``delete_files`` (position and equality deletes)."""

    def __init__(
        self,
        data_files: Sequence[DataFile] = (),
        delete_files: Sequence[DataFile] = (),
        *,
        referenced_data_files: Iterable[str] = (),
        removed_delete_files: Sequence[DataFile] = (),
    ) -> None:
        super().__init__(add_data=data_files, add_deletes=delete_files, remove_deletes=removed_delete_files)
        added = {f.file_path for f in data_files}
        self.referenced_data_files = frozenset(_referenced(delete_files, referenced_data_files)) - added
        self._referenced = ManifestFilter(ManifestContent.DATA, self.referenced_data_files)

    @property
    def operation(self) -> str:  # type: ignore[override]  # a property where the base has a class attribute
        """``append`` for data only, ``delete`` for deletes only, else ``overwrite`` (as Java)."""
        if not self.added_delete_files:
            return "append"
        return "delete" if not self.added_data_files else "overwrite"

    def validate(self, attempt: Attempt) -> None:
        super().validate(attempt)
        self._check_referenced_files(attempt)
        self.check_conflicts(attempt)

    def _check_referenced_files(self, attempt: Attempt) -> None:
        if not self.referenced_data_files:
            return
        if self.starting_snapshot_id is None:
            gone = self._referenced.missing(attempt, attempt.parent_manifests())
            removed_by = dict.fromkeys(gone, -1)
        else:
            removed_by = removed_data_files(attempt.io, self.history(attempt), self.referenced_data_files)
        if removed_by:
            raise MissingReferencedDataFiles(removed_by)


def _referenced(delete_files: Sequence[DataFile], explicit: Iterable[str]) -> set[str]:
    paths = set(explicit)
    for f in delete_files:
        if f.content == DataFileContent.POSITION_DELETES:
            path = referenced_data_file(f)
            if path is not None:
                paths.add(path)
    return paths
