"""The PostgreSQL catalog fails under a running ``floe ingest`` (issue 34, case 3).

Two upsert tables in one shared query, records paced in throughout, then:

1. **A row lock held for 60 s** on ``db.t0``'s catalog row, as an operator's
   open transaction holds it. ``db.t0``'s commits give up after the lock
   timeout and it is held (``floe_ingest_table_held`` 1), ``db.t1`` goes on
   committing, and once the lock is gone ``db.t0`` lands again by itself.
2. **A fast shutdown mid-commit**: ``db.t1``'s row is locked until Floe's
   commit waits on it, then PostgreSQL shuts down (the commit's connection is
   cut with the UPDATE sent), and starts again 10 s later. Both tables land
   again by themselves, the unknown outcome settled by a reload.

Ingest never exits. At the end every table holds exactly what its records
imply, in Floe and Iceberg Java, and every offset is committed once. The log
has a bounded number of lines per fault, never one per try.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.faults.rig import FaultRig, by_metadata_location
from tests.support.postgres import PostgresServer

LOCK_S = 60.0
DOWN_S = 10.0


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.oracle
def test_a_locked_row_and_a_shutdown_mid_commit_lose_and_repeat_nothing(kafka_bootstrap, iceberg_oracle, tmp_path):
    with PostgresServer() as server:
        uri = server.create_database("floe")
        with FaultRig(tmp_path, kafka_bootstrap, {"uri": uri, "warehouse": str(tmp_path / "warehouse")}) as rig:
            rig.wait_for("both tables committing", lambda: all(rig.commits(t) for t in rig.tables), 300)
            locked_row(rig, uri)
            shutdown_mid_commit(rig, server, uri)
            rig.finish(by_metadata_location(iceberg_oracle))


def locked_row(rig: FaultRig, uri: str) -> None:
    """db.t0's row locked for LOCK_S: it is held, db.t1 goes on, and db.t0 lands again once the lock is gone."""
    began = time.time()
    with psycopg.connect(uri) as blocker:
        blocker.execute("SELECT 1 FROM iceberg_tables WHERE table_name = 't0' FOR UPDATE")
        rig.wait_for("db.t0 held", lambda: rig.metric("floe_ingest_table_held", "db.t0") == 1, LOCK_S)
        held = time.time()
        rig.wait_for("db.t1 committing while db.t0 is held", lambda: rig.committed_since("db.t1", held), LOCK_S)
        time.sleep(max(0.0, LOCK_S - (time.time() - began)))
        assert not rig.committed_since("db.t0", began + 1), "db.t0 cannot commit while its row is locked"
        blocker.rollback()
    released = time.time()
    recovery = rig.wait_for("db.t0 landing again", lambda: rig.committed_since("db.t0", released))
    rig.wait_for("db.t0 no longer held", lambda: rig.metric("floe_ingest_table_held", "db.t0") == 0, 30)
    alert = rig.alerted("FloeIngestTableHeld", ["db.t0"], began, quiet=("db.t1",))
    lines = rig.lines_between(began, time.time())
    assert all("db.t0" in line for line in lines), lines
    assert 1 <= len(lines) <= 6, f"a line per held try, not per attempt: {lines}"
    print(f"FIGURES row lock {LOCK_S:.0f}s: db.t0 landed {recovery:.1f}s after the lock was gone; "
          f"{len(lines)} warning line(s); FloeIngestTableHeld pending {alert:.0f}s")


def shutdown_mid_commit(rig: FaultRig, server: PostgresServer, uri: str) -> None:
    """PostgreSQL shut down while Floe's commit to db.t1 waits on the row's lock, started again DOWN_S later."""
    failures = {t: rig.metric("floe_ingest_table_failures_total", t, cause="catalog") or 0 for t in rig.tables}
    blocker = psycopg.connect(uri)
    blocker.execute("SELECT 1 FROM iceberg_tables WHERE table_name = 't1' FOR UPDATE")
    rig.wait_for("a commit waiting on db.t1's row", lambda: commit_waiting(uri), 60)
    began = time.time()
    server.halt()
    blocker.close()
    time.sleep(DOWN_S)
    server.resume()
    back = time.time()
    recovery = {t: rig.wait_for(f"{t} landing again", lambda t=t: rig.committed_since(t, back)) for t in rig.tables}
    for table in rig.tables:
        rig.wait_for(f"{table} no longer held", lambda t=table: rig.metric("floe_ingest_table_held", t) == 0, 60)
    assert (rig.metric("floe_ingest_table_failures_total", "db.t1", cause="catalog") or 0) > failures["db.t1"], \
        "the cut commit counted as db.t1's failure, the catalog's"
    alert = rig.alerted("FloeIngestTableHeld", ["db.t1"], began)
    lines = rig.lines_between(began, time.time())
    assert 1 <= len(lines) <= 12, f"a line per held try (and one for the lag probe), not per attempt: {lines}"
    print(f"FIGURES shutdown {DOWN_S:.0f}s: landed again {recovery} s after the restart; "
          f"{len(lines)} warning line(s); FloeIngestTableHeld pending {alert:.0f}s")


def commit_waiting(uri: str) -> bool:
    with psycopg.connect(uri, autocommit=True) as conn:
        return bool(conn.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = 'floe-catalog' "
                                 "AND wait_event_type = 'Lock'").fetchall())
