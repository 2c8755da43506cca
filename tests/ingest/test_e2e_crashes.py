"""End to end: the ingest process is SIGKILLed at random points and restarted on its checkpoint,
while the compactor runs alongside.

``python -m ingest`` runs in its own process group (driver, JVM and Python
workers), which is killed outright at least five times: during start-up,
between batches, in the middle of decoding, writing or committing. Each
restart resumes from the same checkpoint. Meanwhile a compactor in this
process rewrites small files again and again. The final table must equal the
expected one: no duplicate row, no lost change, no resurrected delete. The
table is an upsert table under the position delete strategy: at every
snapshot ``main`` holds no equality delete, and Floe's reader, Iceberg Java
and pyiceberg return exactly the rows of the batches committed so far; the
key index checks clean at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest
from prometheus_client import CollectorRegistry
from pyiceberg.table import StaticTable

from commit.catalogs import open_catalog
from commit.exactly_once import committed_offsets
from commit.key_index.manifest import describes
from commit.key_index.rebuild import index_problems
from commit.key_index.store import current_manifest
from compaction.maintenance import MaintenanceOptions
from compaction.metrics import CompactionMetrics
from compaction.runner import CompactionOptions, CompactionRunner, RunReport, RunResult
from ingest.job import job_to_json
from table.io import FileIO
from table.metadata import MAIN_BRANCH
from table.scan import TableScan
from tests.ingest.e2e_support import (
    batch_lines,
    change_events,
    check_v3_snapshot,
    expected_table,
    normalized,
    produce,
    start_ingest,
    upsert_job,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

# 14 batches: enough for 5 kills (each kill comes after a committed batch, and costs at most that batch) with the
# suite inside 30 minutes (the REST case: 7 batches for 3 kills).
EVENTS = 10_500
KEYS = 3_000
PARTITIONS = 3
MAX_OFFSETS = 750
KILLS = 5
BUCKETED = (("bucket[4]", "id"),)
START_TIMEOUT_S = 120.0


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the driver, its JVM and Python workers; wait until all are gone."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError(f"process group {proc.pid} survived SIGKILL")


def wait_for_batches(proc: subprocess.Popen, log: Path, seen: int, timeout_s: float) -> bool:
    """Wait until the log has more batch lines than ``seen``; False if the process ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(batch_lines(log)) > seen:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    raise AssertionError(f"no batch within {timeout_s}s; see {log}")


class Compactor(threading.Thread):
    """Compaction runs, one every second, on the ingest table (no expiry: every snapshot stays readable)."""

    def __init__(self, uri: str, warehouse: str, identifier: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.warehouse, self.identifier = uri, warehouse, identifier
        self.stop = threading.Event()
        self.reports: list[RunReport] = []
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        options = CompactionOptions({"target-file-size-bytes": str(64 * 1024), "min-input-files": "2",
                                     "partial-progress.enabled": "true"},
                                    MaintenanceOptions(expire_snapshots=False, remove_orphans=False))
        try:
            with open_catalog(self.uri, self.warehouse) as catalog:
                while not self.stop.wait(1.0):
                    if catalog.table_exists(self.identifier):
                        runner = CompactionRunner(catalog, self.identifier, options, CompactionMetrics(CollectorRegistry()))
                        self.reports.append(runner.run())
        except BaseException as error:  # reported by the test
            self.error = error


# Both sources are killed 5 times: Spark's Kafka source in the v2 case, Floe's own (kafka.reader: python)
# in the v3 case (which source reads does not change what is written). The v2 cases write a bucketed table
# after an exchange by key; the v3 case an unpartitioned one from its decode tasks (the direct upsert).
@pytest.mark.parametrize(("format_version", "through_rest", "least_kills", "events", "reader", "partition", "write"),
                         [(2, False, KILLS, EVENTS, "spark", BUCKETED, "exchange"),
                          (3, False, KILLS, EVENTS, "python", (), "direct-upsert"),
                          (2, True, 3, EVENTS // 2, "spark", BUCKETED, "exchange")],
                         ids=["v2-position-deletes", "v3-deletion-vectors-python-source-direct-upsert",
                              "v2-through-the-rest-catalog"])
def test_sigkill_at_random_points_loses_and_duplicates_nothing(kafka_bootstrap, new_topic, iceberg_oracle, tmp_path: Path,
                                                               format_version: int, through_rest: bool,
                                                               least_kills: int, events: int, reader: str,
                                                               partition: tuple, write: str,
                                                               request: pytest.FixtureRequest):
    topic = new_topic("e2e-crash", partitions=PARTITIONS)
    delivered = produce(kafka_bootstrap, topic, change_events(events, KEYS, seed=5))
    expected = expected_table(delivered)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS, partition=partition)
    job = dataclasses.replace(job, table=dataclasses.replace(job.table, format_version=format_version),
                              source=dataclasses.replace(job.source, reader=reader))
    if through_rest:  # every commit, the ingest's and the compactor's, through Iceberg's REST server
        server = request.getfixturevalue("rest_catalog_server")
        job = dataclasses.replace(job, catalog=dataclasses.replace(job.catalog, uri=server.uri))
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job_to_json(job)))
    log = tmp_path / "ingest.log"
    rng = random.Random(1234)

    compactor = Compactor(job.catalog.uri, job.catalog.warehouse, job.table.identifier)
    compactor.start()
    kills = 0
    while kills < least_kills:
        proc = start_ingest(job_file, log)
        seen = len(batch_lines(log))
        if kills == 0:
            time.sleep(rng.uniform(2.0, 6.0))  # during start-up: JVM, session, table set-up
        else:
            if not wait_for_batches(proc, log, seen, START_TIMEOUT_S):
                break  # it finished everything before we could kill it
            # At once (a commit just landed: Spark may not have recorded it yet), or
            # somewhere in the next batch: decoding, writing or committing.
            time.sleep(0.0 if kills == 1 else rng.uniform(0.0, 5.0))
        if proc.poll() is not None:
            break
        kill_group(proc)
        kills += 1
    assert kills >= least_kills, f"only {kills} kills happened; the run finished too quickly"

    final = start_ingest(job_file, log)
    assert final.wait(timeout=600) == 0, f"the last run failed; see {log}"
    compactor.stop.set()
    compactor.join(120)
    assert compactor.error is None, compactor.error
    assert [r.result for r in compactor.reports if r.result not in (RunResult.SUCCESS, RunResult.PARTIAL)] == []
    assert sum(len(r.groups) for r in compactor.reports) > 0, "the compactor never rewrote anything"

    with open_catalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    ends = {p: max(d.offset for d in delivered if d.partition == p) + 1 for p in range(PARTITIONS)}
    assert committed_offsets(loaded.metadata) == {topic: ends}
    got = normalized(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow())
    missing = sorted(set(expected) - set(got))[:5]
    resurrected = sorted(set(got) - set(expected))[:5]
    assert not missing and not resurrected, f"missing {missing}, resurrected {resurrected}"
    assert got == expected
    batches = [s for s in loaded.metadata.snapshots if "floe.batch-id" in s.summary]
    batch_ids = [(s.summary["floe.writer-id"], s.summary["floe.batch-id"]) for s in batches]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was committed twice"
    written = {line["write"] for line in batch_lines(log) if line.get("result") == "committed"}
    assert written == {write}, f"the batches were written {written}, not {write}"
    assert loaded.metadata.format_version == format_version
    if format_version >= 3:
        last = loaded.metadata.current_snapshot()
        assert loaded.metadata.next_row_id == last.first_row_id + last.added_rows
    if through_rest:  # the final rows, each engine through its own REST client (every snapshot: the cases above)
        assert_rest_readers(job.catalog.uri, job.table.identifier, expected, iceberg_oracle)
    else:
        assert_every_snapshot(loaded, delivered, topic, iceberg_oracle)


def assert_rest_readers(uri: str, identifier: str, expected: dict, oracle: Any) -> None:
    """Iceberg Java and pyiceberg, each through its own REST catalog client, read the final rows."""
    from pyiceberg.catalog import load_catalog

    rest = load_catalog("floe_rest", type="rest", uri=uri)
    assert normalized(rest.load_table(identifier).scan().to_arrow()) == expected, "pyiceberg through REST"
    name = f"rest_{os.getpid()}_{abs(hash(uri)) % 10_000}"
    oracle.conf(**{f"spark.sql.catalog.{name}": "org.apache.iceberg.spark.SparkCatalog",
                   f"spark.sql.catalog.{name}.type": "rest", f"spark.sql.catalog.{name}.uri": uri,
                   f"spark.sql.catalog.{name}.cache-enabled": "false"})
    assert normalized(oracle.sql(f"SELECT * FROM {name}.{identifier}")) == expected, "Iceberg Java through REST"


def assert_every_snapshot(loaded: Any, delivered: list[Any], topic: str, oracle: Any) -> None:
    """At every snapshot of ``main``: no equality delete, and exactly the committed rows in every engine.

    Iceberg Java reads the whole history in one Spark job, a scan per snapshot.
    """
    metadata = loaded.metadata
    io = FileIO.for_location(loaded.metadata_location)
    static = StaticTable.from_metadata(loaded.metadata_location)
    snapshots = list(metadata.ancestors_of(metadata.current_snapshot().snapshot_id))
    java = oracle.call("tests.support.oracle_ops:read_snapshots_by_metadata_location",
                       metadata_location=loaded.metadata_location, snapshot_ids=[s.snapshot_id for s in snapshots])
    java_by_snapshot = java.column("_snapshot").to_numpy()
    for snapshot in snapshots:
        at = metadata.set_branch(MAIN_BRANCH, snapshot.snapshot_id)
        ends = committed_offsets(at).get(topic, {})
        expected = expected_table([d for d in delivered if d.offset < ends.get(d.partition, 0)])
        tasks = list(TableScan(io, at, ref=MAIN_BRANCH).plan_files())
        assert not any(t.equality_deletes for t in tasks), f"snapshot {snapshot.snapshot_id} has equality deletes"
        if metadata.format_version >= 3:  # deletion vectors only, one per data file at most; row ids
            check_v3_snapshot(snapshot, tasks)
        assert normalized(TableScan(io, metadata, snapshot_id=snapshot.snapshot_id).to_arrow()) == expected
        assert normalized(static.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == expected
        rows = java.filter(java_by_snapshot == snapshot.snapshot_id).drop_columns(["_snapshot"])
        assert normalized(rows) == expected, f"Iceberg Java at snapshot {snapshot.snapshot_id}"
    manifest = current_manifest(io, metadata)
    assert manifest is not None and describes(manifest, metadata)
    assert index_problems(io, metadata, manifest) == []
