"""The REST catalog fails under a running ``floe ingest`` (issue 34, case 4).

Iceberg's own REST catalog server, behind a proxy the test owns, two upsert
tables in one shared query, records paced in throughout, then:

1. **503 to every request for 60 s**, as a catalog with no healthy server
   behind its load balancer answers. Both tables are held
   (``floe_ingest_table_held`` 1), ingest stays up, and both land again by
   themselves once the catalog answers.
2. **Commits applied, their answers lost**: the next three commits reach the
   server and are applied, and Floe gets no answer until its
   ``catalog.request_timeout``. Each is checked by reloading the table, never
   sent again blindly: no batch lands twice.

At the end every table holds exactly what its records imply, in Floe and
Iceberg Java, and every offset is committed once.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.faults.rig import FaultRig, by_metadata_location
from tests.support.dropping_proxy import DroppingProxy
from tests.support.rest_catalog import RestCatalogServer

DOWN_S = 60.0
LOST_ANSWERS = 3
COMMIT = re.compile(r"/v1/namespaces/db/tables/t\d$")


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.oracle
def test_a_catalog_down_for_a_minute_and_lost_commit_answers_lose_and_repeat_nothing(
        kafka_bootstrap, iceberg_oracle, tmp_path):
    warehouse = str(tmp_path / "warehouse")
    with RestCatalogServer(tmp_path / "rest", warehouse) as server, \
            DroppingProxy(server.uri, silence_s=8.0) as proxy:
        catalog = {"type": "rest", "uri": proxy.uri, "warehouse": warehouse, "request_timeout": "3s"}
        with FaultRig(tmp_path, kafka_bootstrap, catalog) as rig:
            rig.wait_for("both tables committing", lambda: all(rig.commits(t) for t in rig.tables), 300)
            catalog_down(rig, proxy)
            answers_lost(rig, proxy)
            rig.finish(by_metadata_location(iceberg_oracle), {"uri": server.uri, "warehouse": warehouse})


def catalog_down(rig: FaultRig, proxy: DroppingProxy) -> None:
    """Every request refused with 503 for DOWN_S: both tables held, both land again by themselves after."""
    began = time.time()
    proxy.rule = lambda method, path: "down"
    try:
        for table in rig.tables:
            rig.wait_for(f"{table} held", lambda t=table: rig.metric("floe_ingest_table_held", t) == 1, DOWN_S)
        time.sleep(max(0.0, DOWN_S - (time.time() - began)))
        assert rig.running().poll() is None
    finally:
        proxy.rule = lambda method, path: None
    back = time.time()
    recovery = {t: rig.wait_for(f"{t} landing again", lambda t=t: rig.committed_since(t, back)) for t in rig.tables}
    for table in rig.tables:
        rig.wait_for(f"{table} no longer held", lambda t=table: rig.metric("floe_ingest_table_held", t) == 0, 60)
    lines = rig.lines_between(began, time.time())
    assert 2 <= len(lines) <= 14, f"a line per held try of each table, not per attempt: {lines}"
    assert all("HTTP 503" in line for line in lines), lines
    assert all(rig.metric("floe_ingest_table_failures_total", t, cause="catalog") for t in rig.tables), \
        "each table's failures counted as the catalog's"
    alert = rig.alerted("FloeIngestTableHeld", rig.tables, began)
    print(f"FIGURES REST 503 for {DOWN_S:.0f}s: landed again {recovery} s after; {len(lines)} warning line(s); "
          f"FloeIngestTableHeld pending {alert:.0f}s")


def answers_lost(rig: FaultRig, proxy: DroppingProxy) -> None:
    """The next LOST_ANSWERS commits are applied by the server and their answers lost."""
    left = [LOST_ANSWERS]

    def rule(method: str, path: str) -> str | None:
        if method == "POST" and COMMIT.search(path) and left[0] > 0:
            left[0] -= 1
            return "silence"
        return None

    began = time.time()
    proxy.rule = rule
    rig.wait_for("three commit answers lost", lambda: len(proxy.lost) >= LOST_ANSWERS, 120)
    proxy.rule = lambda method, path: None
    assert all(status == 200 for _, _, status in proxy.lost), f"each lost commit was applied: {proxy.lost}"
    back = time.time()
    for table in rig.tables:
        rig.wait_for(f"{table} committing on", lambda t=table: rig.committed_since(t, back))
    settled = [r for r in rig.records() if "had an unknown outcome; a reload shows it landed" in r["message"]]
    assert len(settled) >= 1, "a lost answer is settled by a reload"
    print(f"FIGURES REST answers lost: {len(proxy.lost)} commit(s), {len(settled)} settled by a reload, "
          f"{len(rig.lines_between(began, time.time()))} warning line(s)")
