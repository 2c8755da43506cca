"""End to end: malformed records go to the dead-letter topic; valid ones land; counts add up.

JSON in upsert mode (bad JSON, wrong types, a missing key, a tombstone
without a key; the cached path) and Confluent-framed Avro with a local schema
directory in append mode (an unknown schema id, a record that is not framed,
a truncated one; the direct path, whose dead letters keep their Kafka headers
through a second pass). Every bad record is in the
dead-letter topic once, with its original bytes and ``floe.*`` reason
headers. With the ``fail`` policy the query stops with the first error and
commits nothing of that batch.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Optional

import fastavro
import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from ingest.tasks.dead_letters import (
    ERROR_CLASS,
    ERROR_FIELD,
    ERROR_MESSAGE,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
)
from ingest.tasks.decode_records import DecodeSpec
from ingest.tasks.decoding import ConfluentFormat
from ingest.job import CatalogSpec, IngestJob, SourceSpec, TableSpec, TriggerSpec
from ingest.driver.metrics import IngestMetrics
from ingest.driver.stream import run_ingest
from table.io import FileIO
from table.scan import TableScan
from table.schema import Schema
from table.types import DoubleType, LongType, NestedField, StringType
from tests.ingest.e2e_support import Event, consume_all, produce

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "amount", DoubleType()),
    identifier_field_ids=[1],
)
AVRO_SCHEMA = {
    "type": "record", "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "amount", "type": "double"}],
}
VALID = 300


def valid_json(i: int) -> Event:
    return Event(json.dumps(i).encode(), json.dumps({"id": i, "name": f"n{i}", "amount": i / 4}).encode())


BAD_JSON = {
    "DecodeError": [Event(b"1000", b'{"id": 1000, "name": '), Event(b"1001", b"\xff\xfe not utf-8")],
    "FieldError": [
        Event(b"1002", json.dumps({"id": 1002, "amount": "lots"}).encode()),  # wrong type
        Event(b"1003", json.dumps({"id": "x", "name": "n"}).encode()),  # wrong key type
        Event(None, json.dumps({"name": "no id"}).encode()),  # missing key (and no Kafka key)
    ],
    "ChangeError": [Event(None, None)],  # a tombstone without a key deletes nothing known
}


def framed(schema_id: int, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def job_for(bootstrap: str, topic: str, tmp: Path, decode: DecodeSpec, *, policy: str,
            dlq: Optional[str], reader: str = "spark") -> IngestJob:
    return IngestJob(
        source=SourceSpec(bootstrap, topics=(topic,), max_offsets_per_trigger=200, reader=reader),
        table=TableSpec("db.t", decode, bad_records=policy, dead_letter_topic=dlq),  # type: ignore[arg-type]
        catalog=CatalogSpec(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")),
        checkpoint_location=str(tmp / "checkpoint"),
        trigger=TriggerSpec(available_now=True),
    )


def table_rows(job: IngestJob) -> list[dict[str, Any]]:
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        loaded = catalog.load_table(job.table.identifier)
    return TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow().to_pylist()


def headers_of(msg: Any) -> dict[str, Optional[str]]:
    return {k: None if v is None else v.decode() for k, v in msg.headers() or []}


def interleave(valid: list[Event], bad: list[Event]) -> list[Event]:
    events = list(valid)
    for n, event in enumerate(bad):
        events.insert((n * 37) % len(events), event)
    return events


@pytest.mark.parametrize("reader", ["spark", "python"])  # Spark's Kafka source, and Floe's
def test_bad_json_records_are_dead_lettered_and_valid_ones_land(spark, kafka_bootstrap, new_topic, tmp_path, reader):
    topic, dlq = new_topic("bad-json", partitions=2), new_topic("bad-json-dlq")
    bad = [e for events in BAD_JSON.values() for e in events]
    delivered = produce(kafka_bootstrap, topic, interleave([valid_json(i) for i in range(VALID)], bad),
                        headers=[("trace", b"t-2")])
    decode = DecodeSpec(SCHEMA, mode="upsert")
    job = job_for(kafka_bootstrap, topic, tmp_path, decode, policy="dead-letter", dlq=dlq, reader=reader)
    registry = CollectorRegistry()
    run_ingest(job, spark, metrics=IngestMetrics(registry)).await_termination(300)

    assert sorted(r["id"] for r in table_rows(job)) == list(range(VALID))
    letters = consume_all(kafka_bootstrap, dlq, len(bad))
    assert len(letters) == len(bad) and len(delivered) == VALID + len(bad)
    by_position = {(d.partition, d.offset): d.event for d in delivered}
    classes: dict[str, int] = {}
    for msg in letters:
        headers = headers_of(msg)
        assert headers[SOURCE_TOPIC] == topic
        original = by_position[(int(headers[SOURCE_PARTITION]), int(headers[SOURCE_OFFSET]))]  # type: ignore[arg-type]
        assert (msg.key(), msg.value()) == (original.key, original.value), "the original bytes are kept"
        assert headers[ERROR_MESSAGE]
        assert headers["trace"] == "t-2", "the original headers come first, then Floe's"
        assert [k for k, _ in msg.headers()][0] == "trace"
        classes[headers[ERROR_CLASS]] = classes.get(headers[ERROR_CLASS], 0) + 1  # type: ignore[index]
    assert classes == {cls: len(events) for cls, events in BAD_JSON.items()}
    wrong_type = [headers_of(m) for m in letters if m.key() == b"1002"][0]
    assert wrong_type[ERROR_FIELD] == "amount"

    table = job.table.identifier
    for cls, events in BAD_JSON.items():
        assert registry.get_sample_value("floe_ingest_bad_records_total", {"table": table, "reason": cls}) == len(events)
    assert registry.get_sample_value("floe_ingest_records_read_total", {"table": table}) == len(delivered)
    assert registry.get_sample_value("floe_ingest_records_committed_total", {"table": table}) == VALID


def test_confluent_avro_with_an_unknown_schema_id_is_dead_lettered(spark, kafka_bootstrap, new_topic, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "7.avsc").write_text(json.dumps(AVRO_SCHEMA))
    topic, dlq = new_topic("bad-avro", partitions=2), new_topic("bad-avro-dlq")
    valid = [Event(None, framed(7, {"id": i, "name": f"n{i}", "amount": 0.5})) for i in range(VALID)]
    bad = [
        Event(b"unknown-id", framed(99, {"id": 1, "name": "x", "amount": 1.0})),
        Event(b"not-framed", json.dumps({"id": 2}).encode()),
        Event(b"truncated", framed(7, {"id": 3, "name": "y", "amount": 1.0})[:-4]),
    ]
    produce(kafka_bootstrap, topic, interleave(valid, bad), headers=[("trace", b"t-1")])
    decode = DecodeSpec(SCHEMA, format=ConfluentFormat(schema_dir=str(schemas)), mode="append")
    job = job_for(kafka_bootstrap, topic, tmp_path, decode, policy="dead-letter", dlq=dlq)
    run_ingest(job, spark).await_termination(300)

    assert sorted(r["id"] for r in table_rows(job)) == list(range(VALID))
    letters = {m.key(): headers_of(m) for m in consume_all(kafka_bootstrap, dlq, len(bad))}
    assert set(letters) == {e.key for e in bad}
    assert letters[b"unknown-id"][ERROR_CLASS] == "UnknownSchemaError"
    assert "99" in letters[b"unknown-id"][ERROR_MESSAGE]  # type: ignore[operator]
    assert letters[b"not-framed"][ERROR_CLASS] == "DecodeError"
    assert letters[b"truncated"][ERROR_CLASS] == "DecodeError"
    assert all(headers["trace"] == "t-1" for headers in letters.values()), "the original headers are kept"


@pytest.mark.parametrize("mode", ["upsert", "append"])  # the cached path, and the direct path (append)
def test_the_fail_policy_stops_the_query_with_the_first_error(spark, kafka_bootstrap, new_topic, tmp_path, mode):
    topic = new_topic("bad-fail")
    events = [valid_json(i) for i in range(50)] + [Event(b"7", b"{broken")] + [valid_json(i) for i in range(50, 60)]
    produce(kafka_bootstrap, topic, events)
    job = job_for(kafka_bootstrap, topic, tmp_path, DecodeSpec(SCHEMA, mode=mode), policy="fail", dlq=None)
    query = run_ingest(job, spark)
    with pytest.raises(Exception) as raised:
        query.await_termination(300)
    assert "BadRecordError" in str(raised.value) and f"{topic}/0@50" in str(raised.value)
    assert not query.is_active
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        assert catalog.load_table(job.table.identifier).metadata.snapshots == (), "nothing of the batch committed"
