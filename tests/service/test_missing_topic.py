"""A missing topic under ``floe ingest``, on both sources (issue 29, finding 5): ``floe ingest``
refuses to start, in one line with the words of ``floe check``, and creates nothing."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from service.cli import EXIT_FAILED
from tests.faults.rig import FLOE, STACK_TRACE
from tests.ingest.e2e_support import REPO
from tests.service.test_ingest_command import events_config


def missing_topic_config(tmp: Path, bootstrap: str, reader: str) -> Path:
    raw = events_config(tmp, bootstrap, f"absent-{uuid.uuid4().hex[:8]}")
    raw["kafka"]["reader"] = reader
    raw["log_format"] = "text"
    path = tmp / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.kafka
@pytest.mark.parametrize("reader", ["spark", "python"])
def test_a_missing_topic_refuses_the_start_in_checks_words_and_creates_nothing(reader, kafka_bootstrap, tmp_path):
    config = missing_topic_config(tmp_path, kafka_bootstrap, reader)
    topic = yaml.safe_load(config.read_text())["tables"][0]["topics"][0]
    ingest = subprocess.run([*FLOE, "ingest", "--config", str(config)], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert ingest.returncode == EXIT_FAILED, ingest.stderr[-3000:]
    assert not STACK_TRACE.search(ingest.stderr), ingest.stderr[-3000:]
    [line] = [x for x in ingest.stderr.splitlines() if x.startswith("floe ingest: ")]
    assert not (tmp_path / "catalog.db").exists() and not (tmp_path / "warehouse").exists(), "no table, no catalog"
    check = subprocess.run([*FLOE, "check", "--config", str(config)], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    [fail] = [x for x in check.stdout.splitlines() if x.startswith("FAIL kafka")]
    words = fail[len("FAIL "):]
    assert words == f"kafka {kafka_bootstrap}: topics not found: {topic} (1 broker(s) answered)", words
    assert line == (f"floe ingest: {words}; create them, or correct tables[].topics ('floe check' runs the same "
                    "probe)"), line
