"""The compaction metrics of ``docs/metrics.md``, on a registry given by the service.

The names and labels are a contract with the dashboard, the alert rules and
``/readyz``: they are spelled out here once and nowhere else, and label
values that the contract does not list are refused rather than exported.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from compaction.table_health import TableHealth, table_health, uses_position_deletes
from table.metadata import TableMetadata
from table.tasks import FileScanTask

RUN_RESULTS = ("success", "partial", "failed", "skipped", "interrupted")
GROUP_RESULTS = ("committed", "failed", "conflicted", "abandoned")

RUN_DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
"""Runs are hourly: from a quick no-op to more than the hour they are given."""


class CompactionMetrics:
    """Every compaction metric, registered on ``registry`` (default: the global one).

    Build one per process and registry: registering the same names twice on
    one registry is an error in ``prometheus_client``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        by_result = ("table", "result")

        def counter(name: str, doc: str, labels: tuple[str, ...] = ("table",)) -> Counter:
            return Counter(name, doc, labels, registry=reg)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, ("table",), registry=reg)

        self.runs = counter("floe_compaction_runs_total", "Compaction runs by result", by_result)
        self.data_files_rewritten = counter("floe_compaction_data_files_rewritten_total", "Data files replaced")
        self.bytes_rewritten = counter("floe_compaction_bytes_rewritten_total", "Bytes of replaced data files")
        self.files_added = counter("floe_compaction_files_added_total", "New data files written")
        self.delete_files_removed = counter(
            "floe_compaction_delete_files_removed_total", "Delete files no longer needed"
        )
        self.groups = counter("floe_compaction_groups_total", "File groups by result", by_result)
        self.deletes_carried_over = counter(
            "floe_compaction_deletes_carried_over_total",
            "Concurrent position deletes translated onto new files",
        )
        self.run_duration = Histogram(
            "floe_compaction_run_duration_seconds",
            "One run",
            ("table",),
            buckets=RUN_DURATION_BUCKETS,
            registry=reg,
        )
        self.last_success = gauge(
            "floe_compaction_last_success_timestamp_seconds", "Unix time of the last successful run"
        )
        self.running = gauge("floe_compaction_running", "1 while a run is in progress")
        self.table_data_files = gauge("floe_table_data_files", "Live data files")
        self.table_delete_files = gauge("floe_table_delete_files", "Live delete files")
        self.table_small_files = gauge("floe_table_small_files", "Live data files under the minimum size")
        self.table_avg_file_size = gauge("floe_table_avg_file_size_bytes", "Average live data file size")
        self.table_snapshots = gauge("floe_table_snapshots", "Snapshots in the metadata")
        self.table_equality_delete_files = gauge("floe_table_equality_delete_files", "Live equality delete files")
        self.table_upsert_position_deletes = gauge(
            "floe_table_upsert_position_deletes", "1 when upserts delete by position, else 0"
        )
        self.table_deletion_vectors = gauge("floe_table_deletion_vectors", "Live deletion vectors (format v3)")
        self.table_deleted_by_vectors = gauge(
            "floe_table_deleted_by_vectors_rows", "Rows the live deletion vectors delete"
        )

    def init_table(self, table: str) -> None:
        """Export every counter of ``table`` at zero, and ``running`` at 0.

        A labelled series only appears once touched; starting it at zero lets
        ``rate()`` and ``increase()`` see the first increment. The last-success
        time and the table-health gauges stay absent until really observed,
        so that no alert reads a made-up zero.
        """
        for result in RUN_RESULTS:
            self.runs.labels(table=table, result=result)
        for result in GROUP_RESULTS:
            self.groups.labels(table=table, result=result)
        for counter in (
            self.data_files_rewritten,
            self.bytes_rewritten,
            self.files_added,
            self.delete_files_removed,
            self.deletes_carried_over,
        ):
            counter.labels(table=table)
        self.run_duration.labels(table=table)
        self.running.labels(table=table).set(0)

    # -- runs and groups ------------------------------------------------------

    def run_started(self, table: str) -> None:
        self.running.labels(table=table).set(1)

    def run_finished(self, table: str, result: str, duration_seconds: float, finished_at: float | None = None) -> None:
        """Count a finished run; only ``success`` moves the last-success time."""
        _check_label("result", result, RUN_RESULTS)
        self.running.labels(table=table).set(0)
        self.runs.labels(table=table, result=result).inc()
        self.run_duration.labels(table=table).observe(duration_seconds)
        if result == "success":
            self.last_success.labels(table=table).set(time.time() if finished_at is None else finished_at)

    def run_skipped(self, table: str) -> None:
        """A run that did not start: another process holds the lease, or the table does not exist yet."""
        self.runs.labels(table=table, result="skipped").inc()

    def group_finished(self, table: str, result: str) -> None:
        _check_label("result", result, GROUP_RESULTS)
        self.groups.labels(table=table, result=result).inc()

    def files_rewritten(
        self,
        table: str,
        *,
        data_files: int,
        data_bytes: int,
        files_added: int,
        delete_files_removed: int = 0,
        deletes_carried_over: int = 0,
    ) -> None:
        """Count what one committed group replaced and wrote."""
        self.data_files_rewritten.labels(table=table).inc(data_files)
        self.bytes_rewritten.labels(table=table).inc(data_bytes)
        self.files_added.labels(table=table).inc(files_added)
        self.delete_files_removed.labels(table=table).inc(delete_files_removed)
        self.deletes_carried_over.labels(table=table).inc(deletes_carried_over)

    # -- table health -----------------------------------------------------------

    def observe_table_health(
        self,
        table: str,
        tasks: Iterable[FileScanTask],
        min_file_size: int,
        metadata: TableMetadata | None = None,
    ) -> TableHealth:
        """Set the table-health gauges from a snapshot's planned tasks (and the
        snapshot count and delete strategy from ``metadata`` when given);
        returns what was set."""
        health = table_health(tasks, min_file_size)
        self.table_data_files.labels(table=table).set(health.data_files)
        self.table_delete_files.labels(table=table).set(health.delete_files)
        self.table_small_files.labels(table=table).set(health.small_files)
        self.table_avg_file_size.labels(table=table).set(health.avg_file_size_bytes)
        self.table_equality_delete_files.labels(table=table).set(health.equality_delete_files)
        self.table_deletion_vectors.labels(table=table).set(health.deletion_vectors)
        self.table_deleted_by_vectors.labels(table=table).set(health.deleted_by_vectors)
        if metadata is not None:
            self.observe_snapshots(table, metadata)
            self.observe_delete_strategy(table, metadata)
        return health

    def observe_snapshots(self, table: str, metadata: TableMetadata) -> None:
        self.table_snapshots.labels(table=table).set(len(metadata.snapshots))

    def observe_delete_strategy(self, table: str, metadata: TableMetadata) -> None:
        """Export the strategy beside the equality-delete count, so that an alert
        can tell leftovers under ``position`` from the normal state of ``equality``."""
        self.table_upsert_position_deletes.labels(table=table).set(int(uses_position_deletes(metadata)))


def _check_label(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"metric label {name}={value!r} is not in docs/metrics.md: expected one of {list(allowed)}")
