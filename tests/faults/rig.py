"""One running ``floe ingest`` under a fault, and what the fault tests measure of it.

The rig lands ``tables`` upsert tables (``db.t0``, ``db.t1``, ...) from
topics of their own in one shared query on Floe's source, with records paced
into every topic throughout (so the run never catches up and idles before a
fault is over). It reads what an operator reads: the JSON log, ``/metrics``,
``/readyz``, and the alerts a real Prometheus raises from Floe's own rules. At the end it drains the topics, stops Floe with SIGTERM and
checks every table against the records that Kafka acknowledged, in Floe's
reader and in Iceberg Java, and every partition's committed offset against
the topic's end: every offset landed exactly once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, TopicPartition

from commit.catalog import open_catalog
from commit.exactly_once import committed_offsets
from service.ingest_command import EXIT_STOPPED
from service.local_kafka import free_port
from table.scan import TableScan
from tests.ingest.e2e_support import (
    REPO,
    T0,
    Event,
    PacedProducer,
    change_events,
    create_topic,
    expected_table,
    json_log_records,
    normalized,
    produce,
)
from tests.service.test_ingest_command import EVENT_COLUMNS, events_config, http_get
from tests.support.prometheus import PrometheusServer

FLOE = [sys.executable, "-m", "service.cli"]
STACK_TRACE = re.compile(r"Traceback \(most recent call last\)|^\s+at [\w.$]+\(|py4j\.protocol", re.M)
RATE_PAUSE_S = 0.5  # a chunk of records into each topic every half second
KEYS = 300


@dataclasses.dataclass
class Commit:
    """One table's committed batch, as its log line tells it."""

    table: str
    at: float  # Unix seconds


class FaultRig:
    """``with FaultRig(...) as rig:`` starts Floe and the producers; :meth:`finish` drains, stops and checks."""

    def __init__(self, tmp: Path, bootstrap: str, catalog: dict[str, Any], *, tables: int = 2, appends: int = 0,
                 table: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None, rate: int = 40, events: int = 60_000) -> None:
        """``tables`` upsert tables db.t<i> and ``appends`` append tables db.a<i>, each on a topic of two
        partitions, fed ``rate`` records a second (``events`` at most); ``table``: settings for every table;
        ``extra``: more top-level settings."""
        self.tmp, self.bootstrap, self.env = tmp, bootstrap, env
        self.tables = [f"db.t{i}" for i in range(tables)]
        self.appends = [f"db.a{i}" for i in range(appends)]
        self.topic = {name: create_topic(bootstrap, f"fault-{name[3:]}", partitions=2)
                      for name in self.tables + self.appends}
        self.port = free_port()
        entries = [{**events_config(tmp, bootstrap, self.topic[name])["tables"][0], **(table or {}),
                    "identifier": name} for name in self.tables]
        entries += [{"identifier": name, "topics": [self.topic[name]], "schema": EVENT_COLUMNS, **(table or {})}
                    for name in self.appends]
        self.config = {
            "kafka": {"bootstrap_servers": bootstrap, "reader": "python", "max_offsets_per_trigger": 1000},
            "catalog": catalog,
            "checkpoint_location": str(tmp / "checkpoints"),
            "trigger": {"processing_time": "1s"},
            "readiness": {"max_commit_age": "5m"},
            "http": {"host": "127.0.0.1", "ingest_port": self.port, "compact_port": free_port()},
            "ingest": {"query": "shared"},
            "log_format": "json",
            "tables": entries,
            **(extra or {}),
        }
        self.path = tmp / "floe.yaml"
        self.path.write_text(yaml.safe_dump(self.config))
        self.log = tmp / "ingest.log"
        self.runs = 0
        self.process: subprocess.Popen[bytes] | None = None
        chunk = max(1, round(rate * RATE_PAUSE_S))
        self.producers: dict[str, PacedProducer] = {
            name: PacedProducer(bootstrap, self.topic[name], change_events(events, KEYS, seed=i), chunk,
                                RATE_PAUSE_S) for i, name in enumerate(self.tables)}
        self.producers.update({name: AppendProducer(bootstrap, self.topic[name], 10_000_000 * (i + 1), events, chunk)
                               for i, name in enumerate(self.appends)})

    # -- running --------------------------------------------------------------------------------------------

    def __enter__(self) -> FaultRig:
        self.prometheus = PrometheusServer(self.tmp / "prometheus", [f"127.0.0.1:{self.port}"]).__enter__()
        self.start()
        for producer in self.producers.values():
            producer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for producer in self.producers.values():
            producer.finish.set()
        if self.process is not None and self.process.poll() is None:
            self.kill()
        self.prometheus.stop()

    def start(self) -> None:
        """Start ``floe ingest`` (again, appending to the same log)."""
        self.runs += 1
        with self.log.open("ab") as out:
            self.process = subprocess.Popen([*FLOE, "ingest", "--config", str(self.path)], cwd=REPO, stdout=out,
                                            stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL to Floe's whole process group (its Spark JVM too), as a lost node ends it."""
        process = self.running()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(60)

    def produce(self, table: str, events: list[Any]) -> None:
        """More records into ``table``'s topic, beside its paced ones, and expected in it."""
        self.producers[table].delivered.extend(produce(self.bootstrap, self.topic[table], events))

    def running(self) -> subprocess.Popen[bytes]:
        assert self.process is not None
        return self.process

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float = 180.0) -> float:
        """Wait until ``condition``; the seconds it took. Floe ending, or the timeout, fails with the log."""
        began = time.monotonic()
        while not condition():
            code = self.running().poll()
            assert code is None, f"floe ingest ended (exit {code}) while waiting for {what}:\n{self.tail()}"
            assert time.monotonic() - began < timeout_s, f"not within {timeout_s:.0f}s: {what}:\n{self.tail()}"
            time.sleep(0.25)
        return time.monotonic() - began

    def stop(self) -> int:
        """SIGTERM, as Kubernetes stops a pod; the exit code."""
        process = self.running()
        process.send_signal(signal.SIGTERM)
        return process.wait(180)

    # -- what an operator reads -----------------------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        return json_log_records(self.log.read_text(errors="replace"))

    def commits(self, table: str | None = None) -> list[Commit]:
        found = []
        for record in self.records():
            if record.get("logger") == "floe.ingest" and re.match(r"batch \d+ committed", record["message"]) \
                    and (table is None or record.get("table") == table):
                found.append(Commit(record["table"], _unix(record["ts"])))
        return found

    def committed_since(self, table: str, since: float) -> bool:
        return any(c.at >= since for c in self.commits(table))

    def lines_between(self, since: float, until: float, level: str = "WARNING") -> list[str]:
        """Floe's own lines at ``level`` or above logged in [since, until] (Unix seconds)."""
        levels = {"WARNING": ("WARNING", "ERROR", "CRITICAL"), "ERROR": ("ERROR", "CRITICAL")}[level]
        return [r["message"] for r in self.records()
                if r.get("level") in levels and since <= _unix(r["ts"]) <= until]

    def metric(self, name: str, table: str, **labels: str) -> float | None:
        """The sum of ``name``'s samples of ``table`` (and ``labels``); None when /metrics does not answer or
        has none."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            _, text = http_get(f"http://127.0.0.1:{self.port}/metrics")
        except OSError:
            return None
        wanted = {"table": table, **labels}
        samples = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items())]
        return sum(samples) if samples else None

    def alerted(self, alert: str, tables: list[str], since: float, quiet: tuple[str, ...] = ()) -> float:
        """Assert that Prometheus raised ``alert`` (pending, or firing once its ``for:`` ran out) for each of
        ``tables`` since ``since`` (Unix seconds), for none of ``quiet``, and that it has cleared; the
        longest span's seconds."""
        self.wait_for(f"{alert} cleared", lambda: not self.prometheus.active(alert), 60)
        spans = self.prometheus.alerted(alert, since, time.time())
        raised = {s.labels.get("table") for s in spans}
        assert set(tables) <= raised and not raised & set(quiet), \
            f"{alert} raised for {sorted(tables)}, not for {sorted(quiet)}: {spans}"
        return max(s.ended - s.began for s in spans)

    def ready(self) -> tuple[int, str]:
        return http_get(f"http://127.0.0.1:{self.port}/readyz")

    def tail(self, lines: int = 30) -> str:
        kept = [line for line in self.log.read_text(errors="replace").splitlines()
                if '"level": "INFO"' not in line and '"level": "DEBUG"' not in line]
        return "\n".join(kept[-lines:])

    # -- the end: drained, stopped, exact -------------------------------------------------------------------

    def finish(self, java_read: Callable[[Any], Any], catalog: dict[str, Any] | None = None) -> None:
        """Stop producing, wait until every table committed every offset, stop Floe, check every table
        (``java_read`` reads a loaded table in Iceberg Java: :func:`by_metadata_location`, say)."""
        delivered = {name: producer.stop() for name, producer in self.producers.items()}
        ends = {name: end_offsets(self.bootstrap, topic) for name, topic in self.topic.items()}
        with self.catalog(catalog) as opened:
            def drained() -> bool:
                return all(_offsets(opened, name) == {self.topic[name]: ends[name]} for name in self.topic)

            self.wait_for("every offset committed", drained, timeout_s=300)
            assert self.stop() == EXIT_STOPPED, self.tail()
            for name in self.topic:
                loaded = opened.load_table(name)
                floe, java = TableScan(loaded.io, loaded.metadata).to_arrow(), java_read(loaded)
                if name in self.appends:
                    want = Counter(json.loads(d.event.value)["id"] for d in delivered[name])
                    assert Counter(floe.column("id").to_pylist()) == want, f"{name}: each record once (Floe)"
                    assert Counter(java.column("id").to_pylist()) == want, f"{name}: each record once (Java)"
                else:
                    want = expected_table(delivered[name])
                    assert normalized(floe) == want, f"{name} (Floe)"
                    assert normalized(java) == want, f"{name} (Iceberg Java)"
        text = self.log.read_text(errors="replace")
        assert not STACK_TRACE.search(text), "no traceback below DEBUG:\n" + text[-4000:]

    @contextmanager
    def catalog(self, catalog: dict[str, Any] | None = None) -> Iterator[Any]:
        """Floe's catalog, as configured (or as ``catalog`` says, e.g. around a proxy that drops answers)."""
        settings = catalog or self.config["catalog"]
        opened = open_catalog(settings["uri"], settings["warehouse"], settings.get("name", "floe"), create=False)
        try:
            yield opened
        finally:
            opened.close()


class AppendProducer(PacedProducer):
    """Append records with ids ``first``, ``first + 1``, ... into both partitions in turn, or only into
    partition 0 once :attr:`one_partition` is set (partition 1 then sits idle)."""

    def __init__(self, bootstrap: str, topic: str, first: int, count: int, chunk: int) -> None:
        events = [Event(json.dumps(i).encode(), json.dumps({"id": i, "name": f"a{i}", "amount": i / 4,
                                                            "event_ts": T0.isoformat(), "version": 1}).encode())
                  for i in range(first, first + count)]
        super().__init__(bootstrap, topic, events, chunk, RATE_PAUSE_S)
        self.one_partition = threading.Event()

    def run(self) -> None:
        try:
            while not self.finish.is_set():
                spread = 1 if self.one_partition.is_set() else 2
                self.delivered.extend(produce(self.bootstrap, self.topic, self.more(self.chunk), round_robin=spread))
                self.started.set()
                self.finish.wait(self.pause_s)
        except BaseException as error:  # noqa: BLE001 - reported by stop()
            self.error = error
            self.started.set()


def by_metadata_location(oracle: Any) -> Callable[[Any], Any]:
    """Iceberg Java reading a loaded table from its metadata file, on local disk."""
    return lambda loaded: oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                                      metadata_location=loaded.metadata_location)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset (the next offset a producer writes)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fault-rig"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    finally:
        consumer.close()


def _offsets(catalog: Any, table: str) -> dict[str, dict[int, int]]:
    try:
        return committed_offsets(catalog.load_table(table).metadata)
    except Exception:  # noqa: BLE001 - not created yet, or the catalog is still coming back
        return {}


def _unix(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
