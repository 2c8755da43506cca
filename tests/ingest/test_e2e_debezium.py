"""Debezium change events land through ``floe ingest``'s configuration (``op.envelope: true``).

The messages are shaped as Debezium's PostgreSQL connector documents them
(https://debezium.io/documentation/reference/stable/connectors/postgresql.html,
"Data change events"), written by Kafka Connect's JSON converter:

* ``schemas.enable=true`` wraps key and value as ``{"schema": ..., "payload": ...}``;
  ``schemas.enable=false`` writes the payload alone.
* The key is an object of the primary-key columns (``{"id": 1}``).
* The value's payload is the envelope: ``before``, ``after``, ``source``,
  ``transaction``, ``op`` (``r`` snapshot read, ``c``, ``u``, ``d``, ``t``
  truncate) and ``ts_ms``/``ts_us``/``ts_ns``.
* A delete has ``after: null``; its ``before`` holds the whole row (REPLICA
  IDENTITY FULL) or only the key columns (DEFAULT). With
  ``tombstones.on.delete=true`` (Debezium's default) a tombstone (same key,
  null value) follows it. A primary-key change is a delete of the old key (and
  its tombstone) then a create of the new one.
* A truncate has a null key and no row images.
* Column values use Debezium's default JSON mappings: ``int4`` as int32,
  ``date`` as ``io.debezium.time.Date`` (days since the epoch), ``timestamptz``
  as ``io.debezium.time.ZonedTimestamp`` (ISO-8601 text), and ``numeric`` as
  text (``decimal.handling.mode=string``).

The decode-level tests (tests/ingest/test_decode_records.py) use the same
fixtures; the end-to-end test here produces them to a real broker and runs the
ingest service from a configuration with the session's Spark.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from ingest.tasks.changes import OpField
from ingest.tasks.dead_letters import ERROR_CLASS, ERROR_FIELD, ERROR_MESSAGE, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from service.config import parse_config
from service.ingest_command import EXIT_OK, run_ingest_service
from service.jobs import build_jobs
from table.io import FileIO
from table.scan import TableScan
from table.schema import Schema
from table.types import DateType, DecimalType, IntegerType, NestedField, StringType, TimestamptzType
from tests.ingest.e2e_support import Event, consume_all, produce

# ----------------------------------------------------------------------------- the table

CUSTOMERS = Schema(
    NestedField(1, "id", IntegerType(), required=True),
    NestedField(2, "first_name", StringType(), required=True),
    NestedField(3, "last_name", StringType(), required=True),
    NestedField(4, "email", StringType()),
    NestedField(5, "balance", DecimalType(10, 2)),
    NestedField(6, "signup_date", DateType()),
    NestedField(7, "updated_at", TimestamptzType()),
    identifier_field_ids=[1],
)
"""``public.customers`` in Iceberg: the landed table."""

CUSTOMER_COLUMNS = [
    {"name": "id", "type": "int", "required": True},
    {"name": "first_name", "type": "string", "required": True},
    {"name": "last_name", "type": "string", "required": True},
    {"name": "email", "type": "string"},
    {"name": "balance", "type": "decimal(10,2)"},
    {"name": "signup_date", "type": "date"},
    {"name": "updated_at", "type": "timestamptz"},
]
"""The same table as ``tables[].schema`` of a configuration."""

T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.timezone.utc)


def customer(id: int, first: str, last: str, email: Optional[str], balance: str, signup: dt.date,
             minutes: int) -> dict[str, Any]:
    """A customers row as Debezium writes it in ``before``/``after`` (JSON column values)."""
    return {
        "id": id,
        "first_name": first,
        "last_name": last,
        "email": email,
        "balance": balance,
        "signup_date": (signup - dt.date(1970, 1, 1)).days,
        "updated_at": zoned(minutes),
    }


def zoned(minutes: int) -> str:
    """A ``timestamptz`` as ``io.debezium.time.ZonedTimestamp`` writes it."""
    return (T0 + dt.timedelta(minutes=minutes, microseconds=123456)).isoformat().replace("+00:00", "Z")


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """What a Debezium row image becomes in the table (Python values as pyarrow reads them)."""
    return {
        **row,
        "balance": None if row["balance"] is None else Decimal(row["balance"]),
        "signup_date": dt.date(1970, 1, 1) + dt.timedelta(days=row["signup_date"]),
        "updated_at": dt.datetime.fromisoformat(row["updated_at"].replace("Z", "+00:00")),
    }


# ----------------------------------------------------------------------------- the connector

_ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "first_name"},
    {"type": "string", "optional": False, "field": "last_name"},
    {"type": "string", "optional": True, "field": "email"},
    {"type": "string", "optional": True, "field": "balance"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "signup_date"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1,
     "field": "updated_at"},
]
_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "true,last,false,incremental"}, "default": "false", "field": "snapshot"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "int64", "optional": True, "field": "ts_us"},
    {"type": "int64", "optional": True, "field": "ts_ns"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
_TRANSACTION_FIELDS = [
    {"type": "string", "optional": False, "field": "id"},
    {"type": "int64", "optional": False, "field": "total_order"},
    {"type": "int64", "optional": False, "field": "data_collection_order"},
]


@dataclass
class Debezium:
    """Debezium's PostgreSQL connector (``topic.prefix=pg``) capturing ``public.customers``.

    ``schemas`` is the JSON converter's ``schemas.enable`` (for key and value),
    ``tombstones`` the connector's ``tombstones.on.delete``. Each method returns
    the Kafka records of one database change, in the order Debezium writes them.
    """

    schemas: bool
    tombstones: bool = True
    _lsn: int = field(default=24_023_128, init=False)

    def key_schema(self) -> dict[str, Any]:
        return {"type": "struct", "fields": [_ROW_FIELDS[0]], "optional": False, "name": "pg.public.customers.Key"}

    def value_schema(self) -> dict[str, Any]:
        row = {"type": "struct", "fields": _ROW_FIELDS, "optional": True, "name": "pg.public.customers.Value"}
        return {
            "type": "struct",
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                {"type": "struct", "fields": _SOURCE_FIELDS, "optional": False,
                 "name": "io.debezium.connector.postgresql.Source", "field": "source"},
                {"type": "struct", "fields": _TRANSACTION_FIELDS, "optional": True, "name": "event.block",
                 "version": 1, "field": "transaction"},
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
            ],
            "optional": False,
            "name": "pg.public.customers.Envelope",
            "version": 2,
        }

    # -- the changes

    def read(self, row: dict[str, Any], last: bool = False) -> list[Event]:
        """A row of the initial snapshot (``op: r``)."""
        return [self._event(row["id"], None, row, "r", snapshot="last" if last else "true")]

    def create(self, row: dict[str, Any]) -> list[Event]:
        return [self._event(row["id"], None, row, "c")]

    def update(self, before: dict[str, Any], after: dict[str, Any]) -> list[Event]:
        """An update under REPLICA IDENTITY FULL: both images complete."""
        return [self._event(after["id"], before, after, "u")]

    def delete(self, before: dict[str, Any]) -> list[Event]:
        """A delete (``after: null``), then its tombstone when ``tombstones.on.delete``."""
        events = [self._event(before["id"], before, None, "d")]
        return events + [Event(self._key(before["id"]), None)] if self.tombstones else events

    def change_key(self, before: dict[str, Any], after: dict[str, Any]) -> list[Event]:
        """An update of the primary key: a delete of the old key, then a create of the new one."""
        return self.delete(before) + self.create(after)

    def truncate(self) -> list[Event]:
        """``TRUNCATE public.customers``: a null key and no row images (``op: t``)."""
        payload = {"source": self._source("false"), "op": "t", **self._times()}
        return [Event(None, self._json(payload, self.value_schema()))]

    # -- the bytes

    def _event(self, id: int, before: Optional[dict[str, Any]], after: Optional[dict[str, Any]], op: str,
               snapshot: str = "false") -> Event:
        payload = {"before": before, "after": after, "source": self._source(snapshot), "transaction": None,
                   "op": op, **self._times()}
        return Event(self._key(id), self._json(payload, self.value_schema()))

    def _key(self, id: int) -> bytes:
        return self._json({"id": id}, self.key_schema())

    def _json(self, payload: dict[str, Any], schema: dict[str, Any]) -> bytes:
        document = {"schema": schema, "payload": payload} if self.schemas else payload
        return json.dumps(document, separators=(",", ":")).encode()  # the converter writes compact JSON

    def _source(self, snapshot: str) -> dict[str, Any]:
        self._lsn += 808
        ms = 1_714_557_600_000 + self._lsn // 1000
        sequence = json.dumps([str(self._lsn - 808), str(self._lsn)], separators=(",", ":"))
        return {"version": "2.7.3.Final", "connector": "postgresql", "name": "pg", "ts_ms": ms,
                "snapshot": snapshot, "db": "shop", "sequence": sequence, "ts_us": ms * 1000,
                "ts_ns": ms * 1_000_000, "schema": "public", "table": "customers",
                "txId": 500 + self._lsn % 97, "lsn": self._lsn, "xmin": None}

    def _times(self) -> dict[str, Any]:
        ms = 1_714_557_600_000 + self._lsn // 1000 + 41
        return {"ts_ms": ms, "ts_us": ms * 1000 + 514, "ts_ns": ms * 1_000_000 + 514_964}


ANNE = customer(1, "Anne", "Kretchmar", "annek@noanswer.org", "12.30", dt.date(2019, 3, 4), 0)
BOB = customer(2, "Bob", "Ross", "bob@example.org", "0.00", dt.date(2020, 1, 2), 1)
CARLA = customer(3, "Carla", "Diaz", None, "-7.05", dt.date(2021, 6, 30), 2)
DAN = customer(4, "Dan", "Wu", "dan@example.org", "99999999.99", dt.date(2024, 4, 30), 3)
ANNE_2 = {**ANNE, "first_name": "Anne Marie", "balance": "13.00", "updated_at": zoned(10)}
DAN_2 = {**DAN, "email": None, "updated_at": zoned(11)}
CARLA_30 = {**CARLA, "id": 30}
EVE = customer(5, "Eve", "Adams", "eve@example.org", "1.50", dt.date(2024, 5, 1), 12)


def customers_history(debezium: Debezium) -> list[Event]:
    """A snapshot of three rows, then creates, updates, deletes, a key change and a truncate, in Kafka order."""
    return [
        *debezium.read(ANNE),
        *debezium.read(BOB),
        *debezium.read(CARLA, last=True),
        *debezium.create(DAN),
        *debezium.update(ANNE, ANNE_2),
        *debezium.delete(BOB),
        *debezium.update(DAN, DAN_2),
        *debezium.change_key(CARLA, CARLA_30),  # UPDATE customers SET id = 30 WHERE id = 3
        *debezium.truncate(),  # dead-lettered: Floe never empties a table
        *debezium.create(EVE),
        *debezium.delete({"id": 5}),  # REPLICA IDENTITY DEFAULT: before holds only the key columns
    ]


FINAL_TABLE = {1: table_row(ANNE_2), 4: table_row(DAN_2), 30: table_row(CARLA_30)}
"""The table after :func:`customers_history`: updates applied, deletes gone, snapshot rows kept."""

TRUNCATE_ERROR = ("ChangeError", "op", """field 'op': unknown operation string "t"; expected one of c, r, u, d""")
"""How the truncate event is dead-lettered: class, field, message."""


# ----------------------------------------------------------------------------- the configuration


def debezium_config(tmp: Path, bootstrap: str, tables: dict[str, tuple[str, str]],
                    max_offsets_per_trigger: Optional[int] = None) -> dict[str, Any]:
    """A configuration landing Debezium topics: table name -> (topic, dead-letter topic)."""
    kafka: dict[str, Any] = {"bootstrap_servers": bootstrap}
    if max_offsets_per_trigger is not None:
        kafka["max_offsets_per_trigger"] = max_offsets_per_trigger
    return {
        "kafka": kafka,
        "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "warehouse")},
        "checkpoint_location": str(tmp / "checkpoints"),
        "trigger": {"available_now": True},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "tables": [
            {
                "identifier": f"cdc.{name}",
                "topics": [topic],
                "schema": CUSTOMER_COLUMNS,
                "key": ["id"],
                "mode": "upsert",
                "op": {"envelope": True},
                "bad_records": "dead-letter",
                "dead_letter_topic": dlq,
            }
            for name, (topic, dlq) in tables.items()
        ],
    }


def test_the_configuration_reaches_the_decoder(tmp_path: Path) -> None:
    config = parse_config(debezium_config(tmp_path, "broker:9092", {"customers": ("pg.public.customers", "dlq")}))
    [job] = build_jobs(config)
    decode = job.table.decode
    assert decode.op_field == OpField("op", ("c", "r"), ("u",), ("d",), envelope=True)
    assert (decode.mode, decode.key_fields) == ("upsert", ("id",))
    assert decode.table_schema() == CUSTOMERS


# ----------------------------------------------------------------------------- end to end


def table_rows(tmp: Path, identifier: str) -> dict[int, dict[str, Any]]:
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        loaded = catalog.load_table(identifier)
    rows = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow().to_pylist()
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == len(rows), f"duplicate ids in {identifier}"
    return by_id


@pytest.mark.kafka
@pytest.mark.spark
def test_debezium_topics_land_through_the_ingest_service(spark, kafka_bootstrap, new_topic, tmp_path):
    """Two connectors' topics, JSON converter schemas on (with tombstones) and off (without), one service run.

    Small micro-batches, so that deletes and updates also reach rows committed by earlier batches.
    """
    connectors = {"with_schemas": Debezium(schemas=True), "plain": Debezium(schemas=False, tombstones=False)}
    topics = {name: (new_topic(f"pg-{name}", partitions=2), new_topic(f"pg-{name}-dlq")) for name in connectors}
    produced = {name: produce(kafka_bootstrap, topics[name][0], customers_history(debezium))
                for name, debezium in connectors.items()}
    assert any(d.event.value and b'"schema":' in d.event.value for d in produced["with_schemas"])

    registry = CollectorRegistry()
    config = parse_config(debezium_config(tmp_path, kafka_bootstrap, topics, max_offsets_per_trigger=5))
    assert run_ingest_service(config, registry=registry, port=0, spark=spark) == EXIT_OK

    for name, (topic, dlq) in topics.items():
        identifier = f"cdc.{name}"
        assert table_rows(tmp_path, identifier) == FINAL_TABLE, identifier
        [letter] = consume_all(kafka_bootstrap, dlq, 1)
        headers = {k: None if v is None else v.decode() for k, v in letter.headers() or []}
        [truncate] = [d for d in produced[name] if d.event.key is None]
        source = (headers[SOURCE_TOPIC], headers[SOURCE_PARTITION], headers[SOURCE_OFFSET])
        assert source == (topic, str(truncate.partition), str(truncate.offset))
        assert (headers[ERROR_CLASS], headers[ERROR_FIELD], headers[ERROR_MESSAGE]) == TRUNCATE_ERROR
        assert (letter.key(), letter.value()) == (None, truncate.event.value), "the original record is kept"
        labels = {"table": identifier}
        assert registry.get_sample_value("floe_ingest_bad_records_total", {**labels, "reason": "ChangeError"}) == 1
        assert registry.get_sample_value("floe_ingest_records_read_total", labels) == len(produced[name])
        assert registry.get_sample_value("floe_ingest_batches_total", {**labels, "result": "committed"}) >= 3
