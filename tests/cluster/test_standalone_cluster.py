"""Floe beyond one machine: `floe ingest` and `floe compact` on a Spark standalone cluster.

A master and two one-core workers (pyspark's own jars) on loopback; the
warehouse and the checkpoint on S3Proxy; the catalog on PostgreSQL. Ingest
runs in upsert mode while the compactor runs alongside with its `spark`
executor on the same cluster; both share the two cores through dynamic
allocation. The producer keeps the topic a batch ahead of the table's
committed offsets, so batches keep coming however fast the machine is; once
two batches are committed, the worker running one of ingest's tasks is
killed with SIGKILL, as a host that dies, and started again once the master
counts it dead. At the end Floe's reader and Iceberg Java (S3FileIO, JDBC
catalog on the same PostgreSQL) return exactly the rows the records imply,
and the executors' own logs show tasks on both workers.

Ingest reads with Floe's own Kafka source (``kafka.reader: python``): the
executors read their offset ranges from Kafka themselves, so the lost
worker's tasks are retried elsewhere and read exactly their ranges again.
Spark's Kafka source runs the same Floe code on the executors after it, and
is covered on a cluster by the benchmark (``bench/ingest.py --spark-master``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import yaml

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.errors import NoSuchCatalog
from commit.exactly_once import committed_offsets
from table.io import FileIO
from table.metadata import TableMetadata
from table.scan import TableScan
from tests.commit.test_catalog_oracles import use_jdbc_catalog
from tests.ingest.e2e_support import Delivered, change_events, expected_table, normalized, produce
from tests.support.s3proxy import ACCESS_KEY, REGION, SECRET_KEY, s3_file_io_properties
from tests.support.spark_cluster import SparkCluster, app_task_counts, running_tasks

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]
REPO = Path(__file__).resolve().parents[2]
KEYS, PARTITIONS = 1_500, 2
MAX_OFFSETS = 1_000
STREAM = 200_000  # change events to produce from, as far as the run needs (about 6,000; more while a task is sought)
SHARED_CORES = {  # two apps, two one-core workers: an idle app gives its executors back
    "spark.executor.cores": "1",
    "spark.executor.memory": "1g",
    "spark.dynamicAllocation.enabled": "true",
    "spark.dynamicAllocation.shuffleTracking.enabled": "true",
    "spark.dynamicAllocation.shuffleTracking.timeout": "5s",
    "spark.dynamicAllocation.executorIdleTimeout": "3s",
    # dynamic allocation starts executor JVMs again and again: C1 alone, as the tests' drivers (tests/conftest.py)
    "spark.executor.extraJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", ""),
    "spark.dynamicAllocation.schedulerBacklogTimeout": "1s",
}


def floe_config(tmp_path: Path, *, bootstrap: str, topic: str, catalog_uri: str, catalog_name: str, store: str,
                master: str, s3_endpoint: str) -> Path:
    spark = {"master": master, "driver_host": "127.0.0.1", "bind_address": "127.0.0.1"}
    data = {
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": MAX_OFFSETS, "reader": "python"},
        "catalog": {"uri": catalog_uri, "name": catalog_name, "warehouse": f"{store}/warehouse"},
        "checkpoint_location": f"{store.replace('s3://', 's3a://')}/checkpoints",
        "storage": {"s3": {"endpoint": s3_endpoint, "region": REGION, "path_style_access": True,
                           "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}},
        "spark": {**spark, "conf": {**SHARED_CORES, "spark.dynamicAllocation.maxExecutors": "2"}},
        "trigger": {"processing_time": "2s"},
        "http": {"ingest_port": 0, "compact_port": 0},
        "compaction": {"executor": "spark", "interval": "5s", "jitter": "0s",
                       "rewrite_options": {"min-input-files": "2"},
                       "spark": {**spark, "conf": {**SHARED_CORES, "spark.dynamicAllocation.maxExecutors": "1"}}},
        "log_format": "json",
        "tables": [{
            "identifier": "db.events", "topics": [topic], "format": "json", "mode": "upsert", "key": ["id"],
            "op": {"field": "op"}, "partition_spec": ["bucket(4, id)"],
            "schema": [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"},
                       {"name": "amount", "type": "double"}, {"name": "event_ts", "type": "timestamptz"},
                       {"name": "version", "type": "long"}],
        }],
    }
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start(command: str, config: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", command, "--config", str(config)], cwd=REPO,
                                stdout=out, stderr=out, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.log_path = log  # type: ignore[attr-defined]  # read back into the failure when the process ends early
    return proc


def tail(proc: subprocess.Popen, chars: int = 6000) -> str:
    return proc.log_path.read_text(errors="replace")[-chars:]  # type: ignore[attr-defined]


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float, *procs: subprocess.Popen,
             poll_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, \
                f"a floe process exited with {proc.returncode} while waiting for {what}; its log ends:\n{tail(proc)}"
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def stop(proc: subprocess.Popen) -> int:
    """SIGTERM to the floe process alone, as Kubernetes sends it; the process group only if it hangs."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=30)


class Feed(threading.Thread):
    """Keeps the topic ``MAX_OFFSETS`` records ahead of what the table has committed until stopped: a batch
    always waits, so ingest is busy when the worker is killed, whatever the machine's speed."""

    def __init__(self, bootstrap: str, topic: str, committed: Callable[[], int]) -> None:
        super().__init__(name="cluster-feed", daemon=True)
        self.bootstrap, self.topic, self.committed = bootstrap, topic, committed
        self.events = [e for e in change_events(STREAM, KEYS, seed=5) if e.value is not None]  # no tombstones
        self.delivered: list[Delivered] = []
        self.stop = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                start = len(self.delivered)
                missing = self.committed() + MAX_OFFSETS - start
                if missing > 0:
                    assert start + missing <= len(self.events), f"the change stream ran out at {start} events"
                    self.delivered += produce(self.bootstrap, self.topic, self.events[start:start + missing])
                self.stop.wait(0.5)
        except BaseException as error:  # reported by the test
            self.error = error


def test_upserts_on_a_cluster_with_s3_and_postgresql_survive_a_lost_worker(
        tmp_path: Path, kafka_bootstrap: str, new_topic, s3proxy, postgres_uri: str, iceberg_oracle) -> None:
    topic = new_topic("cluster", partitions=PARTITIONS)
    store = s3proxy.create_bucket(f"cluster-{uuid.uuid4().hex[:12]}")
    name = f"cl_{uuid.uuid4().hex[:8]}"

    def table() -> Optional[TableMetadata]:
        try:
            with SqlCatalog(postgres_uri, f"{store}/warehouse", name, create=False) as catalog:
                return catalog.load_table("db.events").metadata if catalog.table_exists("db.events") else None
        except NoSuchCatalog:  # the first ingest has not created it yet
            return None

    def snapshots() -> list[Any]:
        metadata = table()
        return [] if metadata is None else list(metadata.snapshots)

    def batches() -> int:
        return sum(1 for s in snapshots() if "floe.batch-id" in s.summary)

    def committed() -> dict[int, int]:
        metadata = table()
        return {} if metadata is None else committed_offsets(metadata).get(topic, {})

    feed = Feed(kafka_bootstrap, topic, lambda: sum(committed().values()))
    with SparkCluster(tmp_path / "cluster", workers=2) as cluster:
        config = floe_config(tmp_path, bootstrap=kafka_bootstrap, topic=topic, catalog_uri=postgres_uri,
                             catalog_name=name, store=store, master=cluster.master_url, s3_endpoint=s3proxy.endpoint)
        ingest = start("ingest", config, tmp_path / "ingest.log")
        compact = start("compact", config, tmp_path / "compact.log")
        try:
            feed.start()
            wait_for(lambda: batches() >= 2, "two committed batches", 300, ingest, compact)
            busy = wait_for(lambda: [i for i, tids in running_tasks(cluster, "floe-ingest").items() if tids],
                            "a worker running an ingest task", 300, ingest, compact, poll_s=0.05)
            assert feed.error is None, feed.error
            cluster.kill_worker(busy[0])
            cluster.start_worker(busy[0])
            after = batches()
            wait_for(lambda: batches() > after, "a batch committed after the worker came back", 300, ingest, compact)
            feed.stop.set()
            feed.join(60)
            assert feed.error is None, feed.error
            ends = {p: max(d.offset for d in feed.delivered if d.partition == p) + 1 for p in range(PARTITIONS)}

            def all_committed() -> bool:
                offsets = committed()
                return all(offsets.get(p, 0) >= end for p, end in ends.items())

            wait_for(all_committed, "every offset committed", 600, ingest, compact)
            wait_for(lambda: any(s.summary.get("operation") == "replace" for s in snapshots()),
                     "a compaction commit", 300, ingest, compact)
        finally:
            feed.stop.set()
            codes = stop(ingest), stop(compact)
        logs = (tmp_path / "ingest.log").read_text()[-3000:] + (tmp_path / "compact.log").read_text()[-3000:]
        assert codes == (3, 3), logs  # both stopped on request (SIGTERM), neither failed
        ingest_tasks = app_task_counts(cluster, "floe-ingest")

    delivered = feed.delivered
    print(f"killed worker {busy[0]} while it ran ingest task(s); {len(delivered)} events")
    expected = expected_table(delivered)
    with SqlCatalog(postgres_uri, f"{store}/warehouse", name) as catalog:
        loaded = catalog.load_table("db.events")
    assert normalized(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()) == expected
    use_jdbc_catalog(iceberg_oracle, name, postgres_uri, f"{store}/warehouse", **s3_file_io_properties(s3proxy),
                     **{"cache-enabled": "false"})
    assert normalized(iceberg_oracle.sql(f"SELECT * FROM {name}.db.events")) == expected
    assert all(count > 0 for count in ingest_tasks.values()) and len(ingest_tasks) == 2, ingest_tasks

