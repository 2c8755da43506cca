"""Scan tasks: one data file to read and the delete files to merge into it.

Planning (:mod:`table.scan`) makes them and reading (:mod:`table.reader`),
applying deletes (:mod:`table.deletes`) and compaction consume them; this
module holds only the task, so that none of those depends on another to
name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from table.expressions import ALWAYS_TRUE, BooleanExpression
from table.manifest import DataFile, DataFileContent


@dataclass(frozen=True)
class FileScanTask:
    """One data file to read, the delete files to merge into it, and the
    filter still to apply to its rows (``residual``, bound to the scan schema)."""

    data_file: DataFile
    delete_files: list[DataFile] = field(default_factory=list)
    data_sequence_number: int = 0
    residual: BooleanExpression = ALWAYS_TRUE

    @property
    def position_deletes(self) -> list[DataFile]:
        return [f for f in self.delete_files if f.content == DataFileContent.POSITION_DELETES]

    @property
    def equality_deletes(self) -> list[DataFile]:
        return [f for f in self.delete_files if f.content == DataFileContent.EQUALITY_DELETES]
