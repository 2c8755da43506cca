"""Remove data (and delete) files by path: their rows leave the table.

Iceberg Java's ``DeleteFiles`` for explicit files. Every file must still be
live when the commit is applied (spec: "Delete operations must verify that
specific files to delete are still in the table"); otherwise the commit fails
with :class:`~commit.operations.errors.MissingFiles` naming them.
"""

from __future__ import annotations

from collections.abc import Iterable

from commit.operations.base import FileChangeOperation, FileOrPath


class DeleteFiles(FileChangeOperation):
    """Removes ``data_files`` and ``delete_files`` (DataFiles or paths)."""

    operation = "delete"
    remove_action = "delete files"

    def __init__(self, data_files: Iterable[FileOrPath] = (), delete_files: Iterable[FileOrPath] = ()) -> None:
        super().__init__(remove_data=data_files, remove_deletes=delete_files)
