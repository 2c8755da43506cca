"""``floe demo``: the whole pipeline on one machine, with nothing installed but Floe.

A real Kafka broker (:class:`service.local_kafka.LocalKafka`), a stream of
order change events (new orders, status updates, cancellations as deletes),
the ingest service (:func:`service.ingest_command.run_ingest_service`) landing
them in an upsert table of a SQLite catalog, and one compaction run at the
end. It prints progress while it runs, then a summary read from the table and
the metrics, and how to query the table. Everything lives under a work
directory (``floe.yaml`` there is a real config for ``floe table --config``).

Ctrl-C (or SIGTERM) stops producing and ingesting cleanly; the summary still
shows what the table holds.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import random
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from service.config import FloeConfig, load_config

log = logging.getLogger(__name__)
TABLE = "shop.orders"
TOPIC = "shop.orders"
PARTITIONS = 3
TRIGGER_SECONDS = 5  # a micro-batch takes a few seconds on a small machine: no "falling behind" warnings
PROGRESS_SECONDS = 5.0
CATCH_UP_SECONDS = 180.0
_STATUS_FLOW = {"placed": "paid", "paid": "shipped", "shipped": "delivered"}


@dataclass(frozen=True)
class DemoOptions:
    work_dir: Path
    duration_s: float = 60.0
    rate: int = 200  # events per second


@dataclass(frozen=True)
class TableStats:
    """What the table holds, from its metadata and a merge-on-read scan."""

    rows: int
    snapshots: int
    data_files: int
    delete_files: int


# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------


class OrderEvents:
    """Order change events with a Debezium-style ``op``: c (new order), u (status change), d (cancelled)."""

    def __init__(self, seed: int = 42) -> None:
        self._rng = random.Random(seed)
        self._open: dict[int, dict[str, Any]] = {}
        self._next_id = 1

    def next(self, now_s: float) -> tuple[int, dict[str, Any]]:
        """The next event as (order id, value)."""
        roll = self._rng.random()
        if not self._open or roll < 0.4:
            return self._create(now_s)
        order_id = self._rng.choice(list(self._open))
        if roll < 0.5:
            del self._open[order_id]
            return order_id, {"op": "d", "order_id": order_id}
        return self._advance(order_id)

    def _create(self, now_s: float) -> tuple[int, dict[str, Any]]:
        order_id, self._next_id = self._next_id, self._next_id + 1
        amount = Decimal(self._rng.randrange(500, 50_000)) / 100
        row = {
            "order_id": order_id,
            "customer_id": self._rng.randrange(1, 500),
            "status": "placed",
            "amount": str(amount),
            "created_at": _iso(now_s),
        }
        self._open[order_id] = row
        return order_id, {"op": "c", **row}

    def _advance(self, order_id: int) -> tuple[int, dict[str, Any]]:
        row = self._open[order_id]
        row["status"] = _STATUS_FLOW.get(row["status"], row["status"])
        if row["status"] == "delivered":
            del self._open[order_id]  # delivered orders change no more
        return order_id, {"op": "u", **row}


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{int(epoch_s * 1000) % 1000:03d}Z"


def produce_for(bootstrap: str, options: DemoOptions, stop: Any, report: Callable[[int], None]) -> int:
    """Produce ``rate`` events a second for ``duration_s`` (or until ``stop``); the count delivered."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 50,
            "log_level": 3,
            "logger": logging.getLogger("floe.librdkafka"),
        }
    )
    events, sent, started = OrderEvents(), 0, time.monotonic()
    while not stop.is_set() and (elapsed := time.monotonic() - started) < options.duration_s:
        due = int(elapsed * options.rate) + 1
        for _ in range(due - sent):
            order_id, value = events.next(time.time())
            producer.produce(TOPIC, key=json.dumps(order_id).encode(), value=json.dumps(value).encode())
            sent += 1
        producer.poll(0)
        report(sent)
        stop.wait(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError("the demo producer could not deliver every event")
    return sent


# ---------------------------------------------------------------------------
# Config, table, metrics
# ---------------------------------------------------------------------------


def demo_config(work: Path, bootstrap: str) -> FloeConfig:
    """A real Floe config under ``work`` (written to ``floe.yaml``, so ``floe table --config`` works)."""
    raw = {
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 5000},
        "catalog": {"uri": f"sqlite:///{work / 'catalog.db'}", "warehouse": str(work / "warehouse")},
        "checkpoint_location": str(work / "checkpoints"),
        "trigger": {"processing_time": f"{TRIGGER_SECONDS}s"},
        "readiness": {"max_commit_age": "1m"},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "tables": [
            {
                "identifier": TABLE,
                "topics": [TOPIC],
                "format": "json",
                "mode": "upsert",
                "key": ["order_id"],
                "op": {"field": "op", "insert": ["c", "r"], "update": ["u"], "delete": ["d"]},
                "schema": [
                    {"name": "order_id", "type": "long", "required": True},
                    {"name": "customer_id", "type": "long"},
                    {"name": "status", "type": "string"},
                    {"name": "amount", "type": "decimal(10,2)"},
                    {"name": "created_at", "type": "timestamptz"},
                    {"name": "kafka_ts", "type": "timestamptz"},
                ],
                "metadata_columns": {"kafka_ts": "timestamp"},
                "partition_spec": ["bucket(4, order_id)"],
                "sort_order": ["order_id"],
            }
        ],
        # Rewrite every file in the demo's one compaction cycle, so that it visibly merges a minute's small files
        # and folds their position deletes in (an upsert table Floe creates deletes by position: no equality deletes).
        "compaction": {"rewrite_options": {"min-input-files": "2", "rewrite-all": "true"}},
    }
    path = work / "floe.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return load_config(path)


def table_stats(config: FloeConfig) -> TableStats:
    from commit.catalog.sql.catalog import SqlCatalog
    from table.scan import TableScan

    with SqlCatalog(config.catalog.connection_uri(), config.catalog.warehouse, config.catalog.name) as catalog:
        loaded = catalog.load_table(TABLE)
    metadata = loaded.metadata
    current = metadata.current_snapshot()
    summary = dict(current.summary) if current is not None else {}
    rows = TableScan(loaded.io, metadata).to_arrow().num_rows
    return TableStats(
        rows,
        len(metadata.snapshots),
        int(summary.get("total-data-files", 0)),
        int(summary.get("total-delete-files", 0)),
    )


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, {"table": TABLE, **labels}) or 0.0


def _gauge_values(registry: CollectorRegistry, name: str) -> list[float]:
    return [s.value for m in registry.collect() for s in m.samples if s.name == name and s.labels.get("table") == TABLE]


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


class _Progress:
    """Prints one progress line every few seconds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._started = time.monotonic()
        self._last = 0.0

    def __call__(self, produced: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < PROGRESS_SECONDS:
            return
        self._last = now
        r = self._registry
        lag = sum(_gauge_values(r, "floe_ingest_consumer_lag_records"))
        print(
            f"floe demo: [{now - self._started:5.0f}s] produced {produced} events; "
            f"{_sample(r, 'floe_ingest_batches_total', result='committed'):.0f} batches committed, "
            f"{_sample(r, 'floe_ingest_records_read_total'):.0f} records landed, lag {lag:.0f}",
            flush=True,
        )


def run_demo(options: DemoOptions, stop: threading.Event | None = None) -> int:
    """The demo; 0 when every step ran, 3 when stopped early, 1 when a step failed."""
    from runtime.signals import install_stop_signals
    from service.local_kafka import LocalKafka

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        install_stop_signals(stop, logging.getLogger("floe.demo"))
    work = options.work_dir
    work.mkdir(parents=True, exist_ok=True)
    there_before = frozenset(entry.name for entry in work.iterdir())
    print(f"floe demo: work directory {work}", flush=True)
    with LocalKafka(work / "kafka") as kafka:
        assert kafka.bootstrap is not None
        print(f"floe demo: local Kafka broker up at {kafka.bootstrap}", flush=True)
        _create_topic(kafka.bootstrap)
        config = demo_config(work, kafka.bootstrap)
        code = _ingest_and_compact(config, kafka.bootstrap, options, stop)
    print("floe demo: local Kafka broker stopped", flush=True)
    print(
        f"floe demo: the broker's data, the catalog and the table stay in {work}; "
        f"remove them with: {removal_command(work, there_before)}",
        flush=True,
    )
    return code


def removal_command(work: Path, there_before: frozenset[str]) -> str:
    """How to remove what the demo made: the whole directory only if it was empty before
    (``--work-dir`` may name a directory of the user's own)."""
    if not there_before:
        return f"rm -rf {shlex.quote(str(work))}"
    made = sorted(entry.name for entry in work.iterdir() if entry.name not in there_before)
    return "rm -rf " + " ".join(shlex.quote(str(work / name)) for name in made)


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[TOPIC].result(30)


def _ingest_and_compact(config: FloeConfig, bootstrap: str, options: DemoOptions, stop: threading.Event) -> int:
    from service.ingest_command import EXIT_QUERY_FAILED, run_ingest_service

    registry = CollectorRegistry()
    ingest_stop, ingest_ended = threading.Event(), threading.Event()
    outcome: dict[str, int] = {}

    def ingest() -> None:
        try:
            outcome["code"] = run_ingest_service(config, stop=ingest_stop, registry=registry, port=0)
        except Exception:
            log.exception("the ingest service failed")
        finally:
            ingest_ended.set()

    thread = threading.Thread(name="floe-demo-ingest", target=ingest)
    thread.start()
    progress = _Progress(registry)
    print("floe demo: starting Spark and the ingest query", flush=True)
    while registry.get_sample_value("floe_up", {"component": "ingest"}) != 1 and not ingest_ended.wait(0.5):
        if stop.is_set():
            break
    print(
        f"floe demo: producing about {options.rate} order events/s to {TOPIC} for {options.duration_s:.0f}s; "
        f"ingesting every {TRIGGER_SECONDS}s into {TABLE}",
        flush=True,
    )
    try:
        produced = produce_for(bootstrap, options, _AnyEvent(stop, ingest_ended), progress)
        _wait_caught_up(registry, produced, stop, thread, progress)
        lag = sum(_gauge_values(registry, "floe_ingest_consumer_lag_records"))
        freshness = max(_gauge_values(registry, "floe_ingest_freshness_seconds") or [float("nan")])
    finally:
        ingest_stop.set()
        thread.join()
    if outcome.get("code") == EXIT_QUERY_FAILED or "code" not in outcome:
        print("floe demo: ingestion failed; see the log above", flush=True)
        return 1
    before = table_stats(config)
    compaction = "skipped (stopped)" if stop.is_set() else _compact(config, stop)
    after = table_stats(config)
    _print_summary(produced, registry, before, after, lag, freshness, compaction)
    _print_how_to_query(config, options.work_dir)
    return 3 if stop.is_set() else 0


class _AnyEvent:
    """Set when any of its events is set: the producer stops on Ctrl-C and when ingest has died."""

    def __init__(self, *events: threading.Event) -> None:
        self._events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)

    def wait(self, timeout: float) -> bool:
        time.sleep(timeout)
        return self.is_set()


def _wait_caught_up(
    registry: CollectorRegistry, produced: int, stop: threading.Event, ingest: threading.Thread, progress: _Progress
) -> None:
    """Until ingest has read every produced event (or the user stops, or ingest ends)."""
    print(f"floe demo: produced {produced} events; waiting for ingest to land the rest", flush=True)
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while _sample(registry, "floe_ingest_records_read_total") < produced:
        if stop.is_set() or not ingest.is_alive() or time.monotonic() > deadline:
            return
        progress(produced)
        stop.wait(0.5)
    time.sleep(1.0)  # let the lag probe, poked by the last commit, refresh the gauges
    progress(produced, force=True)


def _compact(config: FloeConfig, stop: threading.Event) -> str:
    from compaction.metrics import CompactionMetrics
    from service.compact_command import build_runners

    print("floe demo: running one compaction cycle", flush=True)
    [runner] = build_runners(config, CompactionMetrics(CollectorRegistry()), stop)
    try:
        report = runner.run()
    finally:
        runner.catalog.close()
    return f"{report.result.value}, {len(report.groups)} file groups in {report.duration_s:.1f}s"


def _print_summary(
    produced: int,
    registry: CollectorRegistry,
    before: TableStats,
    after: TableStats,
    lag: float,
    freshness: float,
    compaction: str,
) -> None:
    batches = _sample(registry, "floe_ingest_batches_total", result="committed")
    print("floe demo: summary")
    for label, value in (
        ("events produced", produced),
        ("records landed", int(_sample(registry, "floe_ingest_records_read_total"))),
        ("batches committed", int(batches)),
        (f"rows in {TABLE}", after.rows),
        ("snapshots", f"{before.snapshots} before compaction, {after.snapshots} after"),
        ("data files", f"{before.data_files} before compaction, {after.data_files} after"),
        ("delete files", f"{before.delete_files} before compaction, {after.delete_files} after"),
        ("compaction", compaction),
        ("consumer lag", f"{lag:.0f} records"),
        ("freshness", f"{freshness:.1f} s (newest committed Kafka timestamp)"),
    ):
        print(f"  {label + ':':<20} {value}")


@dataclass(frozen=True)
class QueryHint:
    """One way to read the demo's table: what it is, and a shell command that works as printed."""

    label: str
    command: str


def query_hints(config: FloeConfig, work: Path) -> list[QueryHint]:
    """Commands that work verbatim (absolute paths, from any directory, no activated venv)."""
    bin_dir = Path(sys.executable).parent
    floe, uri, warehouse = shlex.quote(str(bin_dir / "floe")), config.catalog.uri, config.catalog.warehouse
    hints = [
        QueryHint(
            "the rows, with Floe",
            f"{floe} table --catalog-uri {shlex.quote(uri)} --warehouse "
            f"{shlex.quote(warehouse)} scan {TABLE} --limit 5",
        ),
        QueryHint(
            "the history, with Floe", f"{floe} table --config {shlex.quote(str(work / 'floe.yaml'))} history {TABLE}"
        ),
    ]
    if importlib.util.find_spec("pyiceberg") is not None:
        script = (
            f"from pyiceberg.catalog.sql import SqlCatalog; "
            f"catalog = SqlCatalog('floe', uri='{uri}', warehouse='file://{warehouse}'); "
            f"print(catalog.load_table('{TABLE}').scan().to_arrow().group_by('status').aggregate([('order_id', 'count')]))"
        )
        hints.append(QueryHint("with pyiceberg", f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"))
    spark_sql = bin_dir / "spark-sql"
    if spark_sql.exists():
        catalog = {
            "spark.sql.catalog.floe": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.floe.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            "spark.sql.catalog.floe.uri": f"jdbc:sqlite:{uri[len('sqlite:///') :]}",
            "spark.sql.catalog.floe.warehouse": warehouse,
        }
        confs = " ".join(f"--conf {k}={shlex.quote(v)}" for k, v in catalog.items())
        query = f"SELECT status, count(*) FROM floe.{TABLE} GROUP BY status"
        hints.append(
            QueryHint(
                "with Spark SQL and Iceberg's runtime",
                f"cd {shlex.quote(str(work))} && PATH={shlex.quote(str(bin_dir))}:$PATH {shlex.quote(str(spark_sql))} "
                f"{_iceberg_jars()} {confs} -e {shlex.quote(query)}",
            )
        )
    return hints


def _iceberg_jars() -> str:
    """Iceberg's Spark runtime and the SQLite JDBC driver: the local jar set, else from Maven Central."""
    from runtime.jars import JarsMissingError, jar_paths

    try:
        jars = [j for j in jar_paths("iceberg-oracle") if "iceberg-spark-runtime" in j or "sqlite-jdbc" in j]
    except JarsMissingError:
        jars = []
    if len(jars) == 2:
        return "--jars " + shlex.quote(",".join(jars))
    return f"--packages {ICEBERG_SPARK_RUNTIME},{SQLITE_JDBC}"


ICEBERG_SPARK_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"


def _print_how_to_query(config: FloeConfig, work: Path) -> None:
    print("floe demo: query the table (each command works as printed, from any directory)")
    for hint in query_hints(config, work):
        print(f"  {hint.label}:\n    {hint.command}")
