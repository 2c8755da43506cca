"""`floe ingest` failing as a user meets it: one line that names the table, the cause and what to do.

Each test runs the real command in a child process, as an operator would, and
reads its stderr: no Python, py4j or JVM stack trace below ``log_level: DEBUG``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from service.cli import EXIT_FAILED
from service.local_kafka import free_port
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.ingest.e2e_support import Event, change_events, produce
from tests.service.test_ingest_command import events_config

REPO = Path(__file__).resolve().parents[2]
FLOE = Path(sys.executable).with_name("floe")
STACK_TRACE = re.compile(r"Traceback \(most recent call last\)|^\s+at [\w.$]+\(|py4j\.protocol", re.M)


def floe(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLOE), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def write_config(tmp: Path, config: dict[str, Any]) -> Path:
    path = tmp / "floe.yaml"
    path.write_text(yaml.safe_dump({**config, "log_format": "text"}))
    return path


def test_an_unreachable_kafka_fails_fast_with_checks_own_words(tmp_path):
    config = write_config(tmp_path, events_config(tmp_path, f"127.0.0.1:{free_port()}", "events"))
    started = time.monotonic()
    ingest = floe("ingest", "--config", str(config))
    took = time.monotonic() - started
    assert ingest.returncode == EXIT_FAILED
    assert took < 60, f"ingest took {took:.0f}s to give up"
    assert not STACK_TRACE.search(ingest.stderr), ingest.stderr
    [line] = [x for x in ingest.stderr.splitlines() if x.startswith("floe ingest: ")]
    assert not (tmp_path / "catalog.db").exists(), "nothing is created before Kafka answers"
    check = floe("check", "--config", str(config))
    [fail] = [x for x in check.stdout.splitlines() if x.startswith("FAIL kafka")]
    detail = fail[len("FAIL "):].split(": ", 2)[1]  # the probe's words, after "kafka <servers>: "
    assert line.startswith(f"floe ingest: {fail[len('FAIL '):].split(': ', 1)[0]}: {detail}")
    assert line.endswith("check kafka.bootstrap_servers and that the brokers are up ('floe check' runs the same probe)")
    assert not (tmp_path / "catalog.db").exists(), "nor by floe check"


@pytest.mark.kafka
@pytest.mark.spark
def test_a_poison_record_under_the_fail_policy_is_one_line(tmp_path, kafka_bootstrap, new_topic):
    topic = new_topic("poison", partitions=1)
    good = change_events(50, 20, seed=5)
    produce(kafka_bootstrap, topic, [*good, Event(b'{"id": 999}', b"{not json"), *good[:5]])
    overrides = {"table": {"bad_records": "fail"}, "trigger": {"available_now": True}}
    config = write_config(tmp_path, events_config(tmp_path, kafka_bootstrap, topic, **overrides))
    ingest = floe("ingest", "--config", str(config))
    assert ingest.returncode == EXIT_FAILED, ingest.stderr[-3000:]
    assert not STACK_TRACE.search(ingest.stderr), ingest.stderr[-5000:]
    failed = [x for x in ingest.stderr.splitlines() if "ingest query" in x and " failed: " in x]
    assert len(failed) == 1, ingest.stderr[-5000:]
    assert re.search(rf"failed: table db\.events: bad record at {topic}/0@50: DecodeError: ", failed[0]), failed[0]
    assert f"skip exactly it (floe ingest --skip {topic}/0@50, or tables[].skip_records; README: 'A poison record')" \
        in failed[0], failed[0]
    assert len(ingest.stderr) < 20_000, "no 28 KB trace"


@pytest.mark.kafka
@pytest.mark.spark
def test_a_table_that_no_longer_fits_its_configuration_is_one_line(tmp_path, kafka_bootstrap, new_topic):
    topic = new_topic("mismatch", partitions=1)
    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse")
    with SqlCatalog(uri, warehouse) as catalog:
        catalog.create_namespace("db")
        other = Schema(NestedField(1, "id", StringType(), required=True), NestedField(2, "total", LongType()))
        catalog.create_table("db.events", other)
    config = write_config(tmp_path, events_config(tmp_path, kafka_bootstrap, topic))
    ingest = floe("ingest", "--config", str(config))
    assert ingest.returncode == EXIT_FAILED, ingest.stderr[-3000:]
    assert not STACK_TRACE.search(ingest.stderr), ingest.stderr[-5000:]
    [line] = [x for x in ingest.stderr.splitlines() if "could not start" in x]
    assert "an ingest query could not start: " in line and "db.events does not fit" in line, line
    assert "column 'id': string in the table, long in the configuration" in line, line
