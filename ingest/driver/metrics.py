"""Ingest metrics (docs/metrics.md, names and labels exactly), and the lag probe.

:class:`IngestMetrics` registers every ingest metric on one registry (the
service passes its own; default: prometheus-client's global registry) and
offers one method per event, so the batch code never names a metric.

The lag and freshness gauges come from outside any batch: :class:`LagProbe`
asks Kafka for each partition's watermarks (confluent-kafka's
``get_watermark_offsets``) and the table for what it holds (the offsets and
newest Kafka timestamps recorded in snapshot summaries), so the gauges are
right even when the query is stuck or down. :class:`LagMonitor` refreshes
them every few seconds, and at once after each commit; when Kafka cannot be
reached it says so in ``floe_ingest_kafka_up`` at every attempt, and in one log
line when the outage begins, once a minute while it lasts, and when it ends.

Freshness is how far the table is behind Kafka in time: 0 for a partition the
table has caught up with (lag 0: nothing is waiting, however old the newest
record), else now minus the newest Kafka timestamp committed. An idle topic is
fresh; a stuck one grows older.

Every labelled counter starts at 0 for each table (:meth:`IngestMetrics.register_table`),
so a process that dies before its first commit still exports the series that
``increase()`` in the alert rules needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ingest.driver.failure_cause import CAUSES
from ingest.driver.offset_accounting import PerPartition

log = logging.getLogger("floe.ingest")

BATCH_RESULTS = ("committed", "skipped", "empty", "failed")
SCHEMA_RESULTS = ("evolved", "taken", "refused")
FILE_CONTENTS = ("data", "position_deletes", "deletion_vectors", "equality_deletes")
"""The ``content`` label: deletion vectors count once per Puffin file, whatever number of DVs it holds."""
BAD_RECORD_REASONS = ("DecodeError", "FieldError", "ChangeError", "UnknownSchemaError", "RouteError")
"""The record error classes (:class:`ingest.tasks.record_errors.RecordError` and its subclasses): the ``reason`` label's values."""
BATCH_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
COMMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class IngestMetrics:
    """Every ingest metric, labelled by table."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = REGISTRY if registry is None else registry
        t = ["table"]
        self.records_read = Counter(
            "floe_ingest_records_read_total", "Kafka records read by committed or skipped batches", t, registry=r
        )
        self.records_committed = Counter(
            "floe_ingest_records_committed_total", "Table rows (data rows plus deleted keys) committed", t, registry=r
        )
        self.bad_records = Counter(
            "floe_ingest_bad_records_total",
            "Records sent to the dead-letter topic, by error class",
            [*t, "reason"],
            registry=r,
        )
        self.batches = Counter("floe_ingest_batches_total", "Micro-batches by result", [*t, "result"], registry=r)
        self.commit_retries = Counter(
            "floe_ingest_commit_retries_total", "Commit attempts beyond the first", t, registry=r
        )
        self.commit_conflicts = Counter(
            "floe_ingest_commit_conflicts_total", "Compare-and-swap races lost", t, registry=r
        )
        self.files_written = Counter("floe_ingest_files_written_total", "Files written", [*t, "content"], registry=r)
        self.bytes_written = Counter(
            "floe_ingest_bytes_written_total", "Bytes of files written", [*t, "content"], registry=r
        )
        self.batch_duration = Histogram(
            "floe_ingest_batch_duration_seconds",
            "Whole micro-batch, decode to commit",
            t,
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.commit_latency = Histogram(
            "floe_ingest_commit_latency_seconds", "The commit step alone", t, buckets=COMMIT_BUCKETS, registry=r
        )
        self.consumer_lag = Gauge(
            "floe_ingest_consumer_lag_records",
            "Latest Kafka offset minus the offset committed into the table",
            [*t, "topic", "partition"],
            registry=r,
        )
        self.freshness = Gauge(
            "floe_ingest_freshness_seconds",
            "How far the table is behind Kafka in time: 0 when caught up (consumer lag 0), else now minus the newest Kafka timestamp committed into the table",
            [*t, "topic", "partition"],
            registry=r,
        )
        self.last_commit = Gauge(
            "floe_ingest_last_commit_timestamp_seconds", "Unix time of the last successful commit", t, registry=r
        )
        self.query_active = Gauge("floe_ingest_query_active", "1 while the streaming query runs", t, registry=r)
        self.index_entries = Gauge(
            "floe_key_index_entries",
            "Entries of the key index: live keys, plus superseded entries and tombstones not merged yet",
            t,
            registry=r,
        )
        self.index_bytes = Gauge("floe_key_index_bytes", "Bytes of the key index's segment files", t, registry=r)
        self.index_lookups = Counter(
            "floe_key_index_lookups_total",
            "Keys looked up in the key index (each changed key of a batch)",
            t,
            registry=r,
        )
        self.index_update = Histogram(
            "floe_key_index_update_seconds",
            "Writing a batch's key index segments, summed over its buckets (executor time)",
            t,
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.index_rebuilds = Counter(
            "floe_key_index_rebuilds_total",
            "Key indexes built from the whole table (none yet, stale, or keyed differently)",
            t,
            registry=r,
        )
        self.kafka_up = Gauge(
            "floe_ingest_kafka_up", "1 when the last probe reached Kafka, 0 when it could not", t, registry=r
        )
        self.table_held = Gauge(
            "floe_ingest_table_held",
            "1 while a shared query holds the table after its batch failed (the other tables go on)",
            t,
            registry=r,
        )
        self.table_failures = Counter(
            "floe_ingest_table_failures_total",
            "Batches of a shared query that failed for this table alone, the table then held, by the dependency "
            "that failed (cause): catalog, storage, kafka, schema_registry or other",
            [*t, "cause"],
            registry=r,
        )

        self.schema_changes = Counter(
            "floe_ingest_schema_changes_total",
            "Writer schema versions of the table's registry subject, by result: evolved (the table took a change), "
            "taken (nothing to change) or refused (its records go to the dead letters)",
            [*t, "result"],
            registry=r,
        )

    def register_table(self, table: str, last_commit_s: float | None = None) -> None:
        """Start every labelled counter of ``table`` at 0, and the last-commit gauge at the
        table's last ingest commit (so neither vanishes after a restart)."""
        for counter in (
            self.records_read,
            self.records_committed,
            self.commit_retries,
            self.commit_conflicts,
            self.index_lookups,
            self.index_rebuilds,
        ):
            counter.labels(table).inc(0)
        for cause in CAUSES:
            self.table_failures.labels(table, cause).inc(0)
        self.table_held.labels(table).set(0)
        for result in BATCH_RESULTS:
            self.batches.labels(table, result).inc(0)
        for result in SCHEMA_RESULTS:
            self.schema_changes.labels(table, result).inc(0)
        for content in FILE_CONTENTS:
            self.files_written.labels(table, content).inc(0)
            self.bytes_written.labels(table, content).inc(0)
        for reason in BAD_RECORD_REASONS:
            self.bad_records.labels(table, reason).inc(0)
        if last_commit_s is not None:
            self.last_commit.labels(table).set(last_commit_s)

    # -- batches ---------------------------------------------------------------

    def batch_committed(
        self,
        table: str,
        *,
        records: int,
        committed_rows: int,
        attempts: int,
        files: Mapping[str, tuple[int, int]],
        duration_s: float,
        commit_s: float,
    ) -> None:
        self.batches.labels(table, "committed").inc()
        self.records_read.labels(table).inc(records)
        self.records_committed.labels(table).inc(committed_rows)
        if attempts > 1:
            self.commit_retries.labels(table).inc(attempts - 1)
            self.commit_conflicts.labels(table).inc(attempts - 1)
        for content, (count, size) in files.items():
            self.files_written.labels(table, content).inc(count)
            self.bytes_written.labels(table, content).inc(size)
        self.batch_duration.labels(table).observe(duration_s)
        self.commit_latency.labels(table).observe(commit_s)
        self.last_commit.labels(table).set(time.time())

    def index_committed(
        self, table: str, *, entries: int, size_bytes: int, lookups: int, update_s: float, rebuilt: bool
    ) -> None:
        """A position-strategy batch committed its key index change (docs/key-index-design.md)."""
        self.index_entries.labels(table).set(entries)
        self.index_bytes.labels(table).set(size_bytes)
        self.index_lookups.labels(table).inc(lookups)
        self.index_update.labels(table).observe(update_s)
        if rebuilt:
            self.index_rebuilds.labels(table).inc()

    def batch_skipped(self, table: str, records: int, duration_s: float) -> None:
        self.batches.labels(table, "skipped").inc()
        self.records_read.labels(table).inc(records)
        self.batch_duration.labels(table).observe(duration_s)

    def batch_empty(self, table: str) -> None:
        self.batches.labels(table, "empty").inc()

    def batch_failed(self, table: str) -> None:
        self.batches.labels(table, "failed").inc()

    def dead_lettered(self, table: str, by_reason: Mapping[str, int]) -> None:
        for reason, count in by_reason.items():
            self.bad_records.labels(table, reason).inc(count)

    def set_active(self, table: str, active: bool) -> None:
        self.query_active.labels(table).set(1 if active else 0)

    # -- lag -------------------------------------------------------------------

    def set_lag(self, table: str, lag: PerPartition) -> None:
        for topic, parts in lag.items():
            for partition, records in parts.items():
                self.consumer_lag.labels(table, topic, str(partition)).set(records)

    def set_freshness(self, table: str, newest_micros: PerPartition, now_s: float, lag: PerPartition) -> None:
        """Per partition: 0 when caught up (lag 0), else now minus the newest committed Kafka timestamp."""
        for topic, parts in newest_micros.items():
            for partition, micros in parts.items():
                caught_up = lag.get(topic, {}).get(partition) == 0
                age = 0.0 if caught_up else max(0.0, now_s - micros / 1e6)
                self.freshness.labels(table, topic, str(partition)).set(age)

    def set_kafka_up(self, table: str, up: bool) -> None:
        self.kafka_up.labels(table).set(1 if up else 0)

    def schema_version(self, table: str, result: str) -> None:
        """One writer schema version of the table's subject: ``evolved``, ``taken`` or ``refused``."""
        self.schema_changes.labels(table, result).inc()

    def set_held(self, table: str, held: bool, cause: str = "other") -> None:
        """A shared query's table held after failing (counted by ``cause``: :mod:`ingest.driver.failure_cause`),
        or landing again."""
        if held:
            self.table_failures.labels(table, cause).inc()
        self.table_held.labels(table).set(1 if held else 0)
