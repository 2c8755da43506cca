"""Snapshot summaries with Iceberg Java's keys (``SnapshotSummary``).

A summary says what one commit changed (``added-*``, ``deleted-*``,
``removed-*``, ``changed-partition-count``) and what the table holds after
it (``total-*``). Engines and operators read these keys by name, so they are
Iceberg's exactly; counters that are zero are left out, as Java does.

Totals are carried from the parent snapshot's summary: ``total = parent
total + added - removed``. A total the parent lacks (or that is malformed, or
that would go negative) is left out rather than guessed, so one bad summary
never poisons the chain with wrong numbers; a table's first snapshot starts
from zero. Pure logic: no file is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from commit.errors import commit_property
from table import properties as props
from table.manifest import DataFile, DataFileContent
from table.metadata import TableMetadata
from table.partitioning import PartitionSpec
from table.schema import Schema

OPERATION = "operation"
ADDED_DATA_FILES = "added-data-files"
DELETED_DATA_FILES = "deleted-data-files"
ADDED_DELETE_FILES = "added-delete-files"
ADDED_EQUALITY_DELETE_FILES = "added-equality-delete-files"
ADDED_POSITION_DELETE_FILES = "added-position-delete-files"
REMOVED_DELETE_FILES = "removed-delete-files"
REMOVED_EQUALITY_DELETE_FILES = "removed-equality-delete-files"
REMOVED_POSITION_DELETE_FILES = "removed-position-delete-files"
ADDED_RECORDS = "added-records"
DELETED_RECORDS = "deleted-records"
ADDED_FILES_SIZE = "added-files-size"
REMOVED_FILES_SIZE = "removed-files-size"
ADDED_POSITION_DELETES = "added-position-deletes"
REMOVED_POSITION_DELETES = "removed-position-deletes"
ADDED_EQUALITY_DELETES = "added-equality-deletes"
REMOVED_EQUALITY_DELETES = "removed-equality-deletes"
CHANGED_PARTITION_COUNT = "changed-partition-count"
CHANGED_PARTITION_PREFIX = "partitions."
PARTITION_SUMMARIES_INCLUDED = "partition-summaries-included"
TOTAL_RECORDS = "total-records"
TOTAL_FILES_SIZE = "total-files-size"
TOTAL_DATA_FILES = "total-data-files"
TOTAL_DELETE_FILES = "total-delete-files"
TOTAL_POSITION_DELETES = "total-position-deletes"
TOTAL_EQUALITY_DELETES = "total-equality-deletes"

# (total, added, removed): how each total moves with one commit.
TOTALS = (
    (TOTAL_RECORDS, ADDED_RECORDS, DELETED_RECORDS),
    (TOTAL_FILES_SIZE, ADDED_FILES_SIZE, REMOVED_FILES_SIZE),
    (TOTAL_DATA_FILES, ADDED_DATA_FILES, DELETED_DATA_FILES),
    (TOTAL_DELETE_FILES, ADDED_DELETE_FILES, REMOVED_DELETE_FILES),
    (TOTAL_POSITION_DELETES, ADDED_POSITION_DELETES, REMOVED_POSITION_DELETES),
    (TOTAL_EQUALITY_DELETES, ADDED_EQUALITY_DELETES, REMOVED_EQUALITY_DELETES),
)


@dataclass
class ChangeCounts:
    """Files, rows and bytes added and removed, in Java's order of keys."""

    added_data_files: int = 0
    deleted_data_files: int = 0
    added_equality_delete_files: int = 0
    removed_equality_delete_files: int = 0
    added_position_delete_files: int = 0
    removed_position_delete_files: int = 0
    added_delete_files: int = 0
    removed_delete_files: int = 0
    added_records: int = 0
    deleted_records: int = 0
    added_files_size: int = 0
    removed_files_size: int = 0
    added_position_deletes: int = 0
    removed_position_deletes: int = 0
    added_equality_deletes: int = 0
    removed_equality_deletes: int = 0

    def added(self, f: DataFile) -> None:
        self.added_files_size += f.file_size_in_bytes
        content = DataFileContent(f.content)
        if content == DataFileContent.DATA:
            self.added_data_files += 1
            self.added_records += f.record_count
        elif content == DataFileContent.POSITION_DELETES:
            self.added_delete_files += 1
            self.added_position_delete_files += 1
            self.added_position_deletes += f.record_count
        else:
            self.added_delete_files += 1
            self.added_equality_delete_files += 1
            self.added_equality_deletes += f.record_count

    def removed(self, f: DataFile) -> None:
        self.removed_files_size += f.file_size_in_bytes
        content = DataFileContent(f.content)
        if content == DataFileContent.DATA:
            self.deleted_data_files += 1
            self.deleted_records += f.record_count
        elif content == DataFileContent.POSITION_DELETES:
            self.removed_delete_files += 1
            self.removed_position_delete_files += 1
            self.removed_position_deletes += f.record_count
        else:
            self.removed_delete_files += 1
            self.removed_equality_delete_files += 1
            self.removed_equality_deletes += f.record_count

    def to_summary(self) -> dict[str, str]:
        """The non-zero counters under their Iceberg keys."""
        return {f.name.replace("_", "-"): str(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) > 0}


@dataclass
class SummaryBuilder:
    """Accumulates one commit's changes; :meth:`build` gives its summary (without totals).

    ``specs`` and ``schema`` name changed partitions the way Java does
    (``PartitionSpec.partitionToPath``); ``partition_limit`` is the table's
    ``write.summary.partition-limit``: per-partition summaries are written
    only when at most that many partitions changed (default 0: never).
    """

    specs: Mapping[int, PartitionSpec]
    schema: Schema
    partition_limit: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    counts: ChangeCounts = field(default_factory=ChangeCounts)
    partitions: dict[str, ChangeCounts] = field(default_factory=dict)

    @classmethod
    def for_table(cls, metadata: TableMetadata) -> SummaryBuilder:
        """A builder for a commit to the table ``metadata`` describes."""
        return cls(
            {s.spec_id: s for s in metadata.partition_specs},
            metadata.schema(),
            commit_property(props.SUMMARY_PARTITION_LIMIT, metadata.properties),
        )

    def added_file(self, f: DataFile) -> None:
        self.counts.added(f)
        self._partition(f).added(f)

    def deleted_file(self, f: DataFile) -> None:
        self.counts.removed(f)
        self._partition(f).removed(f)

    def set(self, key: str, value: str) -> None:
        """An extra summary property (e.g. an engine's id); counters win over it."""
        self.properties[key] = value

    def _partition(self, f: DataFile) -> ChangeCounts:
        spec = self.specs[f.spec_id]
        key = spec.partition_path(f.partition, self.schema) if spec.fields else ""
        return self.partitions.setdefault(key, ChangeCounts())

    def build(self) -> dict[str, str]:
        summary = dict(self.properties)
        summary.update(self.counts.to_summary())
        summary[CHANGED_PARTITION_COUNT] = str(len(self.partitions))
        named = {k: v for k, v in self.partitions.items() if k}
        if named and len(self.partitions) <= self.partition_limit:
            summary[PARTITION_SUMMARIES_INCLUDED] = "true"
            for key, counts in named.items():
                text = ",".join(f"{k}={v}" for k, v in counts.to_summary().items())
                summary[CHANGED_PARTITION_PREFIX + key] = text
        return summary


def with_totals(summary: Mapping[str, str], parent_summary: Mapping[str, str] | None) -> dict[str, str]:
    """``summary`` plus the ``total-*`` keys carried from the parent's summary.

    ``parent_summary`` is None for a table's first snapshot (totals start at
    zero); a parent without a total gives no total.
    """
    previous = {total: "0" for total, _, _ in TOTALS} if parent_summary is None else parent_summary
    result = dict(summary)
    for total_key, added_key, removed_key in TOTALS:
        total = _carried_total(previous.get(total_key), summary.get(added_key), summary.get(removed_key))
        if total is None:
            result.pop(total_key, None)
        else:
            result[total_key] = str(total)
    return result


def _carried_total(previous: str | None, added: str | None, removed: str | None) -> int | None:
    try:
        if previous is None:
            return None
        total = int(previous) + int(added or 0) - int(removed or 0)
    except ValueError:
        return None
    return total if total >= 0 and int(previous) >= 0 else None
