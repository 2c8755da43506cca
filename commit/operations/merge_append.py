"""Append data files, merging small manifests as the table's settings ask.

Iceberg Java's ``MergeAppend``: the same change as a fast append, but the new
manifest is bin-packed with the parent's (:mod:`commit.operations.manifest_merge`), so a
table fed by many small commits keeps few manifests.
"""

from __future__ import annotations

from collections.abc import Sequence

from commit.operations.base import FileChangeOperation
from table.manifest import DataFile


class MergeAppend(FileChangeOperation):
    """Adds ``files`` (data files only); manifests are merged."""

    operation = "append"

    def __init__(self, files: Sequence[DataFile]) -> None:
        super().__init__(add_data=files)
