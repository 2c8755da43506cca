"""End to end: the ingest process is SIGKILLed at random points and restarted on its checkpoint.

``python -m ingest`` runs in its own process group (driver, JVM and Python
workers), which is killed outright at least five times: during start-up,
between batches, in the middle of decoding, writing or committing. Each
restart resumes from the same checkpoint. The final table must equal the
expected one: no duplicate row, no lost change, no resurrected delete.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from commit.catalog import Catalog
from commit.exactly_once import committed_offsets
from ingest.job import job_to_json
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import batch_lines, change_events, expected_table, normalized, produce, start_ingest, upsert_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

EVENTS = 30_000
KEYS = 3_000
PARTITIONS = 3
MAX_OFFSETS = 1_500
KILLS = 5
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


def test_sigkill_at_random_points_loses_and_duplicates_nothing(kafka_bootstrap, new_topic, tmp_path: Path):
    topic = new_topic("e2e-crash", partitions=PARTITIONS)
    delivered = produce(kafka_bootstrap, topic, change_events(EVENTS, KEYS, seed=5))
    expected = expected_table(delivered)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=MAX_OFFSETS)
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job_to_json(job)))
    log = tmp_path / "ingest.log"
    rng = random.Random(1234)

    kills = 0
    while kills < KILLS:
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
    assert kills >= 5, f"only {kills} kills happened; the run finished too quickly"

    final = start_ingest(job_file, log)
    assert final.wait(timeout=600) == 0, f"the last run failed; see {log}"

    with Catalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    ends = {p: max(d.offset for d in delivered if d.partition == p) + 1 for p in range(PARTITIONS)}
    assert committed_offsets(loaded.metadata) == {topic: ends}
    got = normalized(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow())
    missing = sorted(set(expected) - set(got))[:5]
    resurrected = sorted(set(got) - set(expected))[:5]
    assert not missing and not resurrected, f"missing {missing}, resurrected {resurrected}"
    assert got == expected
    batch_ids = [s.summary["floe.batch-id"] for s in loaded.metadata.snapshots]
    assert len(batch_ids) == len(set(batch_ids)), "a batch was committed twice"
