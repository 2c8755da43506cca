"""Builds and runs a shared query: one streaming query, one checkpoint, many tables.

:func:`run_shared_ingest` sets up every table (:mod:`ingest.driver.table_setup`),
works out where a new checkpoint starts, and starts one query on Floe's source
over the union of the tables' topics; each micro-batch goes to
:class:`ingest.driver.shared_batch.SharedBatch`. It returns the same handle as a
one-table query (:class:`ingest.driver.stream.IngestQuery`), with its graceful
stop.

Where a new checkpoint starts: for each table, where a one-table query would
(its committed offsets, else its configured ``starting_offsets``), and the
query reads each partition from the lowest of these. A table ahead of that
skips what it holds already: each table lands only records at or past its own
committed offsets (:mod:`ingest.kafka_source.table_ranges`).

:class:`SharedLagProbe` is the lag probe of all the tables: one Kafka client,
one watermark request per refresh, every ``lag_interval_seconds`` and after each
batch. What each table holds is read from the catalog once, then again only
after the table commits (and every :attr:`SharedLagProbe.RELOAD_EVERY_S`, for
what changed it from outside Floe): a table that commits nothing costs a
refresh no catalog call.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from commit.catalog.base import Catalog
from commit.exactly_once import committed_offsets, last_batch_snapshot
from ingest.driver.lag import KafkaUnreachable, LagMonitor, TableLagFailed
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import PerPartition, committed_timestamps, consumer_lag, starting_offsets
from ingest.driver.shared_batch import SharedBatch
from ingest.driver.stream import IngestQuery, StopGate, available_now_end, pinned_starting_offsets, start_query
from ingest.driver.table_setup import ensure_table
from ingest.job import IngestJob, SharedIngestJob, TableSpec, with_decode_schema
from ingest.kafka_source.offsets import Marks, Offsets, starting_offsets_now
from ingest.kafka_source.table_ranges import TableRanges
from ingest.kafka_source.watermarks import TopicsNotFound, TopicWatermarks
from table.metadata import TableMetadata

log = logging.getLogger("floe.ingest")


class SharedLagProbe:
    """Lag, freshness and ``kafka_up`` of every table of a shared query, from one Kafka client."""

    table = "every table of the shared query"  # what LagMonitor's lines name
    RELOAD_EVERY_S = 600.0  # a table no batch committed is read again from the catalog this often

    def __init__(self, shared: SharedIngestJob, catalog: Catalog, metrics: IngestMetrics, timeout_s: float = 10.0):
        source = shared.source
        self._bootstrap = source.bootstrap_servers
        self._kafka = TopicWatermarks(
            source.librdkafka_config(), source.topics, source.topic_pattern, timeout_s, name="floe-lag"
        )
        self._tables = {job.table.identifier: _ranges(job) for job in shared.jobs}
        self._listed = {job.table.identifier: job.source.topics for job in shared.jobs}
        self._catalog = catalog
        self._metrics = metrics
        self._full_every_s = max(self.RELOAD_EVERY_S, shared.lag_interval_seconds)
        self._last_full = -float("inf")
        self._dirty: set[str] = set()
        self._held: dict[str, tuple[PerPartition, PerPartition]] = {}  # table -> its committed offsets, timestamps
        self._readers: dict[str, list[str]] = {}  # topic -> the tables reading it
        self._lock = threading.Lock()

    @property
    def kafka(self) -> TopicWatermarks:
        return self._kafka

    def require_topics(self) -> None:
        """:class:`TopicsNotFound` naming each table's listed topics that Kafka lacks."""
        from confluent_kafka import KafkaException

        try:
            found = self._kafka.topic_partitions()
        except KafkaException as error:
            raise KafkaUnreachable(self._bootstrap, error) from error
        missing = [f"{t} ({table})" for table, topics in self._listed.items() for t in topics if t not in found]
        if missing:
            raise TopicsNotFound(f"kafka {self._bootstrap}: topics not found: {', '.join(missing)}")

    def committed(self, tables: Sequence[str]) -> None:
        """Tables a batch committed: the next refresh reads them from the catalog again."""
        with self._lock:
            self._dirty.update(tables)

    def refresh(self) -> None:
        """Kafka first (``kafka_up``), then every table's gauges, from what it holds: read again from the
        catalog for the tables that committed (all, every :attr:`RELOAD_EVERY_S`). A table that cannot be
        read does not keep the others from being refreshed, and is tried again at the next refresh; the first
        error is raised."""
        from confluent_kafka import KafkaException

        try:
            marks = self._kafka.watermarks()
        except KafkaException as error:
            raise KafkaUnreachable(self._bootstrap, error) from error
        first: Exception | None = None
        for table in self._due():
            try:
                self._reload(table)
            except Exception as error:  # noqa: BLE001 - raised below, after the other tables
                first = first or TableLagFailed(table, error)
                self.committed([table])  # not read: tried again next time
        now, mine = time.time(), self._marks_by_table(marks)
        for table in self._tables:
            self._metrics.set_kafka_up(table, True)
            held = self._held.get(table)
            if held is not None:
                self._set_gauges(table, mine.get(table, {}), held, now)
        if first is not None:
            raise first

    def _due(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            if now - self._last_full >= self._full_every_s:
                self._last_full, self._dirty = now, set()
                return list(self._tables)
            due, self._dirty = sorted(self._dirty), set()
            return due

    def _reload(self, table: str) -> None:
        metadata = self._catalog.load_table(table).metadata
        self._held[table] = (committed_offsets(metadata), committed_timestamps(metadata))

    def _marks_by_table(self, marks: Marks) -> dict[str, dict[str, Mapping[int, tuple[int, int]]]]:
        """Each table's share of ``marks``: the topics it reads (which tables read a topic is worked out once
        per topic, so that a refresh costs the topics plus the tables, not their product)."""
        mine: dict[str, dict[str, Mapping[int, tuple[int, int]]]] = {}
        for topic, parts in marks.items():
            readers = self._readers.get(topic)
            if readers is None:
                readers = self._readers[topic] = [t for t, ranges in self._tables.items() if ranges.reads(topic)]
            for table in readers:
                mine.setdefault(table, {})[topic] = parts
        return mine

    def _set_gauges(self, table: str, marks: Marks, held: tuple[PerPartition, PerPartition], now: float) -> None:
        lag = consumer_lag(marks, held[0])
        self._metrics.set_lag(table, lag)
        self._metrics.set_freshness(table, held[1], now, lag)

    def mark_unreachable(self) -> None:
        for table in self._tables:
            self._metrics.set_kafka_up(table, False)

    def close(self) -> None:
        self._kafka.close()


def run_shared_ingest(
    shared: SharedIngestJob,
    spark: Any,
    stop_event: threading.Event | None = None,
    metrics: IngestMetrics | None = None,
    *,
    lag_monitor: bool = True,
) -> IngestQuery:
    """Start the shared query in ``spark``; returns at once with its handle (see the module)."""
    from prometheus_client import CollectorRegistry

    metrics = metrics or IngestMetrics(CollectorRegistry())
    stop_event = stop_event or threading.Event()
    catalog = shared.catalog.open()
    probe = SharedLagProbe(shared, catalog, metrics)
    try:
        try:
            probe.require_topics()  # before the tables: nothing is created for a topic that cannot be read
            tables, starts, last_commits = _set_up_tables(shared, catalog, metrics, probe.kafka)
            start = json.dumps(lowest(starts), separators=(",", ":"))
            start = pinned_starting_offsets(shared.checkpoint_location, start, probe.kafka)
            ending = available_now_end(shared, probe.kafka)
        except BaseException:
            probe.close()
            raise
        if not lag_monitor:
            probe.close()
        monitor = LagMonitor(probe, shared.lag_interval_seconds) if lag_monitor else None
        gate = StopGate()
        processor = SharedBatch(
            shared,
            tables,
            catalog,
            metrics,
            last_commits=last_commits,
            starts=[{t: {int(p): o for p, o in parts.items()} for t, parts in s.items()} for s in starts],
            between_batches=gate.between_batches,
            on_batch=_on_batch(probe, monitor),
            stopping=gate.stopping,
        )
        query = start_query(shared, spark, gate.wrap(processor), start, ending)
    except BaseException:
        catalog.close()
        raise
    processor.bind(query.id)
    for table in shared.table_ids:
        metrics.set_active(table, True)
    if monitor is not None:
        monitor.start()
    log.info("shared ingest query %s started (id %s)", shared.name, query.id, extra={"tables": len(tables)})
    return IngestQuery(
        query,
        shared,
        gate,
        stop_event,
        metrics,
        monitor,
        catalog,
        ending,
        on_end=processor.close,
        failure=lambda: processor.failure,
    )


def _on_batch(probe: SharedLagProbe, monitor: LagMonitor | None) -> Any:
    def after(committed: Sequence[str]) -> None:
        if monitor is not None and committed:
            probe.committed(committed)
            monitor.poke()

    return after


def _set_up_tables(
    shared: SharedIngestJob, catalog: Catalog, metrics: IngestMetrics, kafka: TopicWatermarks
) -> tuple[list[TableSpec], list[Offsets], dict[str, float]]:
    """Every table created or checked, its metrics registered; where each starts (:func:`table_start`); and
    each table's last commit (seconds since the epoch), where a commit interval counts from."""
    partitions = kafka.topic_partitions()
    marks = kafka.watermarks()
    tables, starts, last_commits = [], [], {}
    for job in shared.jobs:
        loaded = ensure_table(catalog, job.table)
        last = last_batch_snapshot(loaded.metadata)
        if last is not None:
            last_commits[job.table.identifier] = last.timestamp_ms / 1000
        metrics.register_table(job.table.identifier, last_commits.get(job.table.identifier))
        tables.append(with_decode_schema(job.table, loaded.metadata.schema()))
        starts.append(table_start(job, loaded.metadata, partitions, marks))
    return tables, starts, last_commits


def table_start(job: IngestJob, metadata: TableMetadata, partitions: dict[str, list[int]], marks: Marks) -> Offsets:
    """Where a one-table query of ``job`` would start, as offsets of the table's own topics."""
    ranges = _ranges(job)
    mine = {t: ps for t, ps in partitions.items() if ranges.reads(t)}
    configured = job.source.starting_offsets_option()
    option = starting_offsets(configured, committed_offsets(metadata), mine, job.table.identifier) or configured
    return {t: parts for t, parts in starting_offsets_now(option, marks).items() if t in mine}


def lowest(starts: Sequence[Offsets]) -> Offsets:
    """Each partition at the lowest start any table asks of it. Pure."""
    merged: Offsets = {}
    for start in starts:
        for topic, parts in start.items():
            into = merged.setdefault(topic, {})
            for partition, offset in parts.items():
                into[partition] = min(offset, into.get(partition, offset))
    return merged


def _ranges(job: IngestJob) -> TableRanges:
    return TableRanges(job.source.topics, job.source.topic_pattern)
