"""End to end: tables whose columns come from the schema registry, evolved while ingest runs.

Real Kafka, Spark and catalog; the producers are confluent-kafka's own ``AvroSerializer`` and
``SchemaRegistryClient``, registering every version in the tests' registry (tests/support/schema_registry.py).
Four tables list no columns: an Avro append table, and three upsert tables that name no key either: Avro,
JSON Schema (``JSONSerializer``) and Protobuf (``ProtobufSerializer``, whose message also has a ``oneof
contact`` that version 2 extends with ``phone``). Their key columns come from the Kafka key's registry subject,
a record ``{id}`` in the topic's own format, and tombstones after the last version delete rows. While ``floe ingest`` runs, the producers move
through five versions of the value schema, the same in every format:

1. ``id``, ``qty`` (int), ``note`` (string), ``ship`` {``city``}: the table is created from it;
2. ``qty`` widened to long, ``ship.city`` made optional, ``ship.zip`` added (a nested field);
3. ``note`` dropped: the column stays, optional, and is written as null;
4. ``qty`` as a string: refused, its records go to the dead letters with the reason;
5. version 3 with a new optional ``tag``.

Floe, Iceberg Java and pyiceberg read exactly the expected rows with the evolved columns; each change is one
log line and one snapshot summary entry naming the schema id; the refused version stops nothing.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from prometheus_client import CollectorRegistry
from pyiceberg.table import StaticTable

from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from ingest.driver.writer_schemas.subject import SCHEMA_CHANGE
from ingest.tasks.dead_letters import ERROR_MESSAGE, SOURCE_OFFSET, SOURCE_TOPIC
from service.config import parse_config
from service.ingest_command import EXIT_STOPPED, run_ingest_service
from service.local_kafka import free_port
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import REPO, consume_all
from tests.ingest.test_e2e_crashes import kill_group
from tests.service.test_sigterm import FLOE, start_floe
from tests.support.protobuf_messages import message_classes
from tests.support.schema_registry import SchemaRegistry

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

SHIP1 = {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}
SHIP2 = {"type": "record", "name": "Ship", "fields": [
    {"name": "city", "type": ["null", "string"]}, {"name": "zip", "type": ["null", "string"], "default": None}]}
VERSIONS = [
    [("id", "long"), ("qty", "int"), ("note", "string"), ("ship", SHIP1)],
    [("id", "long"), ("qty", "long"), ("note", "string"), ("ship", SHIP2)],
    [("id", "long"), ("qty", "long"), ("ship", SHIP2)],
    [("id", "long"), ("qty", "string"), ("ship", SHIP2)],
    [("id", "long"), ("qty", "long"), ("ship", SHIP2), ("tag", ["null", "string"])],
]
KEY_SCHEMA = {"type": "record", "name": "Key", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
JSON_KEY_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
UPSERTS = ("upsert", "json", "proto")
"""The upsert topics: Avro, JSON Schema and Protobuf values, each keyed by a registry record in its format."""
DELETED = [0, 1, 2]
"""Keys of the upsert table deleted by tombstones after the last version."""
PER_VERSION = 40
KEYS = 25  # the upsert table's keys: each version updates some and adds others


def schema_text(version: int) -> str:
    fields = [{"name": n, "type": t} for n, t in VERSIONS[version]]
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": fields})


JSON_TYPES = {"long": {"type": "integer"}, "int": {"type": "integer", "connect.type": "int32"},
              "string": {"type": "string"}}


def json_schema_text(version: int) -> str:
    """The JSON Schema of ``version``: the Avro fields as properties, required where Avro has no null."""
    def prop(avro: Any) -> tuple[dict, bool]:
        if isinstance(avro, list):
            return {"oneOf": [{"type": "null"}, prop(avro[1])[0]]}, False
        if isinstance(avro, dict):
            fields = [(f["name"], *prop(f["type"])) for f in avro["fields"]]
            return {"type": "object", "properties": {n: p for n, p, _ in fields},
                    "required": [n for n, _, req in fields if req]}, True
        return dict(JSON_TYPES[avro]), True

    schema, _ = prop({"fields": [{"name": n, "type": t} for n, t in VERSIONS[version]]})
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", **schema})


def proto_classes(version: int) -> dict[str, Any]:
    """Version ``version`` as Protobuf: the same fields; an optional one is a wrapper; ``oneof contact``."""
    wrapped = {"string": "google.protobuf.StringValue"}
    scalar = {"long": "int64", "int": "int32", "string": "string"}
    order = [(n, "Ship" if isinstance(t, dict) else wrapped[t[1]] if isinstance(t, list) else scalar[t])
             for n, t in VERSIONS[version]]
    ship = SHIP1 if version == 0 else SHIP2
    ship_fields = [(f["name"], wrapped[f["type"][1]] if isinstance(f["type"], list) else scalar[f["type"]])
                   for f in ship["fields"]]
    contact = ["email"] if version == 0 else ["email", "phone"]
    return message_classes({"Order": order + [(c, "string") for c in contact], "Ship": ship_fields},
                           oneofs={"Order": {"contact": contact}})


def contact_of(version: int, record: dict[str, Any]) -> str:
    return "email" if version == 0 or record["id"] % 2 == 0 else "phone"


def proto_message(version: int, record: dict[str, Any], classes: dict[str, Any]) -> Any:
    message = classes["Order"](id=record["id"], qty=record["qty"])
    for name, target in (("note", message), ("tag", message)):
        if name in record:
            if version == 0 or name == "note":
                setattr(target, name, record[name])
            else:
                getattr(target, name).value = record[name]
    if version == 0:
        message.ship.city = record["ship"]["city"]
    else:
        message.ship.city.value = record["ship"]["city"]
        if record["ship"].get("zip") is not None:
            message.ship.zip.value = record["ship"]["zip"]
    contact = contact_of(version, record)
    setattr(message, contact, f"{contact}-{record['id']}")
    return message


def value(version: int, i: int, key: int) -> dict[str, Any]:
    """Record ``i`` of ``version``: qty beyond an int's range from version 2 on."""
    names = {n for n, _ in VERSIONS[version]}
    record: dict[str, Any] = {"id": key, "qty": i if version == 0 else 2**40 + i, "ship": {"city": f"c{i}"}}
    if version == 3:
        record["qty"] = f"q{i}"
    if "note" in names:
        record["note"] = f"n{i}"
    if version >= 1:
        record["ship"]["zip"] = f"z{i}" if i % 2 else None
    if "tag" in names:
        record["tag"] = f"t{i}"
    return record


def expected_row(version: int, record: dict[str, Any]) -> dict[str, Any]:
    """The row a record lands as: every column the table ever had, null where the writer had none."""
    ship = {"city": record["ship"]["city"], "zip": record["ship"].get("zip")}
    return {"id": record["id"], "qty": record["qty"], "note": record.get("note"), "ship": ship, "tag": record.get("tag")}


def rows_by(table: Any, key: str) -> dict[Any, dict[str, Any]]:
    return {row[key]: row for row in table.to_pylist()}


def config(tmp: Path, bootstrap: str, registry_url: str, topics: dict[str, str], dead_letters: str) -> dict:
    avro = {"type": "confluent-avro", "registry_url": registry_url}
    common = {"format": avro, "bad_records": "dead-letter", "dead_letter_topic": dead_letters}
    return {
        "kafka": {"bootstrap_servers": bootstrap},
        "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "warehouse")},
        "checkpoint_location": str(tmp / "checkpoints"),
        "trigger": {"processing_time": "1s"},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "tables": [
            {"identifier": "db.orders", "topics": [topics["append"]], "mode": "append", **common},
            {"identifier": "db.items", "topics": [topics["upsert"]], "mode": "upsert", **common},  # key: the Kafka key's
            {"identifier": "db.events", "topics": [topics["json"]], "mode": "upsert", **common},
            {"identifier": "db.proto", "topics": [topics["proto"]], "mode": "upsert", **common},
        ],
    }


class Producers:
    """One confluent-kafka producer; a serializer per schema version, registering it on first use."""

    def __init__(self, bootstrap: str, registry_url: str) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        client = SchemaRegistryClient({"url": registry_url})
        self._serializers = {
            "avro": [AvroSerializer(client, schema_text(v)) for v in range(len(VERSIONS))],
            "json": [JSONSerializer(json_schema_text(v), client) for v in range(len(VERSIONS))],
        }
        key_message = message_classes({"Key": [("id", "int64")]}, package="keys")["Key"]
        proto_keys = ProtobufSerializer(key_message, client, {"use.deprecated.format": False})
        self._keys: dict[str, Callable[[dict[str, Any], SerializationContext], bytes]] = {
            "upsert": AvroSerializer(client, json.dumps(KEY_SCHEMA)),
            "json": JSONSerializer(json.dumps(JSON_KEY_SCHEMA), client),
            "proto": lambda key, context: proto_keys(key_message(**key), context),
        }
        self._protos = [proto_classes(v) for v in range(len(VERSIONS))]
        self._serializers["proto"] = [
            ProtobufSerializer(c["Order"], client, {"use.deprecated.format": False}) for c in self._protos]

    def send(self, topic: str, version: int, records: list[dict[str, Any]], kind: str) -> None:
        """``kind``: the topic's (``append``, ``upsert``, ``json``, ``proto``); the first two are Avro."""
        fmt = kind if kind in ("json", "proto") else "avro"
        serialize = self._serializers[fmt][version]
        for record in records:
            datum = proto_message(version, record, self._protos[version]) if kind == "proto" else record
            payload = serialize(datum, SerializationContext(topic, MessageField.VALUE))
            self._producer.produce(topic, key=self.key(topic, kind, record["id"]), value=payload)
        assert self._producer.flush(30) == 0

    def key(self, topic: str, kind: str, key: int) -> bytes:
        """An upsert topic's keys are records ``{id}`` in the registry (subject ``<topic>-key``), in the topic's
        own format: they name the table's key."""
        if kind not in UPSERTS:
            return str(key).encode()
        return self._keys[kind]({"id": key}, SerializationContext(topic, MessageField.KEY))

    def tombstones(self, topic: str, kind: str, keys: list[int]) -> None:
        for key in keys:
            self._producer.produce(topic, key=self.key(topic, kind, key), value=None)
        assert self._producer.flush(30) == 0


def wait_until_landed(tmp: Path, identifier: str, topic: str, end: int, alive: Callable[[], bool]) -> None:
    """Until the table's commits cover ``topic`` to ``end`` (dead letters included), while ``alive()``."""
    deadline = time.monotonic() + 180
    while True:
        with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
            if catalog.table_exists(identifier):
                metadata = catalog.load_table(identifier).metadata
                if committed_offsets(metadata).get(topic, {}).get(0, 0) >= end:
                    return
        assert alive() and time.monotonic() < deadline, f"{identifier} should land {topic} to {end}"
        time.sleep(0.5)


def check_table(tmp: Path, kind: str, identifier: str, expected: dict[Any, dict[str, Any]], oracle: Any) -> Any:
    """The table's evolved columns, and its rows as Floe, pyiceberg and Iceberg Java read them."""
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        loaded = catalog.load_table(identifier)
    schema = loaded.metadata.schema()
    if kind == "proto":  # a message field has presence; the oneof's members are optional columns
        assert [(f.field_id, f.name, str(f.field_type), f.required) for f in schema.fields] == [
            (1, "id", "long", True), (2, "qty", "long", True), (3, "note", "string", False),
            (4, "ship", "struct<6: city: optional string, 7: zip: optional string>", False),
            (5, "email", "string", False), (8, "phone", "string", False), (9, "tag", "string", False)]
    else:
        assert [(f.name, str(f.field_type), f.required) for f in schema.fields] == [
            ("id", "long", True), ("qty", "long", True), ("note", "string", False),
            ("ship", "struct<5: city: optional string, 6: zip: optional string>", True), ("tag", "string", False),
        ], identifier
        assert [f.field_id for f in schema.fields] == [1, 2, 3, 4, 7], "ids kept, new ones after the last"
    floe = rows_by(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow(), "id")
    pyiceberg = rows_by(StaticTable.from_metadata(loaded.metadata_location).scan().to_arrow(), "id")
    java = rows_by(oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=loaded.metadata_location), "id")
    assert floe == expected, f"Floe reads {identifier}"
    assert pyiceberg == expected, f"pyiceberg reads {identifier}"
    assert java == expected, f"Iceberg Java reads {identifier}"
    return loaded


TOPICS = {"append": "reg-append", "upsert": "reg-upsert", "json": "reg-json", "proto": "reg-proto"}
TABLES = {"append": "db.orders", "upsert": "db.items", "json": "db.events", "proto": "db.proto"}


class Stream:
    """The four topics, their producers, and what each table should hold after the versions sent so far."""

    def __init__(self, new_topic: Callable[[str], str], bootstrap: str, registry_url: str) -> None:
        self.topics = {kind: new_topic(prefix) for kind, prefix in TOPICS.items()}
        self.producers = Producers(bootstrap, registry_url)
        self.expected: dict[str, dict[Any, dict[str, Any]]] = {kind: {} for kind in TOPICS}
        self.sent = {kind: 0 for kind in TOPICS}

    def send(self, version: int) -> None:
        for kind, topic in self.topics.items():
            records = []
            for i in range(PER_VERSION):
                n = self.sent[kind] + i
                key = (version * 7 + i) % KEYS if kind in UPSERTS else n
                records.append(value(version, n, key))
            self.producers.send(topic, version, records, kind)
            self.sent[kind] += len(records)
            if version != 3:
                for record in records:
                    row = expected_row(version, record)
                    if kind == "proto":
                        contact = contact_of(version, record)
                        row.update({"email": None, "phone": None, contact: f"{contact}-{record['id']}"})
                    self.expected[kind][record["id"]] = row
        if version == len(VERSIONS) - 1:
            for kind in UPSERTS:
                self.producers.tombstones(self.topics[kind], kind, DELETED)
                self.sent[kind] += len(DELETED)
                for key in DELETED:
                    self.expected[kind].pop(key, None)

    def wait_until_landed(self, tmp: Path, alive: Callable[[], bool]) -> None:
        for kind, identifier in TABLES.items():
            wait_until_landed(tmp, identifier, self.topics[kind], self.sent[kind], alive)


def test_tables_follow_the_registry_and_evolve_while_ingest_runs(
    spark, kafka_bootstrap, new_topic, iceberg_oracle, tmp_path, caplog
):
    caplog.set_level("INFO", logger="floe.ingest")
    dead_letters = new_topic("reg-dead")
    registry = SchemaRegistry()
    url = registry.serve()
    stream = Stream(new_topic, kafka_bootstrap, url)
    topics, tables, expected, send = stream.topics, TABLES, stream.expected, stream.send

    send(0)  # the subjects have their first version before Floe starts
    stop, metrics = threading.Event(), CollectorRegistry()
    result: dict[str, int] = {}
    service = parse_config(config(tmp_path, kafka_bootstrap, url, topics, dead_letters))
    thread = threading.Thread(target=lambda: result.update(
        code=run_ingest_service(service, stop=stop, registry=metrics, port=free_port(), spark=spark)))
    thread.start()
    try:
        for version in range(len(VERSIONS)):
            if version:
                send(version)
            stream.wait_until_landed(tmp_path, thread.is_alive)
    finally:
        stop.set()
        thread.join(180)
        registry.close()
    assert result == {"code": EXIT_STOPPED}

    for kind, identifier in tables.items():
        loaded = check_table(tmp_path, kind, identifier, expected[kind], iceberg_oracle)
        changes = [s.summary.get(SCHEMA_CHANGE) for s in loaded.metadata.snapshots if s.summary.get(SCHEMA_CHANGE)]
        assert len(changes) == 4, changes  # versions 2 to 5, one landing each
        assert "(version 2 of" in changes[0] and "widen column qty from int to long" in changes[0]
        assert "add column ship.zip (string)" in changes[0] and "make column ship.city optional" in changes[0]
        assert "(version 3 of" in changes[1] and "make column note optional" in changes[1]
        assert "refused" in changes[2] and "column 'qty' is long in the table and string" in changes[2]
        assert "(version 5 of" in changes[3] and "add column tag (string)" in changes[3]

    evolved = [r.getMessage() for r in caplog.records if "evolved for schema id" in r.getMessage()]
    assert len(evolved) == 4 * 3, evolved  # versions 2, 3 and 5 of each table
    refused = [r for r in caplog.records if "refused" in r.getMessage() and "(version 4 of" in r.getMessage()]
    assert len(refused) == 4, [r.getMessage() for r in refused]
    assert metrics.get_sample_value("floe_ingest_schema_changes_total", {"table": "db.items", "result": "refused"}) == 1

    letters = consume_all(kafka_bootstrap, dead_letters, 4 * PER_VERSION)
    assert len(letters) == 4 * PER_VERSION
    reasons = {dict(m.headers())[ERROR_MESSAGE].decode() for m in letters}
    assert all("refused: column 'qty' is long in the table and string in the writer schema" in r for r in reasons)
    assert len(reasons) == 4 and all("(version 4 of reg-" in r for r in reasons)  # one per subject


def compacted(tmp: Path) -> bool:
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        return any(s.summary.get("operation") == "replace"
                   for t in TABLES.values() if catalog.table_exists(t) for s in catalog.load_table(t).metadata.snapshots)


def logged_change(log: Path, version: int) -> bool:
    """Whether the run's log has a table's line about ``version`` (1-based in the registry)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return f"(version {version} of reg-" in text


def test_tables_follow_the_registry_through_three_sigkills_with_the_compactor_alongside(
    kafka_bootstrap, new_topic, iceberg_oracle, tmp_path
):
    """``floe ingest`` (a shared query) is SIGKILLed three times, each soon after a table took a new version
    (a state of the run, not a time), so a kill falls between a table's evolution and its data commit, or
    after both; ``floe compact`` runs throughout. Every row lands exactly once, with the evolved columns."""
    dead_letters = new_topic("reg-dead")
    registry = SchemaRegistry()
    url = registry.serve()
    stream = Stream(new_topic, kafka_bootstrap, url)
    raw = config(tmp_path, kafka_bootstrap, url, stream.topics, dead_letters)
    raw.update(ingest={"query": "shared"}, log_format="json",
               compaction={"interval": "5s", "jitter": "0s", "rewrite_options": {"min-input-files": "2"}})
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    stream.send(0)
    with (tmp_path / "compact.log").open("wb") as out:
        compactor = subprocess.Popen([*FLOE, "compact", "--config", str(path)], cwd=REPO, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
    rng = random.Random(33)
    runs = 0
    ingest = start_floe(path, tmp_path / "run-0.log")
    try:
        for version in range(len(VERSIONS)):
            if version:
                stream.send(version)
            if version in (1, 2, 4):
                log = tmp_path / f"run-{runs}.log"
                deadline = time.monotonic() + 180
                while not logged_change(log, version + 1):
                    assert ingest.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                    time.sleep(0.2)
                time.sleep(rng.random())
                assert kill_group(ingest), "the SIGKILL ended the run"
                runs += 1
                ingest = start_floe(path, tmp_path / f"run-{runs}.log")
            stream.wait_until_landed(tmp_path, lambda: ingest.poll() is None and compactor.poll() is None)
        deadline = time.monotonic() + 180
        while not compacted(tmp_path):  # the compactor has rewritten files of an evolved table
            assert compactor.poll() is None and time.monotonic() < deadline, "a compaction commit"
            time.sleep(0.5)
    finally:
        ingest.send_signal(signal.SIGTERM)
        ingest.wait(240)
        compactor.send_signal(signal.SIGTERM)
        code = compactor.wait(120)
        registry.close()
    assert code == 3, (tmp_path / "compact.log").read_text()[-3000:]
    assert runs == 3
    for kind, identifier in TABLES.items():
        check_table(tmp_path, kind, identifier, stream.expected[kind], iceberg_oracle)
    letters = consume_all(kafka_bootstrap, dead_letters, 4 * PER_VERSION)
    refused = {(dict(m.headers())[SOURCE_TOPIC], dict(m.headers())[SOURCE_OFFSET]) for m in letters}
    assert len(refused) == 4 * PER_VERSION, "every record of the refused version, at least once"
    assert all(b"refused: column 'qty'" in dict(m.headers())[ERROR_MESSAGE] for m in letters)


@pytest.mark.parametrize("query", ["per-table", "shared"])
def test_a_topic_created_while_ingest_runs_gets_its_table_from_the_template(
    spark, kafka_bootstrap, new_topic, tmp_path, query, caplog
):
    """A template entry over a pattern: a topic that appears mid-run, and matches, gets its table once its
    subject has a schema (a topic created before its first schema waits); the tables already running go on
    (``per-table``), or the shared query starts again with it, losing and doubling nothing."""
    caplog.set_level("INFO", logger="floe.ingest")
    prefix = f"tpl{uuid.uuid4().hex[:8]}"
    first = new_topic(f"{prefix}.a")
    registry = SchemaRegistry()
    url = registry.serve()
    producers = Producers(kafka_bootstrap, url)
    raw = {
        "kafka": {"bootstrap_servers": kafka_bootstrap, "reader": "python"},
        "catalog": {"uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(tmp_path / "warehouse")},
        "checkpoint_location": str(tmp_path / "checkpoints"),
        "trigger": {"processing_time": "1s"},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "ingest": {"query": query, "topic_refresh": "1s"},
        "tables": [{"identifier": "raw.{topic}", "topic_pattern": prefix + r"\..*",
                    "format": {"type": "confluent", "registry_url": url}}],
    }
    table_of = lambda topic: "raw." + topic.replace(".", "_").replace("-", "_")  # noqa: E731
    records = lambda start: [value(0, n, n) for n in range(start, start + PER_VERSION)]  # noqa: E731
    producers.send(first, 0, records(0), "append")
    stop, result = threading.Event(), {}
    thread = threading.Thread(target=lambda: result.update(code=run_ingest_service(
        parse_config(raw), stop=stop, registry=CollectorRegistry(), port=free_port(), spark=spark)))
    thread.start()
    try:
        wait_until_landed(tmp_path, table_of(first), first, PER_VERSION, thread.is_alive)
        early = new_topic(f"{prefix}.b")  # created before any schema: its table waits
        deadline = time.monotonic() + 60
        while "waits" not in caplog.text:
            assert thread.is_alive() and time.monotonic() < deadline, "the new topic's table should wait"
            time.sleep(0.2)
        producers.send(early, 0, records(100), "append")  # registers the subject, then writes
        producers.send(first, 0, records(200), "append")
        wait_until_landed(tmp_path, table_of(early), early, PER_VERSION, thread.is_alive)
        wait_until_landed(tmp_path, table_of(first), first, 2 * PER_VERSION, thread.is_alive)
    finally:
        stop.set()
        thread.join(180)
        registry.close()
    assert result == {"code": EXIT_STOPPED}
    for topic, ids in ((first, [*range(0, 40), *range(200, 240)]), (early, list(range(100, 140)))):
        with SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse")) as catalog:
            loaded = catalog.load_table(table_of(topic))
        rows = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()
        assert sorted(rows.column("id").to_pylist()) == ids, f"{topic}: every record once"
