"""Compaction metrics: the names, labels and values of docs/metrics.md, scraped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from compaction.metrics import CompactionMetrics
from compaction.table_health import table_health
from table.manifest import DataFile, DataFileContent, FileFormat
from table.metadata import Snapshot, TableMetadata, new_table_metadata
from table.partitioning import PartitionSpec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.tasks import FileScanTask
from table.types import LongType, NestedField

TABLE = "db.orders"
DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, tuple[str, set[str]]]:
    """name -> (type, labels) of the Compaction table of docs/metrics.md."""
    section = DOC.read_text().split("## Compaction", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(floe_\w+)` \| (\w+) \| ([\w, ]+) \|", section, re.MULTILINE)
    return {name: (kind, {label.strip() for label in labels.split(",")}) for name, kind, labels in rows}


def scrape(registry: CollectorRegistry) -> dict[str, dict[tuple, float]]:
    """sample name -> {sorted label items: value}."""
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def value(registry: CollectorRegistry, name: str, **labels: str) -> Optional[float]:
    return scrape(registry).get(name, {}).get(tuple(sorted({"table": TABLE, **labels}.items())))


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> CompactionMetrics:
    return CompactionMetrics(registry)


def data_task(
    path: str, size: int, deletes: tuple[str, ...] = (), positions: tuple[str, ...] = ()
) -> FileScanTask:
    """A data file of ``size`` bytes with equality delete files named ``deletes``
    and position delete files named ``positions``."""
    data = DataFile(DataFileContent.DATA, path, FileFormat.PARQUET, (), 1, size)
    equality = [
        DataFile(DataFileContent.EQUALITY_DELETES, d, FileFormat.PARQUET, (), 1, 5, equality_ids=[1])
        for d in deletes
    ]
    position = [DataFile(DataFileContent.POSITION_DELETES, p, FileFormat.PARQUET, (), 1, 5) for p in positions]
    return FileScanTask(data, equality + position, 1)


def test_the_doc_lists_nineteen_compaction_metrics() -> None:
    assert len(documented()) == 19


def test_every_documented_metric_is_exported_with_its_type_and_labels(
    registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    metrics.init_table(TABLE)
    metrics.run_finished(TABLE, "success", 1.0)
    metrics.observe_table_health(TABLE, [data_task("a", 1)], 10, _metadata(1))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    for name, (kind, labels) in documented().items():
        family_name = name[: -len("_total")] if kind == "counter" else name
        assert family_name in families, f"{name} is not exported"
        family = families[family_name]
        assert family.type == kind, name
        own = [s for s in family.samples if s.name in (name, f"{name}_count", f"{name}_bucket")]
        assert own, f"{name} has no samples"
        for s in own:
            assert set(s.labels) - {"le"} == labels, f"{name} labels {s.labels}"


def test_init_table_exports_counters_at_zero_and_no_made_up_timestamps(
    registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    metrics.init_table(TABLE)
    for result in ("success", "partial", "failed", "skipped", "interrupted"):
        assert value(registry, "floe_compaction_runs_total", result=result) == 0
    for result in ("committed", "failed", "conflicted", "abandoned"):
        assert value(registry, "floe_compaction_groups_total", result=result) == 0
    assert value(registry, "floe_compaction_bytes_rewritten_total") == 0
    assert value(registry, "floe_compaction_running") == 0
    assert value(registry, "floe_compaction_last_success_timestamp_seconds") is None
    assert value(registry, "floe_table_data_files") is None
    assert value(registry, "floe_table_equality_delete_files") is None
    assert value(registry, "floe_table_upsert_position_deletes") is None


def test_a_successful_run(registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    metrics.run_started(TABLE)
    assert value(registry, "floe_compaction_running") == 1
    metrics.run_finished(TABLE, "success", 42.0, finished_at=1_700_000_000.0)
    assert value(registry, "floe_compaction_running") == 0
    assert value(registry, "floe_compaction_runs_total", result="success") == 1
    assert value(registry, "floe_compaction_run_duration_seconds_sum") == 42.0
    assert value(registry, "floe_compaction_run_duration_seconds_bucket", le="30.0") == 0
    assert value(registry, "floe_compaction_run_duration_seconds_bucket", le="60.0") == 1
    assert value(registry, "floe_compaction_last_success_timestamp_seconds") == 1_700_000_000.0


def test_only_success_moves_the_last_success_time(
    registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    metrics.run_finished(TABLE, "success", 1.0, finished_at=100.0)
    metrics.run_finished(TABLE, "partial", 1.0, finished_at=200.0)
    metrics.run_finished(TABLE, "failed", 1.0, finished_at=300.0)
    assert value(registry, "floe_compaction_last_success_timestamp_seconds") == 100.0
    assert value(registry, "floe_compaction_runs_total", result="partial") == 1
    assert value(registry, "floe_compaction_run_duration_seconds_count") == 3


def test_skipped_runs_and_groups(registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    metrics.run_skipped(TABLE)
    for result in ("committed", "committed", "conflicted"):
        metrics.group_finished(TABLE, result)
    assert value(registry, "floe_compaction_runs_total", result="skipped") == 1
    assert value(registry, "floe_compaction_groups_total", result="committed") == 2
    assert value(registry, "floe_compaction_groups_total", result="conflicted") == 1


@pytest.mark.parametrize("call", ["run", "group"])
def test_undocumented_results_are_refused(metrics: CompactionMetrics, call: str) -> None:
    with pytest.raises(ValueError, match="'ok'"):
        if call == "run":
            metrics.run_finished(TABLE, "ok", 1.0)
        else:
            metrics.group_finished(TABLE, "ok")


def test_files_rewritten_adds_up(registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    metrics.files_rewritten(TABLE, data_files=10, data_bytes=1000, files_added=2, delete_files_removed=3)
    metrics.files_rewritten(TABLE, data_files=5, data_bytes=500, files_added=1, deletes_carried_over=7)
    assert value(registry, "floe_compaction_data_files_rewritten_total") == 15
    assert value(registry, "floe_compaction_bytes_rewritten_total") == 1500
    assert value(registry, "floe_compaction_files_added_total") == 3
    assert value(registry, "floe_compaction_delete_files_removed_total") == 3
    assert value(registry, "floe_compaction_deletes_carried_over_total") == 7


def test_tables_are_labelled_apart(registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    metrics.run_finished("db.a", "failed", 1.0)
    samples = scrape(registry)["floe_compaction_runs_total"]
    assert samples == {(("result", "failed"), ("table", "db.a")): 1.0}


def _metadata(snapshots: int, properties: Optional[dict[str, str]] = None) -> TableMetadata:
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    md = new_table_metadata(schema, PartitionSpec(0, ()), UNSORTED_SORT_ORDER, "/tmp/t", properties)
    for i in range(1, snapshots + 1):
        summary = {"operation": "append"}
        md = md.add_snapshot(Snapshot(i, i - 1 or None, i, 1000 + i, f"/tmp/t/m{i}.avro", summary))
    return md


def test_table_health_gauges(registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    tasks = [data_task("a", 10, ("e1",)), data_task("b", 50, ("e1", "e2")), data_task("c", 200)]
    health = metrics.observe_table_health(TABLE, tasks, min_file_size=75, metadata=_metadata(3))
    assert (health.data_files, health.delete_files, health.small_files) == (3, 2, 2)
    assert health.equality_delete_files == 2
    assert value(registry, "floe_table_data_files") == 3
    assert value(registry, "floe_table_delete_files") == 2
    assert value(registry, "floe_table_small_files") == 2
    assert value(registry, "floe_table_avg_file_size_bytes") == pytest.approx(260 / 3)
    assert value(registry, "floe_table_snapshots") == 3
    assert value(registry, "floe_table_equality_delete_files") == 2
    assert value(registry, "floe_table_upsert_position_deletes") == 0  # the property is unset: equality


def test_equality_deletes_are_counted_once_and_apart_from_position_deletes(
    registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    tasks = [
        data_task("a", 10, ("e1",), ("p1",)),
        data_task("b", 10, ("e1",), ("p2",)),
        data_task("c", 10, (), ("p1", "p3")),
    ]
    health = metrics.observe_table_health(TABLE, tasks, min_file_size=75)
    assert (health.delete_files, health.equality_delete_files) == (4, 1)
    assert value(registry, "floe_table_equality_delete_files") == 1
    assert table_health([data_task("d", 10, (), ("p1",))], 75).equality_delete_files == 0


STRATEGY = "floe.upsert.delete-strategy"


@pytest.mark.parametrize(
    "properties, expected",
    [
        ({STRATEGY: "position"}, 1),
        ({STRATEGY: " Position "}, 1),
        ({STRATEGY: "equality"}, 0),
        ({}, 0),
        ({STRATEGY: "by-key"}, 0),  # malformed: ingest refuses the table, compaction still observes it
    ],
)
def test_the_delete_strategy_gauge_reads_the_table_property(
    registry: CollectorRegistry, metrics: CompactionMetrics, properties: dict[str, str], expected: int
) -> None:
    metrics.observe_table_health(TABLE, [data_task("a", 10, ("e1",))], 75, _metadata(1, properties))
    assert value(registry, "floe_table_upsert_position_deletes") == expected
    assert value(registry, "floe_table_equality_delete_files") == 1


def test_health_without_metadata_keeps_the_delete_strategy(
    registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    metrics.observe_table_health(TABLE, [data_task("a", 10, ("e1",))], 75, _metadata(1, {STRATEGY: "position"}))
    metrics.observe_table_health(TABLE, [data_task("a", 10)], 75)
    assert value(registry, "floe_table_upsert_position_deletes") == 1
    assert value(registry, "floe_table_equality_delete_files") == 0


def test_table_health_of_an_empty_snapshot() -> None:
    assert table_health([], 75) == table_health(iter(()), 75)
    assert table_health([], 75).avg_file_size_bytes == 0.0


def test_table_health_reads_a_one_shot_iterator() -> None:
    health = table_health(iter([data_task("a", 10), data_task("b", 100)]), 75)
    assert (health.data_files, health.small_files, health.avg_file_size_bytes) == (2, 1, 55.0)


def test_health_is_replaced_not_accumulated(registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    metrics.observe_table_health(TABLE, [data_task("a", 10), data_task("b", 10)], 75)
    metrics.observe_table_health(TABLE, [data_task("c", 100)], 75)
    assert value(registry, "floe_table_data_files") == 1
    assert value(registry, "floe_table_small_files") == 0


def test_default_registry_is_the_global_one() -> None:
    metrics = CompactionMetrics()
    try:
        metrics.run_skipped("db.global")
        labels = {"table": "db.global", "result": "skipped"}
        assert REGISTRY.get_sample_value("floe_compaction_runs_total", labels) == 1
    finally:
        for collector in vars(metrics).values():
            REGISTRY.unregister(collector)


def test_deletion_vectors_are_counted_by_puffin_file_and_offset(
    registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    def vector(data: str, offset: int, cardinality: int) -> DataFile:
        return DataFile(DataFileContent.POSITION_DELETES, "dvs.puffin", FileFormat.PUFFIN, (), cardinality, 99,
                        referenced_data_file=data, content_offset=offset, content_size_in_bytes=40)

    a, b = data_task("a", 10), data_task("b", 10)
    tasks = [FileScanTask(a.data_file, [vector("a", 4, 3)], 1), FileScanTask(b.data_file, [vector("b", 44, 2)], 1)]
    health = metrics.observe_table_health(TABLE, tasks, min_file_size=75)
    assert (health.delete_files, health.deletion_vectors, health.deleted_by_vectors) == (2, 2, 5)
    assert value(registry, "floe_table_deletion_vectors") == 2
    assert value(registry, "floe_table_deleted_by_vectors_rows") == 5
