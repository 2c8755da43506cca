"""Forty tables from thirty topics in one shared query, under five SIGKILLs, with the compactor alongside.

The fleet, on a real broker, PostgreSQL catalog and local Spark:

- **routed**: one topic, ``events``, carries five upsert tables' changes; a
  record's ``kind`` field picks its table (``db.r0`` .. ``db.r4``). Records
  of another kind, and undecodable ones, are ``db.r0``'s dead letters: it is
  the topic's first routed table.
- **by pattern**: ten topics ``<prefix>.logs.<i>`` land in ten append tables
  ``raw.<topic>`` of one template entry.
- **listed**: fifteen upsert tables ``db.u0`` .. ``db.u14`` on their own
  topics; four append tables ``db.a0`` .. ``db.a3`` on theirs, two of them
  committing at most every 30 s; six append tables ``db.a4`` .. ``db.a9``
  sharing the topics of ``db.u0`` .. ``db.u5``. The first shared topic
  carries undecodable records too, which ``db.u0`` and ``db.a4`` each
  dead-letter to their own topic.

Twenty upsert and twenty append tables. ``floe ingest`` (a process group of
its own) is SIGKILLed five times, each time once it has committed a number of
table-batches drawn at random (a state of the run, not a time), and started
again on the same checkpoint. In the third run ``db.u3`` is dropped from the
catalog by hand and given more records: its commits fail and it is held while
the other tables go on committing (the test feeds one of them until they have
made ten more commits), until it is registered again. ``floe compact`` runs throughout. A
last run drains every topic; then every table holds exactly what its records
imply, read by Floe and by Iceberg Java, and each dead-letter topic holds
exactly its table's bad records (dead letters are at least once: a record
may appear twice, none may be missing or foreign).
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from table.io import FileIO
from table.scan import TableScan
from tests.commit.conftest import postgres_database, postgres_server, postgres_uri  # noqa: F401
from tests.commit.test_catalog_oracles import use_jdbc_catalog
from tests.ingest.e2e_support import (
    REPO,
    Delivered,
    Event,
    change_events,
    consume_all,
    expected_table,
    normalized,
    produce,
)
from tests.ingest.test_e2e_crashes import kill_group
from tests.service.test_ingest_command import EVENT_COLUMNS
from tests.service.test_sigterm import FLOE, start_floe

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

KILLS, HELD_RUN, HELD_TABLE = 5, 2, "db.u3"
KINDS = 5  # routed tables
UPSERTS, APPENDS, SHARED_APPENDS, LOGS = 15, 4, 6, 10
INTERVAL_TABLES = ("db.a0", "db.a1")  # commit at most every 30 s
STATE_TIMEOUT_S = 300
GARBAGE = b"{not json"


class Fleet:
    """The topics, what was produced to each, and the configuration of the forty tables."""

    def __init__(self, new_topic: Callable[..., str], tmp: Path, bootstrap: str, catalog_uri: str) -> None:
        self.bootstrap, self.tmp = bootstrap, tmp
        self.events = new_topic("events", 2)
        self.prefix = new_topic("fleet")
        self.logs = [new_topic(f"{self.prefix}.logs.{i}") for i in range(LOGS)]
        self.upsert_topics = [new_topic(f"u{i}") for i in range(UPSERTS)]
        self.append_topics = [new_topic(f"a{i}") for i in range(APPENDS)]
        self.dead_letter_topics = {t: new_topic(f"dlq-{t}") for t in ("r0", "u0", "a4")}
        self.delivered: dict[str, list[Delivered]] = {}  # topic -> every record produced to it
        self.name = f"fleet_{uuid.uuid4().hex[:8]}"
        self.config = self._config(catalog_uri)

    @property
    def topics(self) -> list[str]:
        return [self.events, *self.logs, *self.upsert_topics, *self.append_topics]

    def _config(self, catalog_uri: str) -> dict[str, Any]:
        upsert = {"mode": "upsert", "key": ["id"], "op": {"field": "op"}, "schema": EVENT_COLUMNS}
        tables: list[dict[str, Any]] = [
            {**upsert, "identifier": f"db.r{k}", "topics": [self.events],
             "route": {"field": "kind", "values": [f"k{k}"]}} for k in range(KINDS)]
        tables[0].update(bad_records="dead-letter", dead_letter_topic=self.dead_letter_topics["r0"])
        tables.append({"identifier": "raw.{topic}", "topic_pattern": rf"{self.prefix}\.logs\..*",
                       "schema": EVENT_COLUMNS})
        for i, topic in enumerate(self.upsert_topics):
            bucketed = {"partition_spec": ["bucket(4, id)"]} if i % 2 else {}  # half of them: the exchange plan
            tables.append({**upsert, **bucketed, "identifier": f"db.u{i}", "topics": [topic],
                           "share_topics": i < SHARED_APPENDS})
        for i, topic in enumerate(self.append_topics):
            tables.append({"identifier": f"db.a{i}", "topics": [topic], "schema": EVENT_COLUMNS})
        for i in range(SHARED_APPENDS):
            tables.append({"identifier": f"db.a{APPENDS + i}", "topics": [self.upsert_topics[i]],
                           "schema": EVENT_COLUMNS, "share_topics": True})
        for table in tables:
            if table["identifier"] in INTERVAL_TABLES:
                table["commit_interval"] = "30s"
            if table["identifier"] in ("db.u0", "db.a4"):
                table.update(bad_records="dead-letter",
                             dead_letter_topic=self.dead_letter_topics[table["identifier"][3:]])
        return {
            "kafka": {"bootstrap_servers": self.bootstrap, "reader": "python", "max_offsets_per_trigger": 3000},
            "catalog": {"uri": catalog_uri, "name": self.name, "warehouse": str(self.tmp / "warehouse")},
            "checkpoint_location": str(self.tmp / "checkpoints"),
            "trigger": {"processing_time": "2s"},
            "readiness": {"max_commit_age": "10m"},
            "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
            "ingest": {"query": "shared", "commit_threads": 8},
            "compaction": {"interval": "5s", "jitter": "0s", "rewrite_options": {"min-input-files": "2"}},
            "log_format": "json",
            "tables": tables,
        }

    def top_up(self, run: int) -> None:
        """More records for every topic: routed changes with a few unroutable and undecodable ones, changes
        for the upsert topics (the shared ones without tombstones: their append readers take every record),
        and appends."""
        self._produce(self.events, routed_changes(run))
        for i, topic in enumerate(self.upsert_topics):
            changes = change_events(150, 40, seed=1_000 * run + i)
            if i < SHARED_APPENDS:
                changes = [e for e in changes if e.value is not None]
            if i == 0:
                changes = changes[:50] + [Event(b"0", GARBAGE)] * 3 + changes[50:]
            self._produce(topic, changes)
        for topic in [*self.logs, *self.append_topics]:
            self.more_appends(topic, 80)

    def more_appends(self, topic: str, count: int) -> None:
        self._produce(topic, appends(len(self.delivered.get(topic, [])), count))

    def more_changes(self, topic: str, count: int, seed: int) -> None:
        """Changes without tombstones: the topic may have an append reader too, which takes every record."""
        self._produce(topic, [e for e in change_events(count, 40, seed=seed) if e.value is not None])

    def _produce(self, topic: str, events: list[Event]) -> None:
        self.delivered.setdefault(topic, []).extend(produce(self.bootstrap, topic, events))

    def write(self, **overrides: Any) -> Path:
        path = self.tmp / "floe.yaml"
        path.write_text(yaml.safe_dump({**self.config, **overrides}))
        return path

    # What each table must hold

    def expected_upsert(self, topic: str, kind: str | None = None) -> dict[int, dict[str, Any]]:
        return expected_table(d for d in self.delivered[topic] if _decodable(d) and _kind(d) == kind)

    def expected_appends(self, topic: str) -> Counter[tuple[Any, Any]]:
        return Counter((v.get("id"), v.get("version")) for v in map(_value, self.delivered[topic]) if v is not None)

    def bad_records(self, topic: str, unroutable: bool = False) -> set[tuple[str, int, int]]:
        return {(topic, d.partition, d.offset) for d in self.delivered[topic]
                if not _decodable(d) or (unroutable and _kind(d) not in {f"k{k}" for k in range(KINDS)})}


def routed_changes(run: int) -> list[Event]:
    """Each routed table's changes (its own keys), interleaved, with ``kind`` set; no tombstones (a tombstone
    names no table); then records no table takes: another kind, no kind, and undecodable bytes."""
    per_kind = [[e for e in change_events(60, 25, seed=100 * run + k) if e.value is not None] for k in range(KINDS)]
    events = []
    for n in range(max(map(len, per_kind))):
        for k, changes in enumerate(per_kind):
            if n < len(changes):
                value = {**json.loads(changes[n].value or b"{}"), "kind": f"k{k}"}
                events.append(Event(changes[n].key, json.dumps(value).encode()))
    stray = [{"op": "c", "id": 1, "kind": "k9"}, {"op": "c", "id": 2}, {"op": "c", "id": 3, "kind": 3.5}]
    return events + [Event(b"1", json.dumps(v).encode()) for v in stray] + [Event(b"4", GARBAGE)]


def appends(first: int, count: int) -> list[Event]:
    return [Event(json.dumps(i).encode(), json.dumps({"id": i, "name": f"n{i}", "amount": i / 4,
                                                      "event_ts": "2026-01-01T00:00:00+00:00", "version": 1}).encode())
            for i in range(first, first + count)]


def _value(d: Delivered) -> dict[str, Any] | None:
    try:
        return None if d.event.value is None else json.loads(d.event.value)
    except ValueError:
        return None


def _decodable(d: Delivered) -> bool:
    return d.event.value != GARBAGE


def _kind(d: Delivered) -> str | None:
    value = _value(d)
    return None if value is None else value.get("kind")


def committed(log: Path, table: str | None = None) -> int:
    """How many table-batches the run's log reports committed (of ``table``, or of any)."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return sum(1 for line in lines if line.startswith("{") and '"result": "committed"' in line
               and (table is None or f'"table": "{table}"' in line))


def logged(log: Path, text: str, table: str) -> bool:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return any(text in line and f'"table": "{table}"' in line for line in lines)


def wait(reached: Callable[[], Any], what: str, *procs: subprocess.Popen, log: Path | None = None) -> None:
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while not reached():
        for proc in procs:
            assert proc.poll() is None, f"a floe process ended (code {proc.returncode}) before {what}: {tail(log)}"
        assert time.monotonic() < deadline, f"not within {STATE_TIMEOUT_S}s: {what}: {tail(log)}"
        time.sleep(0.5)


def tail(log: Path | None) -> str:
    return "" if log is None or not log.exists() else log.read_text(errors="replace")[-4000:]


def test_forty_tables_from_thirty_topics_survive_five_sigkills_and_a_dropped_table(
        kafka_bootstrap, new_topic, postgres_uri, iceberg_oracle, tmp_path):  # noqa: F811
    fleet = Fleet(new_topic, tmp_path, kafka_bootstrap, postgres_uri)
    assert len(fleet.topics) == 30
    path = fleet.write()
    catalog = SqlCatalog(postgres_uri, str(tmp_path / "warehouse"), fleet.name)
    compact_log = tmp_path / "compact.log"
    with compact_log.open("wb") as out:
        compactor = subprocess.Popen([*FLOE, "compact", "--config", str(path)], cwd=REPO, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
    rng = random.Random(32)
    try:
        for run in range(KILLS):
            fleet.top_up(run)
            log = tmp_path / f"run-{run}.log"
            ingest = start_floe(path, log)
            wanted = rng.randint(10, 40)  # a run's records make about 75 (two batches of 40 tables)
            wait(lambda log=log, wanted=wanted: committed(log) >= wanted, f"run {run}: {wanted} table commits",
                 ingest, compactor, log=log)
            if run == HELD_RUN:
                hold_and_release(fleet, catalog, log, ingest, compactor)
            time.sleep(rng.random())
            assert ingest.poll() is None, f"run {run} ended on its own: {tail(log)}"
            assert kill_group(ingest), "the SIGKILL ended the run"

        drain_start = time.time()
        drain = subprocess.run([*FLOE, "ingest", "--config", str(fleet.write(trigger={"available_now": True}))],
                               cwd=REPO, capture_output=True, text=True, timeout=900)
        assert drain.returncode == 0, drain.stdout[-4000:] + drain.stderr[-4000:]
        wait(lambda: any(_compacted(catalog, t) for t in _identifiers(fleet)), "a compaction commit", compactor)
    finally:
        compactor.send_signal(signal.SIGTERM)
        code = compactor.wait(120)
    assert code == 3, f"the compactor stopped on request, having failed nothing for good: {tail(compact_log)}"

    check_every_table(fleet, catalog, iceberg_oracle, postgres_uri)
    check_dead_letters(fleet)
    check_interval_tables(catalog, drain_start)


def hold_and_release(
    fleet: Fleet, catalog: SqlCatalog, log: Path, ingest: subprocess.Popen, compactor: subprocess.Popen
) -> None:
    """Drop db.u3 from the catalog mid-run and give it records; once it is held and the others have committed
    10 more table-batches (fed until they have), register it again and wait until it lands."""
    location = catalog.load_table(HELD_TABLE).metadata_location
    catalog.drop_table(HELD_TABLE)
    fleet.more_changes(fleet.upsert_topics[3], 50, seed=99)
    wait(lambda: logged(log, "the table is held", HELD_TABLE), f"{HELD_TABLE} held", ingest, compactor, log=log)
    others = committed(log) - committed(log, HELD_TABLE)

    def others_went_on() -> bool:
        fleet.more_appends(fleet.append_topics[2], 20)  # db.a2 commits every batch
        return committed(log) - committed(log, HELD_TABLE) >= others + 10

    wait(others_went_on, "the other tables committing on", ingest, compactor, log=log)
    catalog.register_table(HELD_TABLE, location)
    wait(lambda: logged(log, "lands again", HELD_TABLE), f"{HELD_TABLE} landing again", ingest, compactor, log=log)


def _identifiers(fleet: Fleet) -> list[str]:
    return [t["identifier"] for t in fleet.config["tables"] if "{topic}" not in t["identifier"]] + [
        "raw." + topic.replace(".", "_").replace("-", "_") for topic in fleet.logs]


def _compacted(catalog: SqlCatalog, identifier: str) -> bool:
    return any(s.summary.get("operation") == "replace" for s in catalog.load_table(identifier).metadata.snapshots)


def _rows(catalog: SqlCatalog, identifier: str) -> Any:
    loaded = catalog.load_table(identifier)
    return TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()


def check_every_table(fleet: Fleet, catalog: SqlCatalog, oracle: Any, catalog_uri: str) -> None:
    use_jdbc_catalog(oracle, fleet.name, catalog_uri, fleet.tmp / "warehouse", **{"cache-enabled": "false"})
    expected: dict[str, Any] = {f"db.r{k}": fleet.expected_upsert(fleet.events, f"k{k}") for k in range(KINDS)}
    expected.update({f"db.u{i}": fleet.expected_upsert(t) for i, t in enumerate(fleet.upsert_topics)})
    appended = {f"db.a{i}": t for i, t in enumerate(fleet.append_topics)}
    appended.update({f"db.a{APPENDS + i}": fleet.upsert_topics[i] for i in range(SHARED_APPENDS)})
    appended.update({"raw." + t.replace(".", "_").replace("-", "_"): t for t in fleet.logs})
    assert len(expected) == 20 and len(appended) == 20
    for identifier, rows in expected.items():
        assert normalized(_rows(catalog, identifier)) == rows, f"{identifier} (Floe)"
        assert normalized(oracle.sql(f"SELECT * FROM {fleet.name}.{identifier}")) == rows, f"{identifier} (Java)"
    for identifier, topic in appended.items():
        want = fleet.expected_appends(topic)
        got = _rows(catalog, identifier).select(["id", "version"]).to_pylist()
        assert Counter((r["id"], r["version"]) for r in got) == want, f"{identifier} (Floe)"
        java = oracle.sql(f"SELECT id, version FROM {fleet.name}.{identifier}").to_pylist()
        assert Counter((r["id"], r["version"]) for r in java) == want, f"{identifier} (Java)"


def check_dead_letters(fleet: Fleet) -> None:
    wanted = {
        "r0": fleet.bad_records(fleet.events, unroutable=True),
        "u0": fleet.bad_records(fleet.upsert_topics[0]),
        "a4": fleet.bad_records(fleet.upsert_topics[0]),
    }
    for table, records in wanted.items():
        assert records, f"the test gives {table} bad records"
        messages = consume_all(fleet.bootstrap, fleet.dead_letter_topics[table], len(records))
        headers = [{k: v and v.decode() for k, v in m.headers()} for m in messages]
        got = {(h["floe.source.topic"], int(h["floe.source.partition"]), int(h["floe.source.offset"]))
               for h in headers}
        assert got == records, f"db.{table}'s dead letters"


def check_interval_tables(catalog: SqlCatalog, drain_start: float) -> None:
    """A table under a 30 s commit interval commits at most once per 30 s while streaming (the drain, which
    ends once caught up, waits for no interval)."""
    for identifier in INTERVAL_TABLES:
        snapshots = catalog.load_table(identifier).metadata.snapshots
        streamed = sorted(s.timestamp_ms / 1000 for s in snapshots
                          if s.summary.get("operation") == "append" and s.timestamp_ms / 1000 < drain_start)
        gaps = [b - a for a, b in itertools.pairwise(streamed)]
        assert all(gap >= 30.0 for gap in gaps), f"{identifier}: commits at most every 30 s, got gaps {gaps}"
