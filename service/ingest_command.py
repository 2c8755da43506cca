"""``floe ingest``: the streaming job as a process, one Spark query per table.

Maps the configuration onto ingest jobs (:mod:`service.jobs`), starts every query on one SparkSession, and serves ``/metrics``, ``/healthz``
and ``/readyz`` on ``http.ingest_port``.

Stopping: the stop event (SIGTERM or SIGINT through
:func:`runtime.signals.install_stop_signals`) stops every query
gracefully (:mod:`ingest.driver.stream`): no new batch starts, the running batch
finishes within :data:`service.jobs.GRACE_SECONDS` or is cancelled before its commit, so
the table always holds whole batches. Exit codes: 0 every query ended on its
own (``trigger.available_now``), 3 stopped by the stop event (signal), 1 a
query failed (the others are then stopped gracefully too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from ingest.driver.metrics import IngestMetrics
from ingest.job import IngestJob, SharedIngestJob
from ingest.skips import RecordRef
from service.check import kafka_topics, require_kafka
from service.config import FloeConfig, TableConfig
from service.failures import log_failure
from service.http import OpsServer
from service.jobs import build_jobs, build_shared_job
from service.metrics import register_service_metrics
from service.spark_setup import apply_storage, start_spark
from service.topic_watch import TopicWatch

log = logging.getLogger("floe.ingest")
EXIT_OK, EXIT_QUERY_FAILED, EXIT_STOPPED = 0, 1, 3

ACTIVE_METRIC = "floe_ingest_query_active"
LAST_COMMIT_METRIC = "floe_ingest_last_commit_timestamp_seconds"
LAG_METRIC = "floe_ingest_consumer_lag_records"
KAFKA_UP_METRIC = "floe_ingest_kafka_up"
HELD_METRIC = "floe_ingest_table_held"
READINESS_METRICS = (ACTIVE_METRIC, LAST_COMMIT_METRIC, LAG_METRIC, KAFKA_UP_METRIC, HELD_METRIC)
"""The metrics ``/readyz`` is computed from, so a scrape shows what readiness saw."""


# ---------------------------------------------------------------------------
# Readiness
# ---------------------------------------------------------------------------


class IngestReadiness:
    """Ready when every query is active, reaches Kafka, holds no table after a failure, and is not late.

    Late is the alert rules' rule: the last commit is older than
    ``max_commit_age_s`` *and* records are waiting (consumer lag > 0). An idle
    topic is old but not late, so a caught-up pipeline stays ready.

    Read from the exported gauges (:data:`READINESS_METRICS`); the start of
    the queries counts as a commit, so a restart begins with a full grace period.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        tables: Sequence[str],
        max_commit_age_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._tables = list(tables)
        self._max_age = max_commit_age_s
        self._clock = clock
        self._started: float | None = None

    def add_tables(self, tables: Sequence[str]) -> None:
        """Tables that joined while ingest runs (a template's new topics)."""
        self._tables += [t for t in tables if t not in self._tables]

    def queries_started(self) -> None:
        self._started = self._clock()

    def __call__(self) -> tuple[bool, str]:
        if self._started is None:
            return False, "streaming queries are starting"
        problems = [p for p in map(self._problem, self._tables) if p]
        if problems:
            return False, "; ".join(problems)
        return (
            True,
            f"{len(self._tables)} queries active; none is late (a commit within {self._max_age:.0f}s, or nothing waiting)",
        )

    def _problem(self, table: str) -> str | None:
        labels = {"table": table}
        if self._registry.get_sample_value(ACTIVE_METRIC, labels) != 1:
            return f"{table}: query not active"
        if self._registry.get_sample_value(KAFKA_UP_METRIC, labels) == 0:
            return f"{table}: kafka unreachable"
        if self._registry.get_sample_value(HELD_METRIC, labels) == 1:
            return f"{table}: held after failing (the other tables go on; the log says why)"
        # The gauge is seeded from the table's last snapshot, which may predate this
        # process by hours: a restarted query gets max_commit_age_s to catch up.
        last = max(self._registry.get_sample_value(LAST_COMMIT_METRIC, labels) or 0.0, self._started or 0.0)
        age = self._clock() - last
        if age <= self._max_age:
            return None
        waiting = self._lag(table)
        if waiting == 0:
            return None  # idle: nothing to commit
        shown = "unknown" if waiting is None else f"{waiting:.0f}"
        return f"{table}: no commit for {age:.0f}s (max {self._max_age:.0f}s) with {shown} records waiting"

    def _lag(self, table: str) -> float | None:
        """The table's consumer lag over all partitions; None before the first probe."""
        samples = [
            s.value
            for m in self._registry.collect()
            if m.name == LAG_METRIC
            for s in m.samples
            if s.labels.get("table") == table
        ]
        return sum(samples) if samples else None


# ---------------------------------------------------------------------------
# The service
# ---------------------------------------------------------------------------


def run_ingest_service(
    config: FloeConfig,
    *,
    stop: threading.Event | None = None,
    registry: CollectorRegistry | None = None,
    port: int | None = None,
    spark: Any = None,
    skip: Sequence[RecordRef] = (),
) -> int:
    """Run every table's query until they end, fail or ``stop`` is set; the exit code says which.

    ``spark``: a session to use (and leave running); by default one is built and stopped here.
    ``skip``: records to skip (``--skip``, :func:`service.jobs.command_line_skips`) in every table
    reading their topic, besides each table's ``skip_records``.
    """
    stop = stop or threading.Event()
    registry = registry or CollectorRegistry()
    apply_storage(config)
    jobs: list[IngestJob] | SharedIngestJob = build_jobs(config, skip)  # refuses a bad table before Kafka is asked
    plan = QueryPlan(config, skip)
    if not stop.is_set():  # stopped already: nothing will read Kafka, whether it answers or not
        topics = require_kafka(config)
        plan = QueryPlan(config, skip, TopicWatch.of(config, topics, lambda: kafka_topics(config)))
        config = config.with_tables_per_topic(topics)
        jobs = _jobs(config, skip)
        plan.config = config
    service_metrics = register_service_metrics(registry)
    metrics = IngestMetrics(registry)
    tables = jobs.table_ids if isinstance(jobs, SharedIngestJob) else [j.table.identifier for j in jobs]
    readiness = IngestReadiness(registry, tables, config.readiness.max_commit_age.total_seconds())
    server = OpsServer(
        config.http.host, config.http.ingest_port if port is None else port, registry, setting="http.ingest_port"
    )
    server.add_readiness_check("ingest", readiness)
    with server:
        log.info("ingest starting", extra={"tables": len(tables), "metrics_url": server.url})
        code = _start_and_run(config, plan, jobs, spark, stop, metrics, readiness, service_metrics)
    log.info("ingest stopped", extra={"exit_code": code, "reason": _EXIT_REASONS[code]})
    return code


def _jobs(config: FloeConfig, skip: Sequence[RecordRef]) -> list[IngestJob] | SharedIngestJob:
    """The shared query's job, or each table's (``ingest.query``)."""
    return build_shared_job(config, skip) if config.ingest.query == "shared" else build_jobs(config, skip)


class QueryPlan:
    """The configuration the queries run (templates expanded) and, with template tables, the watch for new
    topics that grows it while ingest runs."""

    def __init__(self, config: FloeConfig, skip: Sequence[RecordRef], watch: TopicWatch | None = None) -> None:
        self.config = config
        self._skip = skip
        self._watch = watch

    def new_jobs(self) -> list[IngestJob] | SharedIngestJob | None:
        """None, or the jobs after new topics joined: the new tables' own (``per-table``), or the whole shared
        query's (``shared``), which then starts again."""
        topics = [] if self._watch is None else self._watch.new_topics()
        if not topics:
            return None
        added = [t.for_topic(topic) for topic in topics for t in self._templates if t.reads_topic(topic)]
        log.info(
            "new topics for template tables: %s; adding %s", ", ".join(topics), ", ".join(t.identifier for t in added)
        )
        self.config = self.config.model_copy(update={"tables": [*self.config.tables, *added]})
        if self.config.ingest.query == "shared":
            return build_shared_job(self.config, self._skip)
        return build_jobs(self.config.model_copy(update={"tables": added}), self._skip)

    @property
    def _templates(self) -> list[TableConfig]:
        return [] if self._watch is None else self._watch.templates


def _start_and_run(
    config: FloeConfig,
    plan: QueryPlan,
    jobs: list[IngestJob] | SharedIngestJob,
    spark: Any,
    stop: threading.Event,
    metrics: IngestMetrics,
    readiness: IngestReadiness,
    service_metrics: Any,
) -> int:
    """Start Spark (unless given one) and run the queries; a stop during start-up starts nothing more."""
    if stop.is_set():
        return _stopped_while_starting()
    session = spark if spark is not None else start_spark(config, "floe-ingest", config.spark)
    try:
        if stop.is_set():
            return _stopped_while_starting()
        return _run_queries(plan, jobs, session, stop, metrics, readiness, service_metrics)
    finally:
        if spark is None:
            session.stop()


def _stopped_while_starting() -> int:
    log.info("stop requested while starting: no query started")
    return EXIT_STOPPED


def _run_queries(
    plan: QueryPlan,
    jobs: list[IngestJob] | SharedIngestJob,
    spark: Any,
    stop: threading.Event,
    metrics: IngestMetrics,
    readiness: IngestReadiness,
    service_metrics: Any,
) -> int:
    while True:
        halt = threading.Event()  # stops every query: set by ``stop``, by a failing query, or to start again
        queries: list[Any] = []
        grown: SharedIngestJob | None = None
        try:
            _start_queries(jobs, spark, stop, halt, metrics, queries)
            service_metrics.mark_up("ingest")
            readiness.queries_started()
            failed, grown = _supervise(
                queries, stop, halt, _grower(plan, spark, stop, halt, metrics, queries, readiness)
            )
        except Exception as error:  # noqa: BLE001 - reported as one line; the exit code says it failed
            log_failure(log, "an ingest query could not start", error)
            failed = True
        finally:
            halt.set()
            for query in queries:
                query.stop()
            service_metrics.mark_down("ingest")
        failed = failed or any(_error(q) is not None for q in queries)
        if grown is None or failed or stop.is_set():
            return _exit_code(failed, stop.is_set())
        readiness.add_tables(grown.table_ids)
        log.info("the shared query starts again with %d tables", len(grown.table_ids))
        jobs = grown


def _grower(
    plan: QueryPlan,
    spark: Any,
    stop: threading.Event,
    halt: threading.Event,
    metrics: IngestMetrics,
    queries: list[Any],
    readiness: IngestReadiness,
) -> Callable[[], SharedIngestJob | None]:
    """Called while the queries run: starts the new tables' queries (``per-table``), or returns the shared
    query's new job, for which the running one stops after its batch."""

    def grow() -> SharedIngestJob | None:
        jobs = plan.new_jobs()
        if jobs is None or isinstance(jobs, SharedIngestJob):
            return jobs
        readiness.add_tables([j.table.identifier for j in jobs])
        _start_queries(jobs, spark, stop, halt, metrics, queries)
        return None

    return grow


def _start_queries(
    jobs: list[IngestJob] | SharedIngestJob,
    spark: Any,
    stop: threading.Event,
    halt: threading.Event,
    metrics: IngestMetrics,
    queries: list[Any],
) -> None:
    """Start the shared query, or each table's; ``queries`` gets each one as it starts."""
    from ingest.driver.shared_query import run_shared_ingest
    from ingest.driver.stream import run_ingest

    if isinstance(jobs, SharedIngestJob):
        queries.append(run_shared_ingest(jobs, spark, halt, metrics))
        return
    for job in jobs:
        if stop.is_set():
            break  # a stop while the tables are set up: the queries started so far stop below
        queries.append(run_ingest(job, spark, halt, metrics))


def _supervise(
    queries: list[Any], stop: threading.Event, halt: threading.Event, grow: Callable[[], SharedIngestJob | None]
) -> tuple[bool, SharedIngestJob | None]:
    """Wait until every query ended, ``stop`` is set, or the shared query must start again with new tables;
    True when a query failed, and the shared query's new job."""
    while not stop.wait(0.5):
        errors = [(q, e) for q in queries if (e := _error(q)) is not None]
        if errors:
            for query, error in errors:
                log_failure(log, f"ingest query {query.job.name} failed", error, table=", ".join(query.job.table_ids))
            return True, None
        if not any(q.is_active for q in queries) and all(q.await_termination(0) for q in queries):
            log.info("every ingest query ended on its own")
            return False, None
        grown = grow()
        if grown is not None:
            log.info("stopping the shared query after its running batch, to add the new tables")
            halt.set()
            return False, grown
    log.info("stop requested: stopping %d ingest queries after their running batch", len(queries))
    halt.set()
    return False, None


def _error(query: Any) -> BaseException | None:
    try:
        return query.exception()
    except Exception as exc:  # noqa: BLE001 - a dead JVM handle is a failure too
        return exc


_EXIT_REASONS = {
    EXIT_OK: "every query ended on its own",
    EXIT_QUERY_FAILED: "a query failed",
    EXIT_STOPPED: "stop requested",
}


def _exit_code(failed: bool, stopped: bool) -> int:
    if failed:
        return EXIT_QUERY_FAILED
    return EXIT_STOPPED if stopped else EXIT_OK
