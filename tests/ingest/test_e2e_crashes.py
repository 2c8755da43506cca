"""End to end: the ingest process is SIGKILLed at chosen points and restarted on its checkpoint,
while the compactor runs alongside.

``python -m ingest`` runs in its own process group (driver, JVM and Python
workers), which is killed outright four times (twice through the REST
catalog): in the middle of a batch (decoding, writing or committing), right
after a commit, and during start-up (its JVM up, or its query just started).
Each restart resumes from the same checkpoint. Every kill waits for a state of the run, never for time
alone: before each start the topic is topped up to several batches beyond
what the table has committed, so the run is still busy when its kill point
comes on a fast machine as on a slow one; a run that drains the topic anyway
is followed by more input and another start, not by the end of the loop.
Meanwhile a compactor in this process rewrites small files again and again.
The final table must equal the one every delivered change implies: no
duplicate row, no lost change, no resurrected delete. The table is an upsert
table under the position delete strategy: at every snapshot ``main`` holds no
equality delete, and Floe's reader, Iceberg Java and pyiceberg return exactly
the rows of the batches committed so far; the key index checks clean at the
end.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from prometheus_client import CollectorRegistry
from pyiceberg.table import StaticTable

from commit.catalog import open_catalog
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
    Delivered,
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

KEYS = 3_000
PARTITIONS = 3
MAX_OFFSETS = 750
# Before each start the topic holds at least this many records beyond what the table has committed: four batches.
# A run killed mid-batch (after its second batch, within one batch's time) then still has a batch to go when the
# kill comes; one killed at start-up or right after its first commit has more.
BACKLOG = 4 * MAX_OFFSETS
STREAM = 40_000  # the change stream the loop produces from, as far as it needs (about 4,000 for 4 kills)
BUCKETED = (("bucket[4]", "id"),)
STATE_TIMEOUT_S = 180.0


class Kill(enum.Enum):
    """Where a run is killed. Each point is a state of the run (a process, a log line), not a time."""

    START_UP = "start-up"  # its JVM is up: the session, the table set-up or the query start is under way
    QUERY_STARTED = "query started"  # its query just started: the first batch is being planned
    AFTER_COMMIT = "after a commit"  # a commit just landed: Spark may not have recorded it yet
    MID_BATCH = "mid-batch"  # within the batch after its second one: decoding, writing or committing


# The v2 and v3 cases take all four; the REST case the first two, the points where a commit through
# the REST catalog is in flight or has just landed.
SCHEDULE = (Kill.MID_BATCH, Kill.AFTER_COMMIT, Kill.START_UP, Kill.QUERY_STARTED)


class Feed:
    """The change stream, produced as far as the kill loop needs it; ``delivered`` is everything produced."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.events = change_events(STREAM, KEYS, seed=5)
        self.delivered: list[Delivered] = []

    def top_up(self, committed: int) -> None:
        """Produce until the topic holds ``BACKLOG`` records beyond the ``committed`` ones."""
        start = len(self.delivered)
        missing = committed + BACKLOG - start
        if missing > 0:
            assert start + missing <= len(self.events), f"the change stream ran out at {start} events"
            self.delivered += produce(self.bootstrap, self.topic, self.events[start:start + missing])


def committed_records(job: Any, topic: str) -> int:
    """How many records of ``topic`` the table has committed (offsets start at 0: a new topic, no transactions)."""
    with open_catalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        if not catalog.table_exists(job.table.identifier):
            return 0
        return sum(committed_offsets(catalog.load_table(job.table.identifier).metadata).get(topic, {}).values())


def kill_group(proc: subprocess.Popen) -> bool:
    """SIGKILL the driver, its JVM and Python workers; wait until all are gone.

    True when the SIGKILL ended the run, False when its driver had already exited on its own.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the whole group had exited (its driver reaped by a poll): nothing left to kill
        pass
    code = proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return code == -signal.SIGKILL
        time.sleep(0.2)
    raise AssertionError(f"process group {proc.pid} survived SIGKILL")


def jvm_running(pgid: int) -> bool:
    """Whether a java process runs in the process group ``pgid`` (the ingest's Spark JVM)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid and Path(entry.path, "comm").read_text().strip() == "java":
                return True
        except (ProcessLookupError, FileNotFoundError):  # a process that ended while we looked is not the JVM
            continue
    return False


def query_starts(log: Path) -> int:
    """How many ``ingest query ... started`` lines the log has."""
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if line.startswith("{") and '"ingest query ' in line and " started (id " in line)


def await_state(proc: subprocess.Popen, reached: Callable[[], bool], what: str, log: Path) -> bool:
    """Wait until ``reached()``; False if the run ended first."""
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while not reached():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"no {what} within {STATE_TIMEOUT_S}s; see {log}"
        time.sleep(0.05)
    return True


def reach(point: Kill, proc: subprocess.Popen, log: Path, batches: int, starts: int, rng: random.Random) -> bool:
    """Wait for ``point`` in the run ``proc``, whose log had ``batches`` batch and ``starts`` query-start lines
    before it; False if the run ended first."""
    if point is Kill.START_UP:
        if not await_state(proc, lambda: jvm_running(proc.pid), "JVM", log):
            return False
        time.sleep(rng.uniform(0.0, 1.5))  # somewhere in the session, table and query set-up
        return True
    if point is Kill.QUERY_STARTED:
        return await_state(proc, lambda: query_starts(log) > starts, "query start", log)
    if not await_state(proc, lambda: len(batch_lines(log)) > batches, "batch", log):
        return False
    if point is Kill.AFTER_COMMIT:
        return True
    first = time.monotonic()
    if not await_state(proc, lambda: len(batch_lines(log)) > batches + 1, "second batch", log):
        return False
    time.sleep(rng.uniform(0.0, time.monotonic() - first))  # within the next batch, timed by this one
    return True


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

    def await_rewrite(self, timeout_s: float = 120.0) -> None:
        """Wait until a run rewrote something (the quiet table has small files enough)."""
        deadline = time.monotonic() + timeout_s
        while not any(r.groups for r in self.reports):
            assert self.is_alive(), f"the compactor stopped: {self.error!r}"
            assert time.monotonic() < deadline, "the compactor never rewrote anything"
            time.sleep(0.5)


def kill_loop(job: Any, job_file: Path, log: Path, feed: Feed, least_kills: int) -> tuple[list[Kill], int]:
    """Start and kill the ingest at ``SCHEDULE``'s points until ``least_kills`` kills have landed.

    Before each start the topic is topped up beyond the committed records; a run that still ended before
    its kill point (it must have exited 0) is followed by more input and another start. Returns the kills
    and the number of such runs.
    """
    rng = random.Random(1234)
    kills: list[Kill] = []
    drained = 0
    while len(kills) < least_kills:
        feed.top_up(committed_records(job, feed.topic))
        point = SCHEDULE[len(kills)]
        batches, starts = len(batch_lines(log)), query_starts(log)
        proc = start_ingest(job_file, log)
        reached = reach(point, proc, log, batches, starts, rng)
        if kill_group(proc) and reached:
            kills.append(point)
            continue
        assert proc.returncode == 0, f"an ingest run failed with exit {proc.returncode}; see {log}"
        drained += 1
        assert drained <= least_kills, f"{drained} runs drained the topic before their kill point; see {log}"
    return kills, drained


# Both sources are killed at each of the four points: Spark's Kafka source in the v2 case, Floe's own
# (kafka.reader: python) in the v3 case (which source reads does not change what is written). The v2
# case writes a bucketed table after an exchange by key, and commits (the ingest's and the compactor's)
# through Iceberg's REST server; the v3 case an unpartitioned one from its decode tasks (the direct
# upsert), through the SQL catalog.
@pytest.mark.parametrize(("format_version", "through_rest", "least_kills", "reader", "partition", "write"),
                         [(2, True, 4, "spark", BUCKETED, "exchange"),
                          (3, False, 4, "python", (), "direct-upsert")],
                         ids=["v2-position-deletes-through-the-rest-catalog",
                              "v3-deletion-vectors-python-source-direct-upsert"])
def test_sigkill_at_random_points_loses_and_duplicates_nothing(kafka_bootstrap, new_topic, iceberg_oracle, tmp_path: Path,
                                                               format_version: int, through_rest: bool,
                                                               least_kills: int, reader: str,
                                                               partition: tuple, write: str,
                                                               request: pytest.FixtureRequest):
    topic = new_topic("e2e-crash", partitions=PARTITIONS)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS, partition=partition)
    job = dataclasses.replace(job, table=dataclasses.replace(job.table, format_version=format_version),
                              source=dataclasses.replace(job.source, reader=reader))
    if through_rest:  # every commit, the ingest's and the compactor's, through Iceberg's REST server
        server = request.getfixturevalue("rest_catalog_server")
        job = dataclasses.replace(job, catalog=dataclasses.replace(job.catalog, uri=server.uri))
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job_to_json(job)))
    log = tmp_path / "ingest.log"
    log.touch()  # every run appends to it
    feed = Feed(kafka_bootstrap, topic)

    compactor = Compactor(job.catalog.uri, job.catalog.warehouse, job.table.identifier)
    compactor.start()
    kills, drained = kill_loop(job, job_file, log, feed, least_kills)

    final = start_ingest(job_file, log)
    assert final.wait(timeout=600) == 0, f"the last run failed; see {log}"
    compactor.await_rewrite()
    compactor.stop.set()
    compactor.join(120)
    assert compactor.error is None, compactor.error
    assert [r.result for r in compactor.reports if r.result not in (RunResult.SUCCESS, RunResult.PARTIAL)] == []
    delivered = feed.delivered
    print(f"killed at {[k.value for k in kills]}; {drained} runs drained the topic first; "
          f"{len(delivered)} events, {len(batch_lines(log))} batch lines")

    expected = expected_table(delivered)
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
