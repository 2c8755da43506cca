"""The lag probe: how far each table is behind Kafka, and whether Kafka answers.

:class:`LagProbe` reads the topics' watermarks from Kafka and the committed
offsets from the table, and sets the lag, freshness and ``kafka_up`` gauges of
:class:`~ingest.driver.metrics.IngestMetrics`; :class:`LagMonitor` runs it on
a thread of the driver, so the gauges move while no batch commits.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from commit.catalog.base import Catalog
from commit.exactly_once import committed_offsets
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import committed_timestamps, consumer_lag
from ingest.job import IngestJob
from ingest.kafka_source.offsets import Marks
from ingest.kafka_source.outage import Outage, in_words, kafka_error
from ingest.kafka_source.watermarks import TopicWatermarks
from runtime.logging import summarize_error

log = logging.getLogger("floe.ingest")


class KafkaUnreachable(RuntimeError):
    """The brokers did not answer a metadata or watermark request."""

    def __init__(self, bootstrap_servers: str, error: BaseException) -> None:
        self.bootstrap_servers = bootstrap_servers
        cause = kafka_error(error)
        super().__init__(
            f"kafka {bootstrap_servers} is unreachable: {summarize_error(error) if cause is None else in_words(cause)}"
        )


class TableLagFailed(RuntimeError):
    """One table's lag could not be refreshed (its catalog entry, say); the others were."""

    def __init__(self, table: str, error: Exception) -> None:
        self.table = table
        super().__init__(summarize_error(error))
        self.__cause__ = error  # its traceback, for DEBUG


class LagProbe:
    """Reads watermarks from Kafka and positions from the table; sets the lag gauges."""

    def __init__(self, job: IngestJob, catalog: Catalog, metrics: IngestMetrics, timeout_s: float = 10.0) -> None:
        self._job = job
        self._catalog = catalog
        self._metrics = metrics
        self._timeout_s = timeout_s
        self._kafka: TopicWatermarks | None = None

    def topic_partitions(self) -> dict[str, list[int]]:
        """The source's topics (the listed ones, or those the pattern matches) and partitions."""
        return self._client().topic_partitions()

    def require_topics(self) -> None:
        """:class:`~ingest.kafka_source.watermarks.TopicsNotFound` unless every listed topic exists;
        :class:`KafkaUnreachable` when Kafka does not answer."""
        from confluent_kafka import KafkaException

        try:
            self._client().require_topics(self._job.source.bootstrap_servers)
        except KafkaException as error:
            raise KafkaUnreachable(self._job.source.bootstrap_servers, error) from error

    def watermarks(self) -> Marks:
        return self._client().watermarks()

    def refresh(self) -> None:
        """Kafka first, so that ``kafka_up`` says whether Kafka answers whatever the catalog does."""
        from confluent_kafka import KafkaException

        table = self._job.table.identifier
        try:
            marks = self.watermarks()
        except KafkaException as error:  # anything else is not about reaching Kafka
            raise KafkaUnreachable(self._job.source.bootstrap_servers, error) from error
        self._metrics.set_kafka_up(table, True)
        metadata = self._catalog.load_table(table).metadata
        lag = consumer_lag(marks, committed_offsets(metadata))
        self._metrics.set_lag(table, lag)
        self._metrics.set_freshness(table, committed_timestamps(metadata), time.time(), lag)

    def _client(self) -> TopicWatermarks:
        if self._kafka is None:
            source = self._job.source
            self._kafka = TopicWatermarks(
                source.librdkafka_config(),
                source.topics,
                source.topic_pattern,
                self._timeout_s,
                name=f"floe-lag-{self._job.table.identifier}",
            )
        return self._kafka

    @property
    def table(self) -> str:
        return self._job.table.identifier

    def mark_unreachable(self) -> None:
        self._metrics.set_kafka_up(self.table, False)

    def close(self) -> None:
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            kafka.close()


class LagMonitor:
    """Refreshes a probe every ``interval_s`` and when :meth:`poke` is called, in a daemon thread."""

    def __init__(self, probe: Any, interval_s: float) -> None:
        self._probe = probe
        self._interval = interval_s
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="floe-lag-monitor", daemon=True)
        self._outage = Outage(report_every_s=max(interval_s, 60.0))
        self._failing = Outage(report_every_s=max(interval_s, 60.0))  # the catalog, say: not Kafka
        self._unreachable = ""  # the brokers of the last failed attempt, for the line that says they are back

    def start(self) -> LagMonitor:
        self._thread.start()
        return self

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._done.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                self.refresh_once()
                self._wake.wait(self._interval)
                self._wake.clear()
        finally:
            self._probe.close()

    def refresh_once(self) -> None:
        """One refresh; a failure is one log line (tracebacks at DEBUG) and must not stop ingestion.
        An unreachable Kafka is one line when it begins, once a minute while it lasts, and when it ends."""
        try:
            self._probe.refresh()
        except KafkaUnreachable as unreachable:
            self._probe.mark_unreachable()
            self._unreachable = unreachable.bootstrap_servers
            now = time.monotonic()
            if self._outage.failed(now, 0.0):
                log.warning(
                    "%s; retrying every %.0fs (unreachable for %.0fs)",
                    unreachable,
                    self._interval,
                    self._outage.down_for_s(now),
                    extra={"table": self._probe.table},
                )
            return
        except Exception as error:
            now = time.monotonic()
            if self._failing.failed(now, 0.0):
                log.warning(
                    "lag refresh failed: %s; retrying every %.0fs (failing for %.0fs)",
                    error if isinstance(error, TableLagFailed) else summarize_error(error),
                    self._interval,
                    self._failing.down_for_s(now),
                    extra={"table": error.table if isinstance(error, TableLagFailed) else self._probe.table},
                    exc_info=error if log.isEnabledFor(logging.DEBUG) else None,
                )
            return
        failed_for = self._failing.answered(time.monotonic())
        if failed_for is not None:
            log.info("lag refresh works again, after %.0fs failing", failed_for, extra={"table": self._probe.table})
        down = self._outage.answered(time.monotonic())
        if down is not None:
            log.info(
                "kafka %s answers again, after %.0fs unreachable",
                self._unreachable,
                down,
                extra={"table": self._probe.table},
            )
