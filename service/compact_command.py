"""``floe compact``: the sidecar compactor as a process.

Maps the ``compaction`` configuration onto ``compaction/``'s options, serves
``/metrics``, ``/healthz`` and ``/readyz``, and runs the scheduler (or one
round with ``--once``). SIGTERM sets the stop event: the runner stops
between file groups and abandons a half-written one cleanly.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from compaction.maintenance import MaintenanceOptions
from compaction.metrics import CompactionMetrics
from compaction.runner import CompactionOptions, CompactionRunner
from compaction.scheduler import CompactionScheduler, RunOutcome, Schedule
from service.check import kafka_topics
from service.config import FloeConfig
from service.config.compactor import CompactionConfig
from service.http import OpsServer
from service.jobs import catalog_spec
from service.metrics import register_service_metrics
from service.spark_setup import apply_storage, start_spark

log = logging.getLogger("floe.compact")
EXIT_OK, EXIT_RUN_FAILED, EXIT_INTERRUPTED = 0, 1, 3


def _ms(duration) -> int:  # a timedelta
    return int(duration.total_seconds() * 1000)


def compaction_options(config: CompactionConfig) -> CompactionOptions:
    """Iceberg option strings plus maintenance switches, from the ``compaction`` section."""
    rewrite = {
        **config.rewrite_options,
        "partial-progress.enabled": str(config.partial_progress.enabled).lower(),
        "partial-progress.max-commits": str(config.partial_progress.max_commits),
    }
    maintenance = MaintenanceOptions(
        remove_dangling_deletes=config.remove_dangling_deletes,
        expire_snapshots=config.expire_snapshots.enabled,
        expire_older_than_ms=_ms(config.expire_snapshots.older_than),
        retain_last=config.expire_snapshots.retain_last,
        remove_orphans=config.remove_orphans.enabled,
        orphan_older_than_ms=_ms(config.remove_orphans.older_than),
    )
    return CompactionOptions(rewrite=rewrite, maintenance=maintenance, lease_ttl_ms=_ms(config.lease_ttl))


def build_runners(
    config: FloeConfig, metrics: CompactionMetrics, stop: threading.Event, spark=None
) -> list[CompactionRunner]:
    if any(table.is_template for table in config.tables):  # a table per topic: which topics, Kafka says
        config = config.with_tables_per_topic(kafka_topics(config))
    catalog = catalog_spec(config).open()
    options = compaction_options(config.compaction)
    return [CompactionRunner(catalog, t.identifier, options, metrics, spark, stop=stop) for t in config.tables]


class CompactorReadiness:
    """Ready while idle or running normally; not ready after a round that failed."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def record(self, outcomes: list[RunOutcome]) -> None:
        self.failed = [o.table for o in outcomes if not o.ok]

    def __call__(self) -> tuple[bool, str]:
        if self.failed:
            return False, f"last run failed for {', '.join(self.failed)}"
        return True, "idle or running normally"


def run_compactor(
    config: FloeConfig,
    *,
    once: bool,
    stop: threading.Event | None = None,
    registry: CollectorRegistry | None = None,
    port: int | None = None,
    spark: Any = None,
) -> int:
    """Runs until stopped (or one round with ``once``); the exit code tells how it ended.

    With ``compaction.executor: spark``, groups run on ``spark`` (left running),
    else on a local-mode session built and stopped here.
    """
    stop = stop or threading.Event()
    registry = registry or CollectorRegistry()
    service_metrics = register_service_metrics(registry)
    metrics = CompactionMetrics(registry)
    readiness = CompactorReadiness()
    server = OpsServer(
        config.http.host, config.http.compact_port if port is None else port, registry, setting="http.compact_port"
    )
    server.add_readiness_check("compactor", readiness)
    apply_storage(config)
    use_spark = config.compaction.executor == "spark"
    owned = use_spark and spark is None
    session = (start_spark(config, "floe-compact", config.compactor_spark) if owned else spark) if use_spark else None
    runners = build_runners(config, metrics, stop, session)
    schedule = Schedule(config.compaction.interval.total_seconds(), config.compaction.jitter.total_seconds())
    scheduler = CompactionScheduler(runners, schedule, stop)
    with server:
        service_metrics.mark_up("compact")
        log.info("compactor started", extra={"tables": len(runners), "once": once, "metrics_url": server.url})
        try:
            if once:
                outcomes = scheduler.run_once()
                readiness.record(outcomes)
                code = EXIT_OK if all(o.ok for o in outcomes) else EXIT_RUN_FAILED
            else:
                scheduler.run_forever()
                code = EXIT_INTERRUPTED if stop.is_set() else EXIT_OK
        finally:
            service_metrics.mark_down("compact")
            if owned and session is not None:
                session.stop()
    log.info("compactor stopped", extra={"exit_code": code})
    return code
