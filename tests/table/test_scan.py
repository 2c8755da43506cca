"""Tests of table.scan: delete matching by sequence number, partition and
spec; pruning by partition and metrics; snapshot selection; planning over
real manifests."""

from __future__ import annotations

from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.conversions import to_bytes
from table.deletes.index import DeleteFileIndex, equality_deletes_may_apply, referenced_data_file
from table.errors import NotFoundError, ValidationError
from table.expressions import ALWAYS_TRUE, bind, col
from table.manifest import (
    DataFile,
    DataFileContent,
    FieldSummary,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from table.metadata import SnapshotRef
from table.partitioning import PartitionField, PartitionSpec
from table.scan import FilePruner, TableScan, plan_tasks
from table.schema import DELETE_FILE_PATH_ID, Schema
from table.tasks import FileScanTask
from table.transforms import DayTransform, IdentityTransform, VoidTransform
from table.types import IntegerType, LongType, NestedField, StringType, TimestampType
from tests.table.helpers import HandTable

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "category", StringType()),
    NestedField(3, "ts", TimestampType()),
)
UNPARTITIONED = PartitionSpec(0, ())
BY_CATEGORY = PartitionSpec(1, (PartitionField(2, 1000, IdentityTransform(), "category"),))
# the same partition values as BY_CATEGORY, but another spec (partition evolution)
BY_CATEGORY_AND_ID = PartitionSpec(
    2, (PartitionField(2, 1000, IdentityTransform(), "category"), PartitionField(1, 1001, VoidTransform(), "id_void"))
)
BY_DAY = PartitionSpec(3, (PartitionField(3, 1002, DayTransform(), "ts_day"),))
ALL_VOID = PartitionSpec(4, (PartitionField(1, 1003, VoidTransform(), "gone"),))
SPECS = {s.spec_id: s for s in (UNPARTITIONED, BY_CATEGORY, BY_CATEGORY_AND_ID, BY_DAY, ALL_VOID)}
DAY = 86_400_000_000


def _file(
    path: str,
    content: DataFileContent = DataFileContent.DATA,
    partition: tuple = (),
    spec_id: int = 0,
    record_count: int = 10,
    equality_ids: Optional[list[int]] = None,
    **metrics: Any,
) -> DataFile:
    return DataFile(
        content, path, FileFormat.PARQUET, partition, record_count, 100,
        equality_ids=equality_ids, spec_id=spec_id, **metrics,
    )


def _data(path: str, partition: tuple = (), spec_id: int = 0, **metrics: Any) -> DataFile:
    return _file(path, DataFileContent.DATA, partition, spec_id, **metrics)


def _pos(path: str, partition: tuple = (), spec_id: int = 0, target: Optional[str] = None) -> DataFile:
    bounds = {}
    if target is not None:
        bounds = dict(
            lower_bounds={DELETE_FILE_PATH_ID: target.encode()},
            upper_bounds={DELETE_FILE_PATH_ID: target.encode()},
        )
    return _file(path, DataFileContent.POSITION_DELETES, partition, spec_id, **bounds)


def _eq(path: str, partition: tuple = (), spec_id: int = 0, ids: tuple[int, ...] = (1,), **metrics: Any) -> DataFile:
    return _file(path, DataFileContent.EQUALITY_DELETES, partition, spec_id, equality_ids=list(ids), **metrics)


def _entry(seq: int, f: DataFile, status: ManifestEntryStatus = ManifestEntryStatus.ADDED) -> ManifestEntry:
    return ManifestEntry(status, 1, seq, seq, f)


def _deletes_for(data_seq: int, data: DataFile, deletes: list[tuple[int, DataFile]]) -> set[str]:
    index = DeleteFileIndex(deletes, SPECS, SCHEMA)
    return {d.file_path for d in index.for_data_file(data_seq, data)}


# --------------------------------------------------------------------------
# Delete matching rules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("delete_seq, applies", [(4, False), (5, True), (6, True)])
def test_position_delete_applies_to_data_with_lower_or_equal_sequence_number(delete_seq: int, applies: bool) -> None:
    data = _data("d", ("a",), 1)
    assert _deletes_for(5, data, [(delete_seq, _pos("p", ("a",), 1))]) == ({"p"} if applies else set())


@pytest.mark.parametrize("delete_seq, applies", [(4, False), (5, False), (6, True)])
def test_equality_delete_applies_only_to_strictly_older_data(delete_seq: int, applies: bool) -> None:
    data = _data("d", ("a",), 1)
    assert _deletes_for(5, data, [(delete_seq, _eq("e", ("a",), 1))]) == ({"e"} if applies else set())


def test_partition_scoped_deletes_skip_other_partitions() -> None:
    deletes = [(9, _pos("p", ("b",), 1)), (9, _eq("e", ("b",), 1)), (9, _pos("p-null", (None,), 1))]
    assert _deletes_for(1, _data("d", ("a",), 1), deletes) == set()
    assert _deletes_for(1, _data("d", ("b",), 1), deletes) == {"p", "e"}
    assert _deletes_for(1, _data("d", (None,), 1), deletes) == {"p-null"}


def test_deletes_of_another_spec_do_not_apply_even_with_equal_values() -> None:
    # BY_CATEGORY_AND_ID has the tuple ("a", None); BY_CATEGORY has ("a",): a different spec
    deletes = [(9, _pos("p", ("a", None), 2)), (9, _eq("e", ("a", None), 2))]
    assert _deletes_for(1, _data("d", ("a",), 1), deletes) == set()
    assert _deletes_for(1, _data("d2", ("a", None), 2), deletes) == {"p", "e"}


@pytest.mark.parametrize("spec_id, partition", [(0, ()), (4, (None,))])
def test_equality_deletes_in_an_unpartitioned_spec_are_global(spec_id: int, partition: tuple) -> None:
    deletes = [(5, _eq("global", partition, spec_id))]
    assert _deletes_for(4, _data("d", ("a",), 1), deletes) == {"global"}
    assert _deletes_for(4, _data("d", (7,), 3), deletes) == {"global"}
    assert _deletes_for(5, _data("d", ("a",), 1), deletes) == set()


def test_position_deletes_in_an_unpartitioned_spec_are_not_global() -> None:
    deletes = [(5, _pos("p", (), 0))]
    assert _deletes_for(4, _data("d", ("a",), 1), deletes) == set()
    assert _deletes_for(4, _data("d", (), 0), deletes) == {"p"}


def test_position_delete_naming_one_file_applies_only_to_it() -> None:
    deletes = [(5, _pos("p", ("a",), 1, target="s3://t/data/one.parquet"))]
    assert _deletes_for(5, _data("s3://t/data/one.parquet", ("a",), 1), deletes) == {"p"}
    assert _deletes_for(5, _data("s3://t/data/two.parquet", ("a",), 1), deletes) == set()
    assert _deletes_for(6, _data("s3://t/data/one.parquet", ("a",), 1), deletes) == set()
    assert referenced_data_file(deletes[0][1]) == "s3://t/data/one.parquet"
    assert referenced_data_file(_pos("q")) is None


def test_position_delete_is_skipped_for_files_outside_its_path_bounds() -> None:
    ranged = _file(
        "p", DataFileContent.POSITION_DELETES,
        lower_bounds={DELETE_FILE_PATH_ID: b"data/b.parquet"},
        upper_bounds={DELETE_FILE_PATH_ID: b"data/d.parquet"},
    )
    assert _deletes_for(1, _data("data/c.parquet"), [(1, ranged)]) == {"p"}
    assert _deletes_for(1, _data("data/a.parquet"), [(1, ranged)]) == set()
    assert _deletes_for(1, _data("data/e.parquet"), [(1, ranged)]) == set()


def test_nan_partition_values_match() -> None:
    spec = PartitionSpec(5, (PartitionField(4, 1004, IdentityTransform(), "x"),))
    index = DeleteFileIndex([(3, _pos("p", (float("nan"),), 5))], {**SPECS, 5: spec}, SCHEMA)
    assert [d.file_path for d in index.for_data_file(1, _data("d", (float("nan"),), 5))] == ["p"]


def test_delete_index_rejects_bad_input() -> None:
    with pytest.raises(ValidationError, match="equality_ids"):
        DeleteFileIndex([(1, _file("e", DataFileContent.EQUALITY_DELETES))], SPECS, SCHEMA)
    with pytest.raises(ValidationError, match="not a delete file"):
        DeleteFileIndex([(1, _data("d"))], SPECS, SCHEMA)
    with pytest.raises(NotFoundError, match="spec 42"):
        DeleteFileIndex([(1, _pos("p", (), 42))], SPECS, SCHEMA)


_PARTITIONS = [(1, ("a",)), (1, ("b",)), (1, (None,)), (2, ("a", None)), (0, ()), (4, (None,))]


@st.composite
def _content_files(draw: st.DrawFn, content: DataFileContent) -> tuple[int, DataFile]:
    spec_id, partition = draw(st.sampled_from(_PARTITIONS))
    path = f"f{draw(st.integers(0, 10**9))}"
    target = draw(st.none() | st.sampled_from(["d0", "d1", "d2"])) if content == DataFileContent.POSITION_DELETES else None
    if content == DataFileContent.POSITION_DELETES:
        f = _pos(path, partition, spec_id, target=target)
    elif content == DataFileContent.EQUALITY_DELETES:
        f = _eq(path, partition, spec_id)
    else:
        f = _data(path, partition, spec_id)
    return draw(st.integers(0, 6)), f


def _spec_rule(data_seq: int, data: DataFile, delete_seq: int, delete: DataFile) -> bool:
    """The spec's "Scan Planning" rules, written out plainly."""
    same_partition = (data.spec_id, data.partition) == (delete.spec_id, delete.partition)
    if delete.content == DataFileContent.POSITION_DELETES:
        target = referenced_data_file(delete)
        return data_seq <= delete_seq and same_partition and target in (None, data.file_path)
    return data_seq < delete_seq and (same_partition or SPECS[delete.spec_id].is_unpartitioned)


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from(_PARTITIONS), st.sampled_from(["d0", "d1", "d2"])),
        min_size=1,
        max_size=8,
    ),
    deletes=st.lists(
        _content_files(DataFileContent.POSITION_DELETES) | _content_files(DataFileContent.EQUALITY_DELETES),
        max_size=12,
    ),
)
def test_delete_index_agrees_with_the_spec_rules(data: list, deletes: list[tuple[int, DataFile]]) -> None:
    index = DeleteFileIndex(deletes, SPECS, SCHEMA)
    for seq, (spec_id, partition), path in data:
        data_file = _data(path, partition, spec_id)
        expected = sorted(d.file_path for s, d in deletes if _spec_rule(seq, data_file, s, d))
        assert sorted(d.file_path for d in index.for_data_file(seq, data_file)) == expected


# --------------------------------------------------------------------------
# Equality delete metrics
# --------------------------------------------------------------------------


def _ranged(lower: Optional[int], upper: Optional[int], nulls: Optional[int] = 0, values: int = 10) -> dict[str, Any]:
    """Metrics of the optional ``id`` column (field 1) of OPTIONAL_ID."""
    metrics: dict[str, Any] = {"value_counts": {1: values}}
    if nulls is not None:
        metrics["null_value_counts"] = {1: nulls}
    if lower is not None:
        metrics["lower_bounds"] = {1: to_bytes(LongType(), lower)}
    if upper is not None:
        metrics["upper_bounds"] = {1: to_bytes(LongType(), upper)}
    return metrics


OPTIONAL_ID = Schema(NestedField(1, "id", LongType()), NestedField(2, "category", StringType()))


@pytest.mark.parametrize(
    "data_metrics, delete_metrics, applies",
    [
        (_ranged(1, 10), _ranged(11, 20), False),
        (_ranged(1, 10), _ranged(10, 20), True),
        (_ranged(5, 6), _ranged(1, 100), True),
        (_ranged(1, 10), _ranged(None, None), True),  # delete bounds unknown
        (_ranged(None, None, nulls=10), _ranged(1, 10), False),  # data all null, no null deleted
        (_ranged(1, 10), _ranged(None, None, nulls=10), False),  # only null deleted, data has none
        (_ranged(1, 10, nulls=2), _ranged(50, 60, nulls=1), True),  # both have nulls
        (_ranged(1, 10, nulls=None), _ranged(50, 60), False),  # null count unknown, ranges apart
        ({}, _ranged(50, 60), True),  # data file predates the column: no metrics
    ],
)
def test_equality_delete_skipped_when_key_ranges_cannot_overlap(
    data_metrics: dict, delete_metrics: dict, applies: bool
) -> None:
    data = _data("d", **data_metrics)
    delete = _eq("e", **delete_metrics)
    assert equality_deletes_may_apply(data, delete, OPTIONAL_ID) is applies
    assert (DeleteFileIndex([(2, delete)], SPECS, OPTIONAL_ID).for_data_file(1, data) == [delete]) is applies


def test_equality_delete_metrics_on_a_dropped_column_are_not_checked() -> None:
    hundred = to_bytes(LongType(), 100)
    delete = _eq("e", ids=(9,), lower_bounds={9: hundred}, upper_bounds={9: hundred})
    data = _data("d", lower_bounds={9: to_bytes(LongType(), 1)}, upper_bounds={9: to_bytes(LongType(), 2)})
    assert equality_deletes_may_apply(data, delete, SCHEMA)


# --------------------------------------------------------------------------
# Pruning in plan_tasks
# --------------------------------------------------------------------------


def _ids(tasks: Any) -> list[str]:
    return sorted(t.data_file.file_path for t in tasks)


def test_plan_prunes_by_partition_with_hidden_partitioning() -> None:
    data = [_entry(1, _data(f"day{d}", (d,), 3)) for d in range(5)]
    tasks = plan_tasks(data, [], SCHEMA, SPECS, (col("ts") >= 2 * DAY + 7) & (col("ts") < 4 * DAY))
    assert _ids(tasks) == ["day2", "day3"]


def test_plan_prunes_by_metrics_and_ignores_deleted_entries() -> None:
    low = _data("low", lower_bounds={1: to_bytes(LongType(), 1)}, upper_bounds={1: to_bytes(LongType(), 9)})
    high = _data("high", lower_bounds={1: to_bytes(LongType(), 10)}, upper_bounds={1: to_bytes(LongType(), 19)})
    gone = _data("gone")
    entries = [_entry(1, low), _entry(1, high), _entry(1, gone, ManifestEntryStatus.DELETED)]
    assert _ids(plan_tasks(entries, [], SCHEMA, SPECS, col("id") == 12)) == ["high"]
    assert _ids(plan_tasks(entries, [], SCHEMA, SPECS)) == ["high", "low"]


def test_plan_drops_delete_files_that_cannot_match_the_filter() -> None:
    def ids(low: int, high: int) -> dict[str, Any]:
        return {"lower_bounds": {1: to_bytes(LongType(), low)}, "upper_bounds": {1: to_bytes(LongType(), high)}}

    data = _entry(1, _data("d", ("a",), 1, **ids(1, 20)))
    far = _eq("far", ("a",), 1, **ids(1, 4))
    near = _eq("near", ("a",), 1, **ids(8, 9))
    removed = _pos("removed", ("a",), 1)
    deletes = [_entry(2, far), _entry(2, near), _entry(2, removed, ManifestEntryStatus.DELETED)]
    (task,) = plan_tasks([data], deletes, SCHEMA, SPECS, col("id") == 9)
    assert [d.file_path for d in task.delete_files] == ["near"]
    assert task.data_sequence_number == 1
    assert task.residual == bind(col("id") == 9, SCHEMA)


def test_task_splits_its_deletes_by_kind() -> None:
    (task,) = plan_tasks([_entry(1, _data("d"))], [_entry(2, _pos("p")), _entry(2, _eq("e"))], SCHEMA, SPECS)
    assert [d.file_path for d in task.position_deletes] == ["p"]
    assert [d.file_path for d in task.equality_deletes] == ["e"]


def test_plan_rejects_delete_files_in_data_manifests_and_missing_sequence_numbers() -> None:
    with pytest.raises(ValidationError, match="data manifest"):
        list(plan_tasks([_entry(1, _pos("p"))], [], SCHEMA, SPECS))
    unassigned = ManifestEntry(ManifestEntryStatus.ADDED, 1, None, None, _data("d"))
    with pytest.raises(ValidationError, match="sequence number"):
        list(plan_tasks([unassigned], [], SCHEMA, SPECS))


def test_manifest_pruning_by_partition_summaries_and_live_counts() -> None:
    pruner = FilePruner(bind(col("category") == "m", SCHEMA), SCHEMA, SPECS)

    def manifest(lower: str, upper: str, added: int = 1, existing: int = 0) -> ManifestFile:
        summary = FieldSummary(False, None, to_bytes(StringType(), lower), to_bytes(StringType(), upper))
        return ManifestFile("m", 1, 1, ManifestContent.DATA, 1, 1, 1, added, existing, 0, 1, 1, 0, [summary])

    assert pruner.manifest_might_match(manifest("a", "z"))
    assert not pruner.manifest_might_match(manifest("n", "z"))
    assert not pruner.manifest_might_match(manifest("a", "z", added=0, existing=0))
    assert pruner.manifest_might_match(manifest("a", "z", added=0, existing=3))


# --------------------------------------------------------------------------
# Snapshot selection and planning over written manifests
# --------------------------------------------------------------------------


def _table(tmp_path: Any) -> HandTable:
    return HandTable(str(tmp_path / "t"), SCHEMA, BY_CATEGORY)  # spec id 1


def test_scan_of_a_table_without_snapshots_is_empty(tmp_path: Any) -> None:
    table = _table(tmp_path)
    scan = TableScan(table.io, table.metadata)
    assert scan.snapshot() is None
    assert list(scan.plan_files()) == []


def test_plan_files_reads_manifests_and_applies_sequence_numbers(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.commit(data=[_data("a1", ("a",), 1), _data("b1", ("b",), 1)])
    table.commit(data=[_data("a2", ("a",), 1)], deletes=[_eq("eq-a", ("a",), 1), _pos("pos-a", ("a",), 1)])
    tasks = {t.data_file.file_path: t for t in TableScan(table.io, table.metadata).plan_files()}
    assert sorted(tasks) == ["a1", "a2", "b1"]
    assert sorted(d.file_path for d in tasks["a1"].delete_files) == ["eq-a", "pos-a"]
    assert [d.file_path for d in tasks["a2"].delete_files] == ["pos-a"]  # same commit: position only
    assert tasks["b1"].delete_files == []
    assert (tasks["a1"].data_sequence_number, tasks["a2"].data_sequence_number) == (1, 2)


def test_plan_files_skips_manifests_by_partition_summary(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.commit(data=[_data("a1", ("a",), 1)])
    table.commit(data=[_data("b1", ("b",), 1)])
    scan = TableScan(table.io, table.metadata, row_filter=col("category") == "b")
    assert _ids(scan.plan_files()) == ["b1"]


def test_time_travel_by_id_timestamp_and_refs(tmp_path: Any) -> None:
    table = _table(tmp_path)
    first = table.commit(data=[_data("a1", ("a",), 1)], ts=1000)
    second = table.commit(data=[_data("a2", ("a",), 1)], ts=2000)
    md = table.metadata.set_ref("v1", SnapshotRef(first, "tag")).set_ref("dev", SnapshotRef(first, "branch"))

    def files(**kw: Any) -> list[str]:
        return _ids(TableScan(table.io, md, **kw).plan_files())

    assert files() == ["a1", "a2"]
    assert files(snapshot_id=first) == ["a1"]
    assert files(as_of_timestamp_ms=1500) == ["a1"]
    assert files(as_of_timestamp_ms=2000) == ["a1", "a2"]
    assert files(ref="v1") == ["a1"]
    assert files(ref="dev") == ["a1"]
    assert files(ref="main") == ["a1", "a2"]
    assert TableScan(table.io, md, snapshot_id=second).snapshot().snapshot_id == second
    with pytest.raises(NotFoundError, match="nope"):
        TableScan(table.io, md, ref="nope").snapshot()
    with pytest.raises(NotFoundError):
        TableScan(table.io, md, as_of_timestamp_ms=5).snapshot()
    with pytest.raises(ValidationError, match="at most one"):
        TableScan(table.io, md, snapshot_id=first, ref="v1")


def test_time_travel_reads_with_the_snapshot_schema(tmp_path: Any) -> None:
    table = _table(tmp_path)
    first = table.commit(data=[_data("a1", ("a",), 1)])
    evolved = Schema(*SCHEMA.fields, NestedField(4, "extra", IntegerType()))
    table.metadata = table.metadata.add_schema(evolved, 4, make_current=True)
    table.commit(data=[_data("a2", ("a",), 1)])
    md = table.metadata.set_ref("v1", SnapshotRef(first, "tag")).set_ref("dev", SnapshotRef(first, "branch"))
    assert TableScan(table.io, md).projected_schema().find_field("extra").field_id == 4
    for old in (TableScan(table.io, md, snapshot_id=first), TableScan(table.io, md, ref="v1")):
        assert [f.name for f in old.projected_schema().fields] == ["id", "category", "ts"]
    assert len(TableScan(table.io, md, ref="dev").projected_schema().fields) == 4


def test_projected_schema_selects_columns(tmp_path: Any) -> None:
    table = _table(tmp_path)
    scan = TableScan(table.io, table.metadata, selected_fields=("ts", "id"))
    assert [f.name for f in scan.projected_schema().fields] == ["id", "ts"]
    insensitive = TableScan(table.io, table.metadata, selected_fields=("ID",), case_sensitive=False)
    assert [f.name for f in insensitive.projected_schema().fields] == ["id"]
    with pytest.raises(ValidationError, match="sequence"):
        TableScan(table.io, table.metadata, selected_fields="id")


def test_partition_evolution_plans_each_spec_with_its_own_projection(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.commit(data=[_data("by-cat", ("a",), 1)])
    table.metadata = table.metadata.add_partition_spec(PartitionSpec(9, BY_DAY.fields), make_default=True)
    day_spec = table.metadata.spec().spec_id
    table.commit(data=[_data("by-day-2", (2,), day_spec), _data("by-day-5", (5,), day_spec)])
    table.commit(deletes=[_eq("eq-day-2", (2,), day_spec), _eq("eq-cat-a", ("a",), 1)])
    scan = TableScan(table.io, table.metadata, row_filter=col("ts") < 3 * DAY)
    tasks = {t.data_file.file_path: t for t in scan.plan_files()}
    assert sorted(tasks) == ["by-cat", "by-day-2"]
    assert [d.file_path for d in tasks["by-cat"].delete_files] == ["eq-cat-a"]
    assert [d.file_path for d in tasks["by-day-2"].delete_files] == ["eq-day-2"]


def test_file_scan_task_defaults() -> None:
    task = FileScanTask(_data("d"))
    assert task.delete_files == [] and task.residual is ALWAYS_TRUE
