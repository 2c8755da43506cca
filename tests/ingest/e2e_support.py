"""Helpers of the ingest end-to-end tests: change events, the expected table, job specs.

The expected table is computed here in plain Python from what the producer
delivered, in Kafka order per key: independently of Floe's reduction.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import pyarrow as pa
from confluent_kafka import Consumer, Producer

from ingest.tasks.changes import OpField
from ingest.tasks.decode_records import DecodeSpec
from ingest.job import CatalogSpec, IngestJob, SourceSpec, TableSpec, TriggerSpec
from table.schema import Schema
from table.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

REPO = Path(__file__).resolve().parents[2]

EVENTS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "amount", DoubleType()),
    NestedField(4, "event_ts", TimestamptzType()),
    NestedField(5, "version", LongType()),
    identifier_field_ids=[1],
)
COLUMNS = ["id", "name", "amount", "event_ts", "version"]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Event:
    """One Kafka record to produce: key, value (None: tombstone)."""

    key: Optional[bytes]
    value: Optional[bytes]


@dataclass(frozen=True)
class Delivered:
    partition: int
    offset: int
    event: Event


def change_events(count: int, keys: int, seed: int = 7) -> list[Event]:
    """Inserts, updates, deletes (op d) and tombstones over ``keys`` keys, in produce order.

    A key is inserted (``c``) when absent, else updated (``u``), deleted
    (``d``, the row image carries the key) or tombstoned; deleted keys come
    back later with a fresh insert.
    """
    rng = random.Random(seed)
    alive: set[int] = set()
    events = []
    for i in range(count):
        key = rng.randrange(keys)
        roll = rng.random()
        if key in alive and roll < 0.12:
            events.append(Event(json.dumps(key).encode(), json.dumps({"op": "d", "id": key}).encode()))
            alive.discard(key)
        elif key in alive and roll < 0.17:
            events.append(Event(json.dumps(key).encode(), None))
            alive.discard(key)
        else:
            op = "u" if key in alive else "c"
            alive.add(key)
            events.append(Event(json.dumps(key).encode(), json.dumps(row_value(key, i, op)).encode()))
    return events


def row_value(key: int, version: int, op: str = "c") -> dict[str, Any]:
    ts = T0 + dt.timedelta(seconds=version * 7 % 864_000)
    return {"op": op, "id": key, "name": f"n{key}-{version}", "amount": version * 0.25,
            "event_ts": ts.isoformat(), "version": version}


def produce(bootstrap: str, topic: str, events: Iterable[Event],
            headers: Optional[list[tuple[str, bytes]]] = None, round_robin: Optional[int] = None) -> list[Delivered]:
    """Produce in order (idempotent, so per-partition order is produce order); the deliveries.
    ``round_robin``: the n-th event goes to partition n % round_robin, whatever its key."""
    delivered: list[Delivered] = []
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.num.messages": 10000})
    for n, event in enumerate(events):
        def on_delivery(err: Any, msg: Any, event: Event = event) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append(Delivered(msg.partition(), msg.offset(), event))

        while True:
            try:
                where = {} if round_robin is None else {"partition": n % round_robin}
                producer.produce(topic, key=event.key, value=event.value, headers=headers, on_delivery=on_delivery,
                                 **where)
                break
            except BufferError:
                producer.poll(0.2)
        if n % 5000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "the producer could not deliver every record"
    assert not errors, errors[:3]
    return delivered


def create_topic(bootstrap: str, prefix: str = "t", partitions: int = 1) -> str:
    """A new, uniquely named topic on the broker at ``bootstrap``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=30)
    return name


def expected_table(delivered: Iterable[Delivered]) -> dict[int, dict[str, Any]]:
    """id -> final row, applying every change in Kafka order (per key: its partition's order)."""
    rows: dict[int, dict[str, Any]] = {}
    for d in sorted(delivered, key=lambda d: (d.partition, d.offset)):
        key = json.loads(d.event.key)
        if d.event.value is None:
            rows.pop(key, None)
            continue
        value = json.loads(d.event.value)
        if value.get("op") == "d":
            rows.pop(key, None)
        else:
            rows[key] = {c: value[c] for c in COLUMNS}
    return rows


def normalized(table: pa.Table) -> dict[int, dict[str, Any]]:
    """Rows of a read table as id -> row, timestamps as ISO text (UTC); asserts unique ids."""
    result: dict[int, dict[str, Any]] = {}
    for row in table.select(COLUMNS).to_pylist():
        ts = row["event_ts"]
        row["event_ts"] = None if ts is None else ts.astimezone(dt.timezone.utc).isoformat()
        assert row["id"] not in result, f"duplicate id {row['id']}"
        result[row["id"]] = row
    return result


def upsert_job(bootstrap: str, topic: str, tmp: Path, *, identifier: str = "db.events",
               max_offsets: int = 50_000, partition: tuple = (("bucket[4]", "id"),),
               available_now: bool = True, processing_time: float = 60.0, store: Optional[str] = None,
               **source: Any) -> IngestJob:
    """``store``: an object-store root (``s3://bucket``) for the warehouse and the checkpoint, else ``tmp``."""
    decode = DecodeSpec(EVENTS, mode="upsert", op_field=OpField("op"))
    return IngestJob(
        source=SourceSpec(bootstrap, topics=(topic,), max_offsets_per_trigger=max_offsets, **source),
        table=TableSpec(identifier, decode, partition=partition),
        catalog=CatalogSpec(f"sqlite:///{tmp / 'catalog.db'}", f"{store or tmp}/warehouse"),
        checkpoint_location=f"{store.replace('s3://', 's3a://', 1) if store else tmp}/checkpoint",
        trigger=TriggerSpec(processing_time, available_now),
        lag_interval_seconds=5.0,
    )


def ingest_command(job_file: Path) -> list[str]:
    return [sys.executable, "-m", "ingest", "--job", str(job_file)]


def start_ingest(job_file: Path, log: Path) -> subprocess.Popen:
    """``python -m ingest`` in its own process group (driver, JVM, workers), logging to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(ingest_command(job_file), cwd=REPO, stdout=out, stderr=out, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def json_log_records(text: str) -> list[dict[str, Any]]:
    """The JSON lines of a log that a process may still be writing: a last line without its newline is half
    written, so it waits for the next read."""
    complete = text if text.endswith("\n") else text[:text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.startswith("{")]


def batch_lines(log: Path) -> list[dict[str, Any]]:
    """The per-batch JSON log lines written so far."""
    return [r for r in json_log_records(log.read_text(errors="replace")) if "batch_id" in r]


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
    """Every message of ``topic`` from the start: at least ``expected``, then a few idle seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    messages: list[Any] = []
    idle = 0
    try:
        while idle < timeout_s:
            msg = consumer.poll(1.0)
            if msg is None:
                idle += 1
                if len(messages) >= expected and idle >= 3:
                    break
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
    finally:
        consumer.close()
    return messages


def check_v3_snapshot(snapshot: Any, tasks: list[Any]) -> None:
    """A v3 snapshot: deletes are deletion vectors, at most one per data file; data files' row id
    ranges do not overlap; the files this snapshot gave ids to tile its range
    [first-row-id, first-row-id + added-rows) without a gap."""
    where = f"snapshot {snapshot.snapshot_id}"
    assert all(d.is_deletion_vector for t in tasks for d in t.position_deletes), where
    assert all(len(t.position_deletes) <= 1 for t in tasks), f"two DVs for one data file at {where}"
    assert snapshot.first_row_id is not None and snapshot.added_rows is not None, where
    ranges = sorted((t.data_file.first_row_id, t.data_file.first_row_id + t.data_file.record_count) for t in tasks)
    assert all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:])), f"row ids overlap at {where}"
    low, high = snapshot.first_row_id, snapshot.first_row_id + snapshot.added_rows
    own = [r for r in ranges if low <= r[0] < high]
    assert sum(end - start for start, end in own) == snapshot.added_rows, f"row ids of {where} leave a gap"


class PacedProducer(threading.Thread):
    """Produces ``events`` a chunk at a time until stopped: the topic stays ahead of the query, however fast
    the machine drains it, so a test that waits for a state mid-stream never finds the stream ended."""

    def __init__(self, bootstrap: str, topic: str, events: list[Event], chunk: int, pause_s: float = 0.3) -> None:
        super().__init__(name="paced-producer", daemon=True)
        self.bootstrap, self.topic, self.events, self.chunk, self.pause_s = bootstrap, topic, events, chunk, pause_s
        self.produced = 0
        self.delivered: list[Delivered] = []
        self.started = threading.Event()
        self.finish = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            while not self.finish.is_set():
                self.delivered.extend(produce(self.bootstrap, self.topic, self.more(self.chunk)))
                self.started.set()
                self.finish.wait(self.pause_s)
        except BaseException as error:  # noqa: BLE001 - reported by stop()
            self.error = error
            self.started.set()

    def more(self, count: int) -> list[Event]:
        """The next ``count`` events; the test fails when there are none left."""
        chunk = self.events[self.produced:self.produced + count]
        assert len(chunk) == count, "the producer ran out of events before the test finished"
        self.produced += count
        return chunk

    def stop(self) -> list[Delivered]:
        self.finish.set()
        self.join(120)
        assert self.error is None, f"the producer failed: {self.error}"
        return self.delivered
