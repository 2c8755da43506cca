"""Stopping `floe ingest` by SIGTERM or SIGINT, to its process or to its whole process group.

Every way ends alike: ``stop requested``, whole batches only (the table is
exactly the committed prefix of each partition), ``ingest stopped`` as the
last line, exit 3, no stack trace, and no process of the run left. A group
signal is what ``timeout``, a terminal's Ctrl-C and many supervisors send: it
reaches Spark's JVM and the Python workers it started too, which must leave
the stop to Floe.

The moments are observed states, never times:

- *start-up*: Spark's JVM is being launched (a ``java`` process runs below
  Floe's, and the session takes seconds more); no query has started yet;
- *mid-batch*: after two commits, while Spark's checkpoint has ``offsets/N``
  written and ``commits/N`` not yet (Spark writes them before and after batch
  N). A producer keeps the topic ahead of the query until the signal, so a
  batch is in progress whatever the machine's speed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_batch
from service.ingest_command import EXIT_OK, EXIT_STOPPED
from tests.ingest.e2e_support import REPO, Delivered, change_events, expected_table, produce
from tests.service.test_ingest_command import events_config, read_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
FLOE = [sys.executable, "-m", "service.cli"]
TABLE = "db.events"
# A Python or a Java stack trace, or the exception line that ends one.
STACK_TRACE = re.compile(r'^\s*(Traceback \(most recent call last\)|File "|at [\w.$]+\(|Caused by: |'
                         r'[\w.]*(Error|Exception)(: |$))')


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Stop:
    """How a run is stopped: which signal, to the process or to its group, at which moment."""

    signal: signal.Signals
    target: str  # "process" or "group"
    moment: str  # "start-up" or "mid-batch"
    reader: str = "spark"  # kafka.reader: Spark's source, or Floe's own (Python workers in the group)

    def __str__(self) -> str:
        return f"{self.signal.name}-to-{self.target}-{self.moment}-{self.reader}-reader"

    def send(self, pid: int) -> None:
        (os.killpg if self.target == "group" else os.kill)(pid, self.signal)


@dataclass
class Ended:
    code: int
    output: str
    left: list[str]  # processes of the run still there after it ended
    tree: dict[int, tuple[int, str]]  # the run's processes just before the signal

    @property
    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.output.splitlines() if line.startswith("{")]


def start_floe(config: Path, log: Path) -> subprocess.Popen:
    """``floe ingest`` as a shell or a supervisor starts it: the leader of its own process group."""
    with log.open("wb") as out:
        return subprocess.Popen([*FLOE, "ingest", "--config", str(config)], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_and_wait(process: subprocess.Popen, stop: Stop, log: Path, settle_s: float = 30) -> Ended:
    """Send ``stop``'s signal; wait for the run, and up to ``settle_s`` for every process it had started, to end."""
    tree = descendants(process.pid)
    try:
        stop.send(process.pid)
        code = process.wait(240)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    return Ended(code, log.read_text(errors="replace"), survivors(process.pid, tree, settle_s), tree)


def wait_for_line(process: subprocess.Popen, log: Path, text: str, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"floe ingest ended before {text!r}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout_s}s"
        time.sleep(0.02)


def wait_for_jvm(process: subprocess.Popen, timeout_s: float = 120) -> None:
    """Wait until Spark's JVM is being launched: a ``java`` process below Floe's."""
    deadline = time.monotonic() + timeout_s
    while not any(command == "java" for _, command in descendants(process.pid).values()):
        assert process.poll() is None, "floe ingest ended before it launched Spark's JVM"
        assert time.monotonic() < deadline, f"no JVM within {timeout_s}s"
        time.sleep(0.02)


def latest(directory: Path) -> int:
    """The highest batch id in a checkpoint log directory (-1 when empty)."""
    ids = [int(p.name) for p in directory.glob("[0-9]*")] if directory.exists() else []
    return max(ids, default=-1)


def commits_logged(log: Path) -> int:
    return log.read_text(errors="replace").count('"result": "committed"')


def wait_mid_batch(process: subprocess.Popen, log: Path, checkpoint: Path, min_committed: int) -> int:
    """Return the id of a batch in progress, after ``min_committed`` batches were committed."""
    deadline = time.monotonic() + 300
    while True:
        assert process.poll() is None, f"floe ingest ended early: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no batch in progress after the first commits"
        running = latest(checkpoint / "offsets")
        if commits_logged(log) >= min_committed and running > latest(checkpoint / "commits"):
            return running
        time.sleep(0.01)


# ----------------------------------------------------------------------------- processes


def _stat(pid: int) -> Optional[tuple[int, int, str]]:
    """(parent pid, start time in clock ticks, command) of a live process; None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name_end = stat.rindex(")")
    fields = stat[name_end + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19]), stat[stat.index("(") + 1:name_end]


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (start time, command) of ``root`` and every process below it (Spark's JVM, its Python workers)."""
    found = {root: _stat(root)}
    table = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    grew = True
    while grew:
        grew = False
        for pid, info in table.items():
            if info and pid not in found and info[0] in found:
                found[pid] = info
                grew = True
    return {pid: (info[1], info[2]) for pid, info in found.items() if info}


def survivors(group: int, tree: dict[int, tuple[int, str]], timeout_s: float = 30) -> list[str]:
    """The run's processes (its group, and ``tree`` as seen before the stop) still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [f"{pid} {command}" for pid, (started, command) in tree.items()
                if (info := _stat(pid)) is not None and info[1] == started]
        left += [f"{pid} in group {group}" for pid in _group_members(group) if pid not in tree]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _group_members(group: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                members.append(int(entry.name))
    return members


# ----------------------------------------------------------------------------- checks


def assert_stopped_cleanly(ended: Ended, stop: Stop) -> None:
    """Exit 3, `stop requested` for this signal, `ingest stopped` last, no stack trace, nothing left."""
    assert ended.code == EXIT_STOPPED, f"exit {ended.code}: {ended.output[-4000:]}"
    traces = [line for line in ended.output.splitlines() if not line.startswith("{") and STACK_TRACE.match(line)]
    assert not traces, "a stack trace in the output:\n" + "\n".join(traces[:20])
    records = ended.records
    [requested] = [r for r in records if r.get("signal") == stop.signal.name]
    assert (requested["logger"], requested["message"]) == ("floe.ingest", "stop requested")
    last_line = ended.output.splitlines()[-1]
    assert last_line.startswith("{"), f"the last line is not Floe's: {last_line}"
    last = json.loads(last_line)
    assert (last["logger"], last["message"], last["exit_code"]) == ("floe.ingest", "ingest stopped", EXIT_STOPPED), \
        "the last line says ingest stopped"
    assert not ended.left, f"left running after the stop: {ended.left}"


def assert_whole_batches(metadata: Any) -> dict[tuple[str, int], int]:
    """Every snapshot is one batch starting where the previous one ended; the end offset of each partition."""
    ends: dict[tuple[str, int], int] = {}
    batch_ids: list[int] = []
    for snapshot in sorted(metadata.snapshots, key=lambda s: s.sequence_number):
        batch = committed_batch(snapshot)
        assert batch is not None, f"snapshot {snapshot.snapshot_id} is not an ingest batch"
        batch_ids.append(batch.batch_id)
        for topic, ranges in batch.offsets.items():
            for partition, (start, end) in ranges.items():
                assert start == ends.get((topic, partition), 0), f"gap or overlap at {topic}/{partition}: {start}"
                assert end >= start
                ends[(topic, partition)] = end
    assert batch_ids == sorted(batch_ids)
    return ends


def assert_table_is_committed_prefix(tmp: Path, topic: str, delivered: list[Delivered]) -> dict[tuple[str, int], int]:
    rows, metadata = read_rows(tmp)
    ends = assert_whole_batches(metadata)
    below = [d for d in delivered if d.offset < ends.get((topic, d.partition), 0)]
    assert rows == expected_table(below), "the table is exactly the committed prefix of each partition"
    return ends


def table_exists(tmp: Path) -> bool:
    if not (tmp / "catalog.db").exists():
        return False
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        return catalog.table_exists(TABLE)


def write_config(tmp: Path, bootstrap: str, topic: str, reader: str) -> tuple[dict[str, Any], Path]:
    raw = events_config(tmp, bootstrap, topic)
    raw["kafka"]["max_offsets_per_trigger"] = 1_000
    raw["kafka"]["reader"] = reader
    raw["log_format"] = "json"
    config = tmp / "floe.yaml"
    config.write_text(yaml.safe_dump(raw))
    return raw, config


# ----------------------------------------------------------------------------- the tests


# The two ways a stop arrives: SIGTERM to the process (Kubernetes, to the container's first process) and
# SIGINT to the whole group (Ctrl-C in a terminal, which reaches Spark's JVM too). The handler is one for
# both signals; the group case is the one where the JVM gets the signal as well.
START_UP = [Stop(signal.SIGTERM, "process", "start-up"), Stop(signal.SIGINT, "group", "start-up")]
MID_BATCH = [
    Stop(signal.SIGTERM, "process", "mid-batch"),
    Stop(signal.SIGINT, "group", "mid-batch", reader="python"),
]


@pytest.mark.parametrize("stop", START_UP, ids=str)
def test_a_signal_while_spark_starts_stops_before_any_query(stop: Stop, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("stop-start", partitions=2)
    produce(kafka_bootstrap, topic, change_events(2_000, 300, seed=5))
    _, config = write_config(tmp_path, kafka_bootstrap, topic, stop.reader)
    log = tmp_path / "ingest.log"
    process = start_floe(config, log)
    wait_for_line(process, log, '"spark starting"')
    wait_for_jvm(process)
    ended = stop_and_wait(process, stop, log)

    assert_stopped_cleanly(ended, stop)
    messages = [r["message"] for r in ended.records]
    assert "stop requested while starting: no query started" in messages, ended.output[-3000:]
    assert not any(m.startswith("ingest query") for m in messages), "no query starts once a stop was requested"
    assert not table_exists(tmp_path), "the table is not created once a stop was requested"


@pytest.mark.parametrize("stop", MID_BATCH, ids=str)
def test_a_signal_mid_batch_stops_after_whole_batches(stop: Stop, kafka_bootstrap, new_topic, paced_producer,
                                                      tmp_path):
    topic = new_topic("stop-batch", partitions=2)
    producer = paced_producer(kafka_bootstrap, topic, change_events(200_000, 3_000, seed=11), chunk=500, pause_s=0.25)
    try:
        raw, config = write_config(tmp_path, kafka_bootstrap, topic, stop.reader)
        log = tmp_path / "ingest.log"
        process = start_floe(config, log)
        in_flight = wait_mid_batch(process, log, tmp_path / "checkpoints" / TABLE, min_committed=2)
        ended = stop_and_wait(process, stop, log)
    finally:
        delivered = producer.stop()

    assert_stopped_cleanly(ended, stop)
    ends = assert_table_is_committed_prefix(tmp_path, topic, delivered)
    assert 0 < sum(ends.values()) < len(delivered), "stopped part-way through the topic"
    assert latest(tmp_path / "checkpoints" / TABLE / "commits") <= in_flight, "no batch started after the stop"

    if stop == MID_BATCH[0]:  # once: a restart on the same checkpoint resumes exactly
        raw["trigger"] = {"available_now": True}
        config.write_text(yaml.safe_dump(raw))
        resumed = subprocess.run([*FLOE, "ingest", "--config", str(config)], cwd=REPO, capture_output=True,
                                 text=True, timeout=300)
        assert resumed.returncode == EXIT_OK, resumed.stderr[-3000:]
        ends = assert_table_is_committed_prefix(tmp_path, topic, delivered)
        assert sum(ends.values()) == len(delivered), "every event landed exactly once"


def test_sigkill_to_the_group_leaves_nothing_running(kafka_bootstrap, new_topic, paced_producer, tmp_path):
    """The JVM ignores SIGTERM and SIGINT, not SIGKILL: killed with its group, nothing of the run outlives it.

    Spark's Python daemons are in groups of their own; they end when the
    JVM's pipe to them closes. Checked on Floe's source, whose reader adds
    Python workers of its own to the group.
    """
    topic = new_topic("stop-kill", partitions=2)
    producer = paced_producer(kafka_bootstrap, topic, change_events(200_000, 3_000, seed=11), chunk=500, pause_s=0.25)
    try:
        _, config = write_config(tmp_path, kafka_bootstrap, topic, "python")
        log = tmp_path / "ingest.log"
        process = start_floe(config, log)
        wait_mid_batch(process, log, tmp_path / "checkpoints" / TABLE, min_committed=1)
        ended = stop_and_wait(process, Stop(signal.SIGKILL, "group", "mid-batch", "python"), log, settle_s=10)
    finally:
        producer.stop()
    assert ended.code == -signal.SIGKILL
    assert any(command == "java" for _, command in ended.tree.values()), f"Spark had started: {ended.tree}"
    assert not ended.left, f"left running after SIGKILL to the group: {ended.left}"
