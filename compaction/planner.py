"""Which data files to rewrite, and in which groups (pure logic).

The planner follows Iceberg Java's bin-pack planner
(``BinPackRewriteFilePlanner`` over ``SizeBasedFileRewritePlanner``):

1. a data file is a *candidate* when it is outside the size range, has too
   many delete files or too high a share of deleted rows;
2. the candidates of each partition are bin-packed into file groups of at most
   ``max-file-group-size-bytes``;
3. a group is kept only when rewriting it pays off (enough files, enough or
   too much content, or a file with too many deletes);
4. groups are ordered by ``rewrite-job-order`` and, for partial progress,
   split into commit batches.

One deliberate difference: Java lumps all files of older partition specs
into one unpartitioned group; Floe groups them by their own spec and
partition, so that a rewrite of old data stays as local as its files were.
Every group is written in the plan's ``output_spec_id``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Generic, TypeVar

from compaction.options import (
    MAX_FILE_SIZE_DEFAULT_RATIO,
    MIN_FILE_SIZE_DEFAULT_RATIO,
    RewriteJobOrder,
    RewriteOptions,
)
from table import properties
from table.deletes.index import referenced_data_file
from table.errors import NotFoundError, ValidationError
from table.manifest import DataFile, DataFileContent
from table.metadata import TableMetadata
from table.partitioning import PartitionSpec, partition_key
from table.tasks import FileScanTask

PACKING_LOOKBACK = 1
"""Open bins considered per file; Java's rewrite planner uses 1."""


class FileReason(str, Enum):
    """Why a data file is a candidate for rewriting."""

    TOO_SMALL = "too-small"
    TOO_LARGE = "too-large"
    TOO_MANY_DELETES = "too-many-deletes"
    HIGH_DELETE_RATIO = "high-delete-ratio"
    EQUALITY_DELETES = "equality-deletes"


class GroupReason(str, Enum):
    """Why a file group is worth rewriting (the first rule that holds, in Java's order)."""

    REWRITE_ALL = "rewrite-all"
    ENOUGH_INPUT_FILES = "enough-input-files"
    ENOUGH_CONTENT = "enough-content"
    TOO_MUCH_CONTENT = "too-much-content"
    TOO_MANY_DELETES = "too-many-deletes"
    HIGH_DELETE_RATIO = "high-delete-ratio"
    EQUALITY_DELETES = "equality-deletes"


# --------------------------------------------------------------------------
# Plan values
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FileGroup:
    """Data files of one spec and partition that are rewritten (and committed) together."""

    partition: tuple[Any, ...]
    spec_id: int
    tasks: tuple[FileScanTask, ...]
    total_bytes: int
    expected_output_files: int
    reason: GroupReason

    @property
    def data_files(self) -> list[DataFile]:
        return [t.data_file for t in self.tasks]

    @property
    def delete_files(self) -> list[DataFile]:
        """The distinct delete files applied to the group's data files, by path."""
        unique: dict[str, DataFile] = {}
        for task in self.tasks:
            for delete_file in task.delete_files:
                unique.setdefault(delete_file.file_path, delete_file)
        return list(unique.values())


@dataclass(frozen=True)
class RewritePlan:
    """The file groups to rewrite, in job order, and the spec new files are written in."""

    groups: tuple[FileGroup, ...]
    output_spec_id: int

    @property
    def total_bytes(self) -> int:
        return sum(g.total_bytes for g in self.groups)

    @property
    def total_files(self) -> int:
        return sum(len(g.tasks) for g in self.groups)

    def groups_for_commit(self, max_commits: int) -> list[tuple[FileGroup, ...]]:
        """The groups in job order, in at most ``max_commits`` commit batches."""
        return split_for_commits(self.groups, max_commits)


_G = TypeVar("_G")


def split_for_commits(groups: Sequence[_G], max_commits: int) -> list[tuple[_G, ...]]:
    """Consecutive batches of ``ceil(len / max_commits)`` groups, as Java's
    partial-progress commit service sizes them: at most ``max_commits``
    batches, all full but the last."""
    if max_commits <= 0:
        raise ValidationError(f"max_commits must be > 0, got {max_commits}")
    if not groups:
        return []
    per_commit = math.ceil(len(groups) / max_commits)
    return [tuple(groups[i : i + per_commit]) for i in range(0, len(groups), per_commit)]


# --------------------------------------------------------------------------
# Candidate files
# --------------------------------------------------------------------------


def deleted_rows_estimate(task: FileScanTask) -> int:
    """Rows known to be deleted from the task's data file, at most its row count.

    Only position delete files scoped to this one file count (their record
    count is the number of its deleted positions), as in Java's
    ``tooHighDeleteRatio``; partition-wide and equality deletes may delete
    anything from nothing to every row, so they are not estimated.
    """
    path = task.data_file.file_path
    known = sum(
        d.record_count
        for d in task.delete_files
        if d.content == DataFileContent.POSITION_DELETES and referenced_data_file(d) == path
    )
    return min(known, task.data_file.record_count)


def too_many_deletes(task: FileScanTask, options: RewriteOptions) -> bool:
    return len(task.delete_files) >= options.delete_file_threshold


def equality_deleted(task: FileScanTask, options: RewriteOptions) -> bool:
    """Under the position delete strategy a file with equality deletes is rewritten: they are
    what pyiceberg and DuckDB cannot read, and the left-overs of a table switched from equality."""
    return options.remove_equality_deletes and any(
        d.content == DataFileContent.EQUALITY_DELETES for d in task.delete_files
    )


def too_high_delete_ratio(task: FileScanTask, options: RewriteOptions) -> bool:
    """Java divides by the row count; an empty file (0/0) never qualifies."""
    records = task.data_file.record_count
    if not task.delete_files or records <= 0:
        return False
    return deleted_rows_estimate(task) / records >= options.delete_ratio_threshold


def file_reasons(task: FileScanTask, options: RewriteOptions) -> frozenset[FileReason]:
    """Every reason the task's data file should be rewritten; empty when none."""
    size = task.data_file.file_size_in_bytes
    checks = {
        FileReason.TOO_SMALL: size < options.min_file_size_bytes,
        FileReason.TOO_LARGE: size > options.max_file_size_bytes,
        FileReason.TOO_MANY_DELETES: too_many_deletes(task, options),
        FileReason.HIGH_DELETE_RATIO: too_high_delete_ratio(task, options),
        FileReason.EQUALITY_DELETES: equality_deleted(task, options),
    }
    return frozenset(reason for reason, holds in checks.items() if holds)


def is_candidate(task: FileScanTask, options: RewriteOptions) -> bool:
    return bool(file_reasons(task, options))


# --------------------------------------------------------------------------
# Groups worth rewriting
# --------------------------------------------------------------------------


def group_reason(tasks: Sequence[FileScanTask], options: RewriteOptions) -> GroupReason | None:
    """Why a packed group should be rewritten, or None when it should not.

    The rules are Java's: a group of one file is only rewritten when that file
    must be split or has too many deletes, since rewriting it alone to the
    same size gains nothing.
    """
    count, size = len(tasks), _size(tasks)
    rules = (
        (GroupReason.ENOUGH_INPUT_FILES, count > 1 and count >= options.min_input_files),
        (GroupReason.ENOUGH_CONTENT, count > 1 and size > options.target_file_size_bytes),
        (GroupReason.TOO_MUCH_CONTENT, size > options.max_file_size_bytes),
        (GroupReason.TOO_MANY_DELETES, any(too_many_deletes(t, options) for t in tasks)),
        (GroupReason.HIGH_DELETE_RATIO, any(too_high_delete_ratio(t, options) for t in tasks)),
        (GroupReason.EQUALITY_DELETES, any(equality_deleted(t, options) for t in tasks)),
    )
    return next((reason for reason, holds in rules if holds), None)


def expected_output_files(
    total_bytes: int,
    target: int,
    min_file_size: int | None = None,
    max_file_size: int | None = None,
) -> int:
    """How many files of about ``target`` bytes a group of ``total_bytes`` becomes.

    As Java's ``expectedOutputFiles``: the remainder past the last full file
    gets its own file when it is above ``min_file_size``, or when spreading it
    over the other files would make them 10% or more over the target (or over
    the size at which writers roll); otherwise it is spread. The bounds
    default to Java's ratios of the target.
    """
    if target <= 0:
        raise ValidationError(f"target file size must be > 0, got {target}")
    low = int(target * MIN_FILE_SIZE_DEFAULT_RATIO) if min_file_size is None else min_file_size
    high = int(target * MAX_FILE_SIZE_DEFAULT_RATIO) if max_file_size is None else max_file_size
    if total_bytes < target:
        return 1
    with_remainder = -(-total_bytes // target)
    without_remainder = total_bytes // target
    if total_bytes % target > low:
        return with_remainder
    write_max = int(target + (high - target) * 0.5)
    if total_bytes // without_remainder < min(1.1 * target, float(write_max)):
        return without_remainder
    return with_remainder


# --------------------------------------------------------------------------
# Bin packing
# --------------------------------------------------------------------------

_T = TypeVar("_T")


def first_fit_decreasing(
    items: Iterable[_T], weight: Callable[[_T], int], capacity: int, lookback: int = PACKING_LOOKBACK
) -> list[list[_T]]:
    """Pack items, heaviest first, into bins of at most ``capacity``.

    Each item goes into the first of the ``lookback`` most recent open bins
    where it fits, else into a new bin; opening a bin beyond ``lookback``
    closes the oldest (Java's ``BinPacking.ListPacker``, which Java feeds in
    scan order; feeding it heaviest first leaves the small files together in
    the last groups, where the min-input-files rule can take them). An item
    heavier than ``capacity`` gets a bin of its own. Ties keep input order.
    """
    if lookback < 1:
        raise ValidationError(f"bin packing lookback must be >= 1, got {lookback}")
    weighed = sorted(((weight(item), item) for item in items), key=lambda pair: -pair[0])
    closed: list[_Bin[_T]] = []
    open_bins: list[_Bin[_T]] = []
    for w, item in weighed:
        chosen = next((b for b in open_bins if b.weight + w <= capacity), None)
        if chosen is None:
            chosen = _Bin()
            open_bins.append(chosen)
            if len(open_bins) > lookback:
                closed.append(open_bins.pop(0))
        chosen.add(item, w)
    return [b.items for b in closed + open_bins]


class _Bin(Generic[_T]):
    def __init__(self) -> None:
        self.items: list[_T] = []
        self.weight = 0

    def add(self, item: _T, weight: int) -> None:
        self.items.append(item)
        self.weight += weight


# --------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------


def plan_rewrite(
    tasks: Iterable[FileScanTask],
    specs: Mapping[int, PartitionSpec],
    output_spec_id: int,
    options: RewriteOptions,
    *,
    lookback: int = PACKING_LOOKBACK,
) -> RewritePlan:
    """The rewrite plan for a snapshot's planned scan tasks.

    ``tasks`` are the data files of the snapshot with the delete files that
    apply to them (``TableScan.plan_files``); ``specs`` the table's partition
    specs by id. Groups never mix specs or partitions.
    """
    if output_spec_id not in specs:
        raise NotFoundError(f"output partition spec {output_spec_id} is not one of the table's specs {sorted(specs)}")
    groups = [
        group
        for (spec_id, _), part in _by_partition(tasks, specs).items()
        for group in _plan_partition(spec_id, part, options, lookback)
    ]
    return RewritePlan(tuple(order_groups(groups, options.rewrite_job_order)), output_spec_id)


def plan_table_rewrite(metadata: TableMetadata, tasks: Iterable[FileScanTask], options: RewriteOptions) -> RewritePlan:
    """:func:`plan_rewrite` with the table's specs, writing in its default spec; under the
    position delete strategy, files with equality deletes are candidates too."""
    specs = {spec.spec_id: spec for spec in metadata.partition_specs}
    if _deletes_by_position(metadata):
        options = replace(options, remove_equality_deletes=True)
    return plan_rewrite(tasks, specs, metadata.default_spec_id, options)


def _deletes_by_position(metadata: TableMetadata) -> bool:
    """The table's upsert delete strategy is ``position`` (a malformed value is ingest's to refuse)."""
    try:
        return properties.UPSERT_DELETE_STRATEGY.read(metadata.properties) == "position"
    except properties.PropertyError:
        return False


def order_groups(groups: Iterable[FileGroup], order: RewriteJobOrder) -> list[FileGroup]:
    """Groups in job order; ties (and ``none``) keep planning order."""
    keys: dict[RewriteJobOrder, Callable[[FileGroup], int]] = {
        RewriteJobOrder.BYTES_ASC: lambda g: g.total_bytes,
        RewriteJobOrder.BYTES_DESC: lambda g: -g.total_bytes,
        RewriteJobOrder.FILES_ASC: lambda g: len(g.tasks),
        RewriteJobOrder.FILES_DESC: lambda g: -len(g.tasks),
    }
    key = keys.get(order)
    return list(groups) if key is None else sorted(groups, key=key)


def _plan_partition(spec_id: int, tasks: list[FileScanTask], options: RewriteOptions, lookback: int) -> list[FileGroup]:
    candidates = tasks if options.rewrite_all else [t for t in tasks if is_candidate(t, options)]
    candidates = sorted(candidates, key=lambda t: t.data_file.file_path)  # deterministic ties
    bins = first_fit_decreasing(candidates, _task_size, options.max_file_group_size_bytes, lookback)
    groups = []
    for packed in bins:
        reason = GroupReason.REWRITE_ALL if options.rewrite_all else group_reason(packed, options)
        if reason is not None:
            groups.append(_file_group(spec_id, packed, options, reason))
    return groups


def _file_group(spec_id: int, tasks: list[FileScanTask], options: RewriteOptions, reason: GroupReason) -> FileGroup:
    total = _size(tasks)
    return FileGroup(
        partition=tuple(tasks[0].data_file.partition),
        spec_id=spec_id,
        tasks=tuple(tasks),
        total_bytes=total,
        expected_output_files=expected_output_files(
            total, options.target_file_size_bytes, options.min_file_size_bytes, options.max_file_size_bytes
        ),
        reason=reason,
    )


def _by_partition(
    tasks: Iterable[FileScanTask], specs: Mapping[int, PartitionSpec]
) -> dict[tuple[int, tuple[Any, ...]], list[FileScanTask]]:
    """Tasks by (spec id, partition), partitions in order of first appearance."""
    grouped: dict[tuple[int, tuple[Any, ...]], list[FileScanTask]] = {}
    for task in tasks:
        _check_task(task, specs)
        grouped.setdefault(partition_key(task.data_file.spec_id, task.data_file.partition), []).append(task)
    return grouped


def _check_task(task: FileScanTask, specs: Mapping[int, PartitionSpec]) -> None:
    data_file = task.data_file
    if data_file.content != DataFileContent.DATA:
        kind = DataFileContent(data_file.content).name
        raise ValidationError(f"{data_file.file_path}: a rewrite task must hold a data file, not {kind}")
    spec = specs.get(data_file.spec_id)
    if spec is None:
        raise NotFoundError(f"{data_file.file_path}: no partition spec {data_file.spec_id} in the table")
    if len(data_file.partition) != len(spec.fields):
        raise ValidationError(
            f"{data_file.file_path}: partition has {len(data_file.partition)} values, "
            f"spec {spec.spec_id} has {len(spec.fields)} fields"
        )


def _task_size(task: FileScanTask) -> int:
    return task.data_file.file_size_in_bytes


def _size(tasks: Iterable[FileScanTask]) -> int:
    return sum(_task_size(t) for t in tasks)
