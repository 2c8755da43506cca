"""Floe's own processes fail beside aggressive maintenance (issue 34, cases 6, 7 and 8).

An upsert table and an append table in one shared query, and ``floe
compact`` alongside, compacting every few seconds and expiring every snapshot
it may (``retain_last: 1``, ``older_than: 1s``). The append table's topic has
two partitions; after a while records go to partition 0 only, so partition 1
sits idle and only an old snapshot holds its offsets (apache/iceberg#18006:
offsets forgotten once the snapshots holding them expire). Then:

1. ``floe ingest`` is SIGKILLed with its Spark JVM once it has committed more,
   and started again: the batch it replays is recognised, not landed twice.
2. **The compactor is killed mid-commit**: the append table's catalog row
   (PostgreSQL) is locked until the compactor has written its new metadata
   file and waits to swap it in; then it is SIGKILLed, and the lock released. A second compactor takes
   over once the dead one's lease (``compaction.lease_ttl``) expires.
3. **A committed batch replayed**: while ``floe ingest`` is stopped, the
   checkpoint's record of its last batch's commit is deleted, so Spark runs
   that batch again; the tables' histories, expiry and compaction
   notwithstanding, say it landed, and it is skipped.
4. **The checkpoint is deleted** while ``floe ingest`` is stopped. It starts
   again from the tables' committed offsets, the idle partition's included:
   the append table would hold a record twice if one were read again.
5. One more SIGKILL and restart, while compaction and expiry go on.

At the end every table holds exactly its records, each once, in Floe and
Iceberg Java, and every offset is committed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.commit.conftest import postgres_database, postgres_server, postgres_uri  # noqa: F401
from tests.faults.rig import FLOE, FaultRig, by_metadata_location
from tests.ingest.e2e_support import REPO, json_log_records

LEASE_TTL_S = 20.0
COMPACTION = {
    "interval": "3s",
    "jitter": "0s",
    "lease_ttl": f"{LEASE_TTL_S:.0f}s",
    "rewrite_options": {"min-input-files": "2"},
    "expire_snapshots": {"older_than": "1s", "retain_last": 1},
}


class Compactor:
    """One ``floe compact`` process, its own log."""

    def __init__(self, rig: FaultRig, name: str) -> None:
        self.log = rig.tmp / f"compact-{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen([*FLOE, "compact", "--config", str(rig.path)], cwd=REPO, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def lines(self, message: str) -> list[dict]:
        return [r for r in json_log_records(self.log.read_text(errors="replace")) if r["message"] == message]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.oracle
def test_kills_a_lost_checkpoint_and_a_compactor_killed_mid_commit_beside_aggressive_expiry(
        kafka_bootstrap, iceberg_oracle, postgres_uri, tmp_path):  # noqa: F811
    catalog = {"uri": postgres_uri, "warehouse": str(tmp_path / "warehouse")}
    with FaultRig(tmp_path, kafka_bootstrap, catalog, tables=1, appends=1, extra={"compaction": COMPACTION}) as rig:
        rig.wait_for("both tables committing", lambda: all(rig.commits(t) for t in rig.tables + rig.appends), 300)
        rig.producers["db.a0"].one_partition.set()  # partition 1 of db.a0's topic is idle from here on
        idle_since = time.time()
        with rig.catalog() as catalog:
            firsts = {t: catalog.load_table(t).metadata.snapshots[0].snapshot_id for t in rig.tables + rig.appends}
        first = Compactor(rig, "first")
        second = None
        try:
            rig.wait_for("a compaction and expiry", lambda: compacted_and_expired(rig, firsts), 180)
            kill_and_restart(rig)
            second = compactor_killed_mid_commit(rig, first, postgres_uri)
            a_batch_replayed(rig)
            checkpoint_lost(rig)
            kill_and_restart(rig)
            rig.finish(by_metadata_location(iceberg_oracle))
            expired_down(rig, "db.a0", idle_since)
        finally:
            for compactor in (first, second):
                if compactor is not None and compactor.process.poll() is None:
                    compactor.process.send_signal(signal.SIGTERM)
                    compactor.process.wait(120)
        assert second is not None and second.process.returncode == 3, second and second.log.read_text()[-3000:]


def compacted_and_expired(rig: FaultRig, firsts: dict[str, int]) -> bool:
    """Each table compacted, and its first snapshot expired. (db.a0's idle partition's offsets stay: every
    commit stands in each partition the table covered, and expiry keeps the newest snapshot of each.)"""
    with rig.catalog() as catalog:
        tables = {t: catalog.load_table(t).metadata for t in firsts}
    return all(any(s.summary.get("operation") == "replace" for s in metadata.snapshots)
               and all(s.snapshot_id != firsts[t] for s in metadata.snapshots) for t, metadata in tables.items())


def expired_down(rig: FaultRig, table: str, idle_since: float) -> None:
    """Expiry takes every snapshot from before ``table``'s partition 1 went idle (the second compactor is
    still running): the idle partition's offsets hold none of them back. (What stays is the chain exactly-once
    pins, down to each writer's newest commit; how long it is depends on how fast the run went.)"""
    deadline = time.monotonic() + 60
    while True:
        with rig.catalog() as catalog:
            snapshots = catalog.load_table(table).metadata.snapshots
        old = [s for s in snapshots if s.timestamp_ms < idle_since * 1000]
        if not old:
            return
        assert time.monotonic() < deadline, \
            f"{table} keeps {len(old)} of {len(snapshots)} snapshots from before its partition went idle"
        time.sleep(1)


def kill_and_restart(rig: FaultRig) -> None:
    """SIGKILL once every table has committed three more batches; start again."""
    since = time.time()
    for table in rig.tables + rig.appends:
        rig.wait_for(f"{table} committing", lambda t=table: len([c for c in rig.commits(t) if c.at >= since]) >= 3)
    rig.kill()
    rig.start()


def compactor_killed_mid_commit(rig: FaultRig, first: Compactor, uri: str) -> Compactor:
    """Catch the first compactor with a replace staged for db.a0 and waiting for the catalog's row lock;
    SIGKILL it there, release the lock, and start a second compactor, which takes over after the lease.

    Staged replaces are not left to chance: the compactor is paused between rounds (it holds no lease then)
    until db.a0 has two new files to compact, and the row is locked before it goes on, so its next round
    plans a rewrite and blocks on the swap."""
    for _ in range(5):
        paused_between_rounds(first)
        try:
            paused = time.time()
            rig.wait_for("two commits to db.a0 for the compactor to find",
                         lambda: len([c for c in rig.commits("db.a0") if c.at >= paused]) >= 2, 120)
            lock = psycopg.connect(uri)
            lock.execute("SELECT 1 FROM iceberg_tables WHERE table_name = 'a0' FOR UPDATE")
            locked = time.time()
        finally:
            first.process.send_signal(signal.SIGCONT)
        with lock:
            if wait_for_staged_replace(rig, locked, timeout_s=60):
                killed = time.time()
                first.process.send_signal(signal.SIGKILL)
                first.process.wait(60)
                break
            lock.rollback()
    else:
        raise AssertionError(f"the compactor never staged a replace while the row was locked:\n"
                             f"{first.log.read_text(errors='replace')[-3000:]}")
    second = Compactor(rig, "second")
    rig.wait_for("the second compactor compacting db.a0",
                 lambda: [r for r in second.lines("compaction run started") if r["table"] == "db.a0"], 180)
    took = time.time() - killed
    assert took >= LEASE_TTL_S * 0.9, f"the dead compactor's lease held its tables: taken over after {took:.1f}s"
    print(f"FIGURES compactor killed mid-commit: the second took over {took:.1f}s later (lease {LEASE_TTL_S:.0f}s)")
    return second


def paused_between_rounds(compactor: Compactor, timeout_s: float = 120.0) -> None:
    """SIGSTOP ``compactor`` just after a round ends: asleep until the next, holding no lease (or, when
    rounds run back to back, just into db.t0's run, which comes first and is not locked)."""
    seen = len(compactor.lines("compaction round finished"))
    deadline = time.monotonic() + timeout_s
    while len(compactor.lines("compaction round finished")) == seen:
        assert compactor.process.poll() is None, compactor.log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"no compaction round ended within {timeout_s:.0f}s"
        time.sleep(0.05)
    compactor.process.send_signal(signal.SIGSTOP)


def wait_for_staged_replace(rig: FaultRig, since: float, timeout_s: float) -> bool:
    """Whether a compaction's metadata file (a replace as its current snapshot) is written after ``since``,
    when the test took the catalog's write lock: staged, and waiting for the swap."""
    deadline = time.monotonic() + timeout_s
    seen: set[Path] = set()
    while time.monotonic() < deadline:
        for path in (rig.tmp / "warehouse").glob("db/a0/metadata/*.metadata.json"):
            if path in seen or path.stat().st_mtime < since:
                continue
            try:
                metadata = json.loads(path.read_text())
            except ValueError:  # still being written
                continue
            seen.add(path)
            current = [s for s in metadata.get("snapshots", [])
                       if s["snapshot-id"] == metadata.get("current-snapshot-id")]
            if current and current[0]["summary"].get("operation") == "replace":
                return True
        time.sleep(0.2)
    return False


def a_batch_replayed(rig: FaultRig) -> None:
    """Stop Floe; take the checkpoint back to just before its newest batch that a table holds (that
    batch's commit record, and any batch planned after it, deleted). Started again, Spark runs that batch
    again, and every table that holds it skips it as landed."""
    assert rig.stop() == 3, rig.tail()
    with rig.catalog() as catalog:
        held = {t: {int(s.summary["floe.batch-id"]) for s in catalog.load_table(t).metadata.snapshots
                    if "floe.batch-id" in s.summary} for t in rig.tables + rig.appends}
    last = max(max(ids, default=-1) for ids in held.values())
    landed = [t for t, ids in held.items() if last in ids]
    checkpoint = rig.tmp / "checkpoints" / "shared-query"
    for log in ("offsets", "commits"):
        for entry in (checkpoint / log).iterdir():
            batch = entry.name.lstrip(".").removesuffix(".crc")
            if batch.isdigit() and (int(batch) > last or log == "commits" and int(batch) == last):
                entry.unlink()
    began = len(rig.records())
    rig.start()

    def outcomes() -> dict[str, str]:
        return {r["table"]: r["result"] for r in rig.records()[began:] if r.get("batch_id") == last
                and r.get("result") in ("skipped", "committed", "empty")}

    rig.wait_for(f"batch {last} run again", lambda: set(outcomes()) >= set(landed))
    assert landed and all(outcomes()[t] == "skipped" for t in landed), f"batch {last} again: {outcomes()}"


def checkpoint_lost(rig: FaultRig) -> None:
    """Stop Floe, delete its checkpoint, start it again: it goes on from the tables' committed offsets."""
    assert rig.stop() == 3, rig.tail()
    shutil.rmtree(rig.tmp / "checkpoints")
    rig.start()
