"""Append data files as one new manifest, carrying the parent's manifests as they are.

The cheapest commit (Iceberg Java's ``FastAppend``): nothing is read but the
parent's manifest list and nothing is rewritten, so retries cost one manifest
list. Appends never conflict; the price is one more manifest per commit
(:mod:`commit.operations.merge_append` merges them).
"""

from __future__ import annotations

from collections.abc import Sequence

from commit.operations.base import NewManifests, check_content, check_specs
from commit.snapshot_producer import Attempt, Produced, SnapshotOperation
from commit.summary import SummaryBuilder
from table.manifest import DataFile, DataFileContent, ManifestContent


class FastAppend(SnapshotOperation):
    """Adds ``files`` (data files only) in a new manifest."""

    operation = "append"

    def __init__(self, files: Sequence[DataFile]) -> None:
        check_content(files, {DataFileContent.DATA}, "appended files")
        self.new_data = NewManifests(files, ManifestContent.DATA)

    def validate(self, attempt: Attempt) -> None:
        check_specs(attempt.base, self.new_data.files)

    def produce(self, attempt: Attempt) -> Produced:
        summary = SummaryBuilder.for_table(attempt.base)
        for f in self.new_data.files:
            summary.added_file(f)
        return Produced([*self.new_data.get(attempt), *attempt.parent_manifests()], summary.build())
