"""A shared query (``ingest.query: shared``) SIGKILLed mid-run, again and again: no table loses or
repeats a record.

``floe ingest`` runs in its own process group with three tables in one query:
two append tables (the fan-out job), one of them under a commit interval, and
an upsert table (its own plan). Before
each start every topic is topped up by several batches' worth, the run is
killed with SIGKILL once it has committed a few more batches (a state of the
run, not a time), at a random moment after that, and restarted on the same
checkpoint. A last run drains the topics; every table must then hold exactly
what its records imply.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from service.config import parse_config
from service.ingest_command import EXIT_OK, run_ingest_service
from tests.ingest.e2e_support import change_events, expected_table, normalized, produce
from tests.ingest.test_e2e_crashes import kill_group
from tests.service.test_shared_query import _appends, _ids, _rows, three_tables
from tests.service.test_sigterm import start_floe

KILLS = 2
STATE_TIMEOUT_S = 240


def committed_lines(log: Path) -> int:
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if line.startswith("{") and '"result": "committed"' in line)


@pytest.mark.kafka
@pytest.mark.spark
def test_sigkill_mid_run_loses_and_repeats_nothing_in_any_table(spark, kafka_bootstrap, new_topic, tmp_path):
    (clicks, views, orders), config = three_tables(tmp_path, kafka_bootstrap, new_topic, "10m", log_format="json")
    config["kafka"]["max_offsets_per_trigger"] = 300
    config["tables"][0]["commit_interval"] = "3s"  # db.clicks waits through batches: exact all the same
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(config))
    rng = random.Random(11)
    clicks_sent, views_sent, delivered = 0, 0, []
    killed = 0
    for run in range(KILLS):
        produce(kafka_bootstrap, clicks, _appends(clicks_sent, 900))
        produce(kafka_bootstrap, views, _appends(100_000 + views_sent, 300))
        delivered += produce(kafka_bootstrap, orders, change_events(900, 200, seed=run))
        clicks_sent, views_sent = clicks_sent + 900, views_sent + 300
        log = tmp_path / f"run-{run}.log"
        proc = start_floe(path, log)
        wanted = rng.randint(1, 6)  # committed table-batches of this run before the kill
        deadline = time.monotonic() + STATE_TIMEOUT_S
        while committed_lines(log) < wanted and proc.poll() is None:
            assert time.monotonic() < deadline, f"run {run}: {wanted} commits not within {STATE_TIMEOUT_S}s: {tail(log)}"
            time.sleep(0.1)
        time.sleep(rng.random())  # somewhere in the next batch, or between two
        assert proc.poll() is None, f"run {run} ended on its own: {tail(log)}"
        killed += kill_group(proc)
    assert killed == KILLS, "every run was still going when its SIGKILL came"

    config["trigger"] = {"available_now": True}
    assert run_ingest_service(parse_config(config), port=0, spark=spark) == EXIT_OK
    assert _ids(tmp_path, "db.clicks") == Counter(range(clicks_sent))
    assert _ids(tmp_path, "db.views") == Counter(range(100_000, 100_000 + views_sent))
    assert normalized(_rows(tmp_path, "db.orders")) == expected_table(delivered)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]
