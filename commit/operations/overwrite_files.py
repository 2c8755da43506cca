"""Replace data files with others in one logical change (copy-on-write updates, partition overwrites).

Iceberg Java's ``OverwriteFiles`` by files: the removed files must still be
live; with :meth:`~commit.operations.base.ConflictChecks.validate_from_snapshot`
and the conflict filters, the commit also fails when another writer added
matching data or delete files since the snapshot the writer read, or added
deletes to a removed file (its rows would be resurrected in the new files).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from commit.operations.base import ConflictChecks, FileChangeOperation, FileOrPath
from commit.snapshot_producer import Attempt
from table.manifest import DataFile, DataFileContent


class OverwriteFiles(FileChangeOperation, ConflictChecks):
    """Adds ``added`` data files and removes ``removed`` ones (DataFiles or paths)."""

    operation = "overwrite"
    remove_action = "overwrite files"

    def __init__(self, added: Sequence[DataFile] = (), removed: Iterable[FileOrPath] = ()) -> None:
        super().__init__(add_data=added, remove_data=removed)

    def validate(self, attempt: Attempt) -> None:
        super().validate(attempt)
        removed = [e for e in self.removed_entries(attempt) if e.data_file.content == DataFileContent.DATA]
        self.check_conflicts(attempt, removed)
