"""The rewrite planner over in-memory data files: candidates, packing, groups, order."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any, Optional, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.options import RewriteJobOrder, RewriteOptions
from compaction.planner import (
    FileGroup,
    FileReason,
    GroupReason,
    deleted_rows_estimate,
    expected_output_files,
    file_reasons,
    first_fit_decreasing,
    group_reason,
    is_candidate,
    plan_rewrite,
    plan_table_rewrite,
    split_for_commits,
)
from table.conversions import to_bytes
from table.errors import NotFoundError, ValidationError
from table.manifest import DataFile, DataFileContent, FileFormat
from table.metadata import new_table_metadata
from table.partitioning import PartitionField, PartitionSpec
from table.schema import DELETE_FILE_PATH, Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.tasks import FileScanTask
from table.transforms import IdentityTransform
from table.types import LongType, NestedField, StringType

UNPARTITIONED = PartitionSpec(0, ())
BY_P = PartitionSpec(1, (PartitionField(1, 1000, IdentityTransform(), "p"),))
BY_P_AND_Q = PartitionSpec(
    2, (PartitionField(1, 1000, IdentityTransform(), "p"), PartitionField(2, 1001, IdentityTransform(), "q"))
)
SPECS = {s.spec_id: s for s in (UNPARTITIONED, BY_P, BY_P_AND_Q)}

# target 100 -> min 75, max 180, write max 140
TARGET = 100


def options(**overrides: Any) -> RewriteOptions:
    raw = {"target-file-size-bytes": str(TARGET)}
    raw.update({k.replace("_", "-"): str(v).lower() for k, v in overrides.items()})
    return RewriteOptions.parse(raw)


def data_file(path: str, size: int, records: int = 100, partition: tuple = (), spec_id: int = 0) -> DataFile:
    return DataFile(DataFileContent.DATA, path, FileFormat.PARQUET, partition, records, size, spec_id=spec_id)


def position_deletes(
    path: str, records: int, target: Optional[str] = None, partition: tuple = (), spec_id: int = 0
) -> DataFile:
    """A position delete file; scoped to ``target`` through equal file_path bounds."""
    bounds = None if target is None else {DELETE_FILE_PATH.field_id: to_bytes(StringType(), target)}
    return DataFile(
        DataFileContent.POSITION_DELETES,
        path,
        FileFormat.PARQUET,
        partition,
        records,
        10,
        lower_bounds=bounds,
        upper_bounds=bounds,
        spec_id=spec_id,
    )


def equality_deletes(path: str, records: int) -> DataFile:
    content = DataFileContent.EQUALITY_DELETES
    return DataFile(content, path, FileFormat.PARQUET, (), records, 10, equality_ids=[1])


def task(
    path: str,
    size: int,
    deletes: Sequence[DataFile] = (),
    records: int = 100,
    partition: tuple = (),
    spec_id: int = 0,
) -> FileScanTask:
    return FileScanTask(data_file(path, size, records, partition, spec_id), list(deletes), 1)


def small(n: int, size: int = 10, prefix: str = "s", **kw: Any) -> list[FileScanTask]:
    return [task(f"{prefix}{i}", size, **kw) for i in range(n)]


def planned_paths(tasks: Sequence[FileScanTask], opts: RewriteOptions) -> list[list[str]]:
    plan = plan_rewrite(tasks, SPECS, 0, opts)
    return [sorted(f.file_path for f in g.data_files) for g in plan.groups]


# --------------------------------------------------------------------------
# Candidate rules, each alone
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, reasons", [(74, {FileReason.TOO_SMALL}), (75, set()), (180, set()), (181, {FileReason.TOO_LARGE})]
)
def test_size_bounds_are_strict(size: int, reasons: set) -> None:
    assert file_reasons(task("f", size), options()) == reasons


def test_too_many_deletes_counts_every_delete_file() -> None:
    opts = options(delete_file_threshold=2)
    two = [equality_deletes("e1", 1), position_deletes("p1", 1)]  # neither counts toward the ratio
    assert file_reasons(task("f", 100, two), opts) == {FileReason.TOO_MANY_DELETES}
    assert file_reasons(task("f", 100, two[:1]), opts) == set()


def test_delete_file_threshold_is_off_by_default() -> None:
    deletes = [equality_deletes(f"e{i}", 1) for i in range(50)]
    assert not is_candidate(task("f", 100, deletes), options())


def test_delete_ratio_counts_file_scoped_position_deletes_only() -> None:
    opts = options()  # ratio 0.3
    thirty, twenty_nine = position_deletes("d", 30, target="f"), position_deletes("d", 29, target="f")
    assert file_reasons(task("f", 100, [thirty]), opts) == {FileReason.HIGH_DELETE_RATIO}
    assert file_reasons(task("f", 100, [twenty_nine]), opts) == set()
    unscoped = [
        position_deletes("d", 100),  # partition-scoped
        equality_deletes("e", 100),
        position_deletes("o", 100, target="other"),
    ]
    assert file_reasons(task("f", 100, unscoped), opts) == set()


def test_deleted_rows_are_summed_and_capped_at_the_row_count() -> None:
    deletes = [position_deletes("d1", 20, target="f"), position_deletes("d2", 15, target="f")]
    assert deleted_rows_estimate(task("f", 100, deletes, records=100)) == 35
    assert deleted_rows_estimate(task("f", 100, deletes, records=30)) == 30


def test_empty_data_file_has_no_delete_ratio() -> None:
    t = task("f", 100, [position_deletes("d", 5, target="f")], records=0)
    assert FileReason.HIGH_DELETE_RATIO not in file_reasons(t, options())


def test_delete_ratio_threshold_is_configurable() -> None:
    t = task("f", 100, [position_deletes("d", 10, target="f")])
    assert not is_candidate(t, options())
    assert file_reasons(t, options(delete_ratio_threshold=0.1)) == {FileReason.HIGH_DELETE_RATIO}


# --------------------------------------------------------------------------
# Which groups are rewritten
# --------------------------------------------------------------------------


def test_well_sized_files_are_never_rewritten() -> None:
    tasks = [task(f"f{i}", 75 + i) for i in range(50)]
    assert plan_rewrite(tasks, SPECS, 0, options()).groups == ()


def test_min_input_files() -> None:
    assert planned_paths(small(4), options()) == []
    assert planned_paths(small(5), options()) == [[f"s{i}" for i in range(5)]]
    assert planned_paths(small(3), options(min_input_files=3)) == [["s0", "s1", "s2"]]


def test_a_lone_small_file_is_not_rewritten_even_with_min_input_files_one() -> None:
    assert planned_paths(small(1), options(min_input_files=1)) == []


def test_enough_content() -> None:
    tasks = [task("a", 60), task("b", 60)]
    assert group_reason(tasks, options()) is GroupReason.ENOUGH_CONTENT
    assert planned_paths(tasks, options()) == [["a", "b"]]
    assert planned_paths([task("a", 50), task("b", 50)], options()) == []  # 100 is not > target


def test_too_much_content_rewrites_a_lone_large_file() -> None:
    plan = plan_rewrite([task("big", 400)], SPECS, 0, options())
    (group,) = plan.groups
    assert group.reason is GroupReason.TOO_MUCH_CONTENT
    assert group.expected_output_files == 4


def test_a_lone_file_with_too_many_deletes_is_rewritten() -> None:
    t = task("f", 100, [equality_deletes("e1", 1), equality_deletes("e2", 1)])
    (group,) = plan_rewrite([t], SPECS, 0, options(delete_file_threshold=2)).groups
    assert group.reason is GroupReason.TOO_MANY_DELETES
    assert [d.file_path for d in group.delete_files] == ["e1", "e2"]


def test_a_lone_file_with_a_high_delete_ratio_is_rewritten() -> None:
    t = task("f", 100, [position_deletes("d", 50, target="f")])
    (group,) = plan_rewrite([t], SPECS, 0, options()).groups
    assert group.reason is GroupReason.HIGH_DELETE_RATIO


def test_rewrite_all_takes_every_file_and_every_group() -> None:
    tasks = [task("ok1", 100), task("ok2", 120)]
    plan = plan_rewrite(tasks, SPECS, 0, options(rewrite_all=True, max_file_group_size_bytes=150))
    assert sorted(sorted(f.file_path for f in g.data_files) for g in plan.groups) == [["ok1"], ["ok2"]]
    assert {g.reason for g in plan.groups} == {GroupReason.REWRITE_ALL}


def test_group_totals_and_expected_output_files() -> None:
    (group,) = plan_rewrite(small(7, size=30), SPECS, 0, options()).groups
    assert group.total_bytes == 210
    assert group.expected_output_files == expected_output_files(210, TARGET) == 2


def test_delete_files_shared_by_data_files_are_listed_once() -> None:
    shared = equality_deletes("e", 1)
    (group,) = plan_rewrite(small(5, deletes=[shared]), SPECS, 0, options()).groups
    assert [d.file_path for d in group.delete_files] == ["e"]


# --------------------------------------------------------------------------
# Partitions and specs
# --------------------------------------------------------------------------


def test_groups_never_mix_partitions() -> None:
    tasks = small(5, prefix="a", partition=(1,), spec_id=1) + small(3, prefix="b", partition=(2,), spec_id=1)
    plan = plan_rewrite(tasks, SPECS, 1, options())
    assert [(g.spec_id, g.partition, len(g.tasks)) for g in plan.groups] == [(1, (1,), 5)]


def test_groups_never_mix_specs_even_with_equal_partition_values() -> None:
    old = small(5, prefix="old", partition=(1,), spec_id=1)
    new = small(5, prefix="new", partition=(1, "x"), spec_id=2)
    unpartitioned = small(5, prefix="u")
    plan = plan_rewrite(old + new + unpartitioned, SPECS, 2, options())
    assert plan.output_spec_id == 2
    assert sorted((g.spec_id, g.partition) for g in plan.groups) == [(0, ()), (1, (1,)), (2, (1, "x"))]
    for g in plan.groups:
        assert {t.data_file.spec_id for t in g.tasks} == {g.spec_id}


def test_nan_partition_values_form_one_partition() -> None:
    tasks = [task(f"n{i}", 10, partition=(float("nan"),), spec_id=1) for i in range(5)]
    plan = plan_rewrite(tasks, SPECS, 1, options())
    assert len(plan.groups) == 1 and len(plan.groups[0].tasks) == 5


def test_plan_table_rewrite_writes_in_the_default_spec() -> None:
    schema = Schema(NestedField(1, "p", LongType(), required=True))
    md = new_table_metadata(schema, BY_P, UNSORTED_SORT_ORDER, "/tmp/t")
    plan = plan_table_rewrite(md, small(5, partition=(3,), spec_id=md.default_spec_id), options())
    assert plan.output_spec_id == md.default_spec_id
    assert len(plan.groups) == 1


def test_unknown_spec_is_an_error() -> None:
    with pytest.raises(NotFoundError, match="spec 9"):
        plan_rewrite([task("f", 1, spec_id=9)], SPECS, 0, options())
    with pytest.raises(NotFoundError, match="output partition spec 9"):
        plan_rewrite([], SPECS, 9, options())


def test_partition_arity_must_match_the_spec() -> None:
    with pytest.raises(ValidationError, match="f: partition has 0 values"):
        plan_rewrite([task("f", 1, spec_id=1)], SPECS, 1, options())


def test_delete_files_are_not_rewrite_tasks() -> None:
    bad = FileScanTask(position_deletes("d", 1), [], 1)
    with pytest.raises(ValidationError, match="d: a rewrite task must hold a data file"):
        plan_rewrite([bad], SPECS, 0, options())


# --------------------------------------------------------------------------
# Bin packing
# --------------------------------------------------------------------------


def identity(x: int) -> int:
    return x


def test_packing_is_first_fit_decreasing_over_the_lookback() -> None:
    assert first_fit_decreasing([30, 60, 40, 50], identity, 100, lookback=1) == [[60], [50, 40], [30]]
    assert first_fit_decreasing([30, 60, 40, 50], identity, 100, lookback=2) == [[60, 40], [50, 30]]


def test_an_item_over_capacity_gets_its_own_bin() -> None:
    assert first_fit_decreasing([10, 500, 20], identity, 100, lookback=3) == [[500], [20, 10]]


def test_lookback_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="lookback"):
        first_fit_decreasing([1], identity, 10, lookback=0)


def test_packing_splits_a_partition_larger_than_the_group_limit() -> None:
    opts = options(max_file_group_size_bytes=100, min_input_files=3)
    plan = plan_rewrite(small(10, size=30), SPECS, 0, opts)
    assert [len(g.tasks) for g in plan.groups] == [3, 3, 3]  # the tenth file alone is not worth it
    assert all(g.total_bytes <= 100 for g in plan.groups)


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.integers(min_value=0, max_value=300), max_size=40),
    capacity=st.integers(min_value=1, max_value=400),
    lookback=st.integers(min_value=1, max_value=5),
)
def test_packing_keeps_every_item_once_and_respects_capacity(
    weights: list[int], capacity: int, lookback: int
) -> None:
    items = list(enumerate(weights))
    bins = first_fit_decreasing(items, lambda item: item[1], capacity, lookback)
    assert sorted(item for b in bins for item in b) == sorted(items)
    assert all(b for b in bins)
    for b in bins:
        assert len(b) == 1 or sum(w for _, w in b) <= capacity


# --------------------------------------------------------------------------
# Job order and commit batches
# --------------------------------------------------------------------------


def three_partitions() -> list[FileScanTask]:
    """Partition 1: 5 x 10 bytes; partition 2: 8 x 10; partition 3: 6 x 30."""
    return (
        small(5, prefix="a", partition=(1,), spec_id=1)
        + small(8, prefix="b", partition=(2,), spec_id=1)
        + small(6, size=30, prefix="c", partition=(3,), spec_id=1)
    )


@pytest.mark.parametrize(
    "order, partitions",
    [
        ("none", [1, 2, 3]),
        ("bytes-asc", [1, 2, 3]),
        ("bytes-desc", [3, 2, 1]),
        ("files-asc", [1, 3, 2]),
        ("files-desc", [2, 3, 1]),
    ],
)
def test_job_order(order: str, partitions: list[int]) -> None:
    plan = plan_rewrite(three_partitions(), SPECS, 1, options(rewrite_job_order=order))
    assert [g.partition[0] for g in plan.groups] == partitions


def test_groups_for_commit_spreads_groups_over_at_most_max_commits() -> None:
    plan = plan_rewrite(three_partitions(), SPECS, 1, options())
    assert [len(b) for b in plan.groups_for_commit(2)] == [2, 1]
    assert [len(b) for b in plan.groups_for_commit(10)] == [1, 1, 1]
    assert [g for b in plan.groups_for_commit(2) for g in b] == list(plan.groups)
    with pytest.raises(ValidationError, match="max_commits"):
        plan.groups_for_commit(0)


def test_split_for_commits_sizes_batches_like_java() -> None:
    assert [len(b) for b in split_for_commits(list(range(7)), 3)] == [3, 3, 1]
    assert [len(b) for b in split_for_commits(list(range(10)), 4)] == [3, 3, 3, 1]
    assert split_for_commits([], 3) == []


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=0, max_value=60), max_commits=st.integers(min_value=1, max_value=20))
def test_split_for_commits_properties(n: int, max_commits: int) -> None:
    batches = split_for_commits(list(range(n)), max_commits)
    assert [x for b in batches for x in b] == list(range(n))
    assert len(batches) <= max_commits
    assert all(batches)
    if batches:
        assert {len(b) for b in batches[:-1]} <= {math.ceil(n / max_commits)}


# --------------------------------------------------------------------------
# expected_output_files
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "total, expected",
    [
        (0, 1),
        (99, 1),
        (100, 1),
        (109, 1),  # remainder spread: 109 per file is under 110% of target
        (175, 2),  # remainder 75 is not above min (75), but one file of 175 would be too big
        (176, 2),  # remainder 76 is above min: its own file
        (1010, 10),  # Java's doc example: 10.1 GB at 1 GB makes 10 files
        (1075, 10),
        (1076, 11),
    ],
)
def test_expected_output_files_rounds_the_remainder_as_java(total: int, expected: int) -> None:
    assert expected_output_files(total, TARGET) == expected


def test_expected_output_files_caps_spreading_at_the_write_max() -> None:
    # max 110 -> write max 105: spreading 8 bytes over one file (108) is too much
    assert expected_output_files(108, 100, min_file_size=75, max_file_size=110) == 2
    assert expected_output_files(108, 100) == 1


def test_expected_output_files_rejects_a_non_positive_target() -> None:
    with pytest.raises(ValidationError, match="target"):
        expected_output_files(10, 0)


@settings(max_examples=300, deadline=None)
@given(total=st.integers(min_value=0, max_value=10**12), target=st.integers(min_value=2, max_value=10**9))
def test_expected_output_files_is_floor_or_ceil_and_files_stay_near_target(total: int, target: int) -> None:
    n = expected_output_files(total, target)
    if total < target:
        assert n == 1
    else:
        assert n in (total // target, -(-total // target))
        assert total / n < 1.1 * target + 1
        if total % target > int(target * 0.75):
            assert n == -(-total // target)


# --------------------------------------------------------------------------
# Whole-plan properties over random tables
# --------------------------------------------------------------------------


@st.composite
def scan_tasks(draw: st.DrawFn) -> list[FileScanTask]:
    tasks = []
    for i in range(draw(st.integers(min_value=0, max_value=40))):
        spec_id = draw(st.sampled_from([0, 1]))
        partition = () if spec_id == 0 else (draw(st.integers(min_value=0, max_value=2)),)
        path = f"d{i}"
        records = draw(st.integers(min_value=0, max_value=100))
        deletes = [
            position_deletes(f"{path}-pos{j}", rows, target=path, partition=partition, spec_id=spec_id)
            for j, rows in enumerate(draw(st.lists(st.integers(min_value=0, max_value=60), max_size=3)))
        ]
        size = draw(st.integers(min_value=0, max_value=400))
        tasks.append(task(path, size, deletes, records=records, partition=partition, spec_id=spec_id))
    return tasks


@st.composite
def rewrite_options(draw: st.DrawFn) -> RewriteOptions:
    return options(
        max_file_group_size_bytes=draw(st.integers(min_value=1, max_value=1000)),
        min_input_files=draw(st.integers(min_value=1, max_value=6)),
        delete_file_threshold=draw(st.sampled_from([1, 2, 3, 2147483647])),
        delete_ratio_threshold=draw(st.sampled_from([0.1, 0.3, 1.0])),
        rewrite_job_order=draw(st.sampled_from([o.value for o in RewriteJobOrder])),
        rewrite_all=draw(st.booleans()),
    )


def _partition_of(t: FileScanTask) -> tuple:
    return (t.data_file.spec_id, t.data_file.partition)


@settings(max_examples=150, deadline=None)
@given(tasks=scan_tasks(), opts=rewrite_options())
def test_plan_properties(tasks: list[FileScanTask], opts: RewriteOptions) -> None:
    plan = plan_rewrite(tasks, SPECS, 1, opts)
    planned = [t.data_file.file_path for g in plan.groups for t in g.tasks]
    assert len(planned) == len(set(planned)), "a file is in two groups"
    for g in plan.groups:
        _check_group(g, opts)
    _check_order(plan.groups, opts.rewrite_job_order)
    by_path = {t.data_file.file_path: t for t in tasks}
    must_rewrite = {FileReason.TOO_LARGE, FileReason.TOO_MANY_DELETES, FileReason.HIGH_DELETE_RATIO}
    for path, t in by_path.items():
        if opts.rewrite_all or file_reasons(t, opts) & must_rewrite:
            assert path in planned, f"{path} ({file_reasons(t, opts)}) was left out"


def _check_group(g: FileGroup, opts: RewriteOptions) -> None:
    assert g.tasks
    assert len(g.tasks) == 1 or g.total_bytes <= opts.max_file_group_size_bytes
    assert g.total_bytes == sum(t.data_file.file_size_in_bytes for t in g.tasks)
    assert {_partition_of(t) for t in g.tasks} == {(g.spec_id, g.partition)}
    assert g.expected_output_files >= 1
    if opts.rewrite_all:
        assert g.reason is GroupReason.REWRITE_ALL
    else:
        assert all(is_candidate(t, opts) for t in g.tasks), "a non-candidate was planned"
        assert g.reason is group_reason(g.tasks, opts) is not None


def _check_order(groups: Sequence[FileGroup], order: RewriteJobOrder) -> None:
    keys = {
        RewriteJobOrder.BYTES_ASC: [g.total_bytes for g in groups],
        RewriteJobOrder.BYTES_DESC: [-g.total_bytes for g in groups],
        RewriteJobOrder.FILES_ASC: [len(g.tasks) for g in groups],
        RewriteJobOrder.FILES_DESC: [-len(g.tasks) for g in groups],
    }
    if order in keys:
        assert keys[order] == sorted(keys[order])


@settings(max_examples=100, deadline=None)
@given(tasks=scan_tasks(), max_commits=st.integers(min_value=1, max_value=8))
def test_commit_batches_cover_the_plan(tasks: list[FileScanTask], max_commits: int) -> None:
    plan = plan_rewrite(tasks, SPECS, 1, options(rewrite_all=True, max_file_group_size_bytes=150))
    batches = plan.groups_for_commit(max_commits)
    assert [g for b in batches for g in b] == list(plan.groups)
    assert len(batches) <= max_commits
    assert Counter(t.data_file.file_path for b in batches for g in b for t in g.tasks) == Counter(
        t.data_file.file_path for t in tasks
    )


def test_under_the_position_strategy_a_file_with_equality_deletes_is_rewritten_whatever_its_size() -> None:
    """Left-overs of a table switched from equality deletes: main must end with none."""
    right_size = task("f", 100, [equality_deletes("e1", 1)])
    only_positions = task("g", 100, [position_deletes("p1", 1)])
    assert not is_candidate(right_size, options())
    by_position = dataclasses.replace(options(), remove_equality_deletes=True)
    assert file_reasons(right_size, by_position) == {FileReason.EQUALITY_DELETES}
    assert not is_candidate(only_positions, by_position)
    (group,) = plan_rewrite([right_size, only_positions], SPECS, 0, by_position).groups
    assert group.reason is GroupReason.EQUALITY_DELETES
    assert [t.data_file.file_path for t in group.tasks] == ["f"]


def test_the_table_property_turns_the_equality_delete_rule_on() -> None:
    schema = Schema(NestedField(1, "p", LongType(), required=True))
    files = [task("f", 100, [equality_deletes("e1", 1)])]
    metadata = new_table_metadata(schema, UNPARTITIONED, UNSORTED_SORT_ORDER, "/t",
                                  {"floe.upsert.delete-strategy": "position"})
    (group,) = plan_table_rewrite(metadata, files, options()).groups
    assert group.reason is GroupReason.EQUALITY_DELETES
    malformed = new_table_metadata(schema, UNPARTITIONED, UNSORTED_SORT_ORDER, "/t",
                                   {"floe.upsert.delete-strategy": "x"})
    assert plan_table_rewrite(malformed, files, options()).groups == ()
