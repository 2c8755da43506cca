"""The mapping of each writer schema format, read back by Iceberg Java: one column per row of the mapping
tables in docs/schemas-from-the-stream.md (but ``time``, which Iceberg's Spark reader refuses).

Each format's producer is confluent-kafka's own serializer against the tests' registry; Floe maps the
registered schema to columns (``writer_struct``), decodes the framed record into them (``decode_records``),
and the table written with those columns is read by Iceberg Java. Java must read every value as written.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any, Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from ingest.driver.writer_schemas.fold import first_schema
from ingest.driver.writer_schemas.subject import writer_struct
from ingest.tasks.decode_records import INTERNAL_FIELDS, DecodeSpec, decode_records
from ingest.tasks.decoding import ConfluentFormat, SchemaRegistryClient as FloeClient
from tests.ingest.test_avro_decoder import kafka_batch
from tests.support.protobuf_messages import message_classes
from tests.support.rows import normalize
from tests.support.schema_registry import SchemaRegistry
from tests.support.table_builder import HandWrittenTable

pytestmark = [pytest.mark.oracle]
CONTEXT = SerializationContext("types", MessageField.VALUE)
AT = dt.datetime(2026, 11, 29, 10, 11, 12, 345000, tzinfo=dt.timezone.utc)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


@pytest.fixture()
def registry() -> Iterator[str]:
    server = SchemaRegistry()
    yield server.serve()
    server.close()


def _avro() -> tuple[dict, dict, dict]:
    """Writer schema, the record, and the row Java should read."""
    fields = [
        ("id", "long", 1, 1), ("b", "boolean", True, True), ("i", "int", -7, -7), ("f", "float", 1.5, 1.5),
        ("d", "double", 2.25, 2.25), ("s", "string", "text", "text"), ("bin", "bytes", b"\x00\x01", b"\x00\x01"),
        ("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B", "B"),
        ("fx", {"type": "fixed", "name": "F3", "size": 3}, b"abc", b"abc"),
        ("dec", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, Decimal("12.34"),
         Decimal("12.34")),
        ("day", {"type": "int", "logicalType": "date"}, dt.date(2026, 11, 29), dt.date(2026, 11, 29)),
        ("tsm", {"type": "long", "logicalType": "timestamp-millis"}, AT, AT),
        ("tsu", {"type": "long", "logicalType": "timestamp-micros"}, AT, AT),
        ("lts", {"type": "long", "logicalType": "local-timestamp-micros"}, AT.replace(tzinfo=None),
         AT.replace(tzinfo=None)),
        ("u", {"type": "string", "logicalType": "uuid"}, ID, str(ID)),
        ("arr", {"type": "array", "items": "long"}, [1, 2], [1, 2]),
        ("m", {"type": "map", "values": "double"}, {"k": 1.0}, {"k": 1.0}),
        ("rec", {"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]}, {"x": 3}, {"x": 3}),
        ("opt", ["null", "string"], None, None),
    ]
    schema = {"type": "record", "name": "Types", "fields": [{"name": n, "type": t} for n, t, _, _ in fields]}
    return schema, {n: v for n, _, v, _ in fields}, {n: e for n, _, _, e in fields}


def _json() -> tuple[dict, dict, dict]:
    props = {
        "id": ({"type": "integer"}, 1), "b": ({"type": "boolean"}, True), "n": ({"type": "number"}, 2.5),
        "s": ({"type": "string", "format": "email"}, "a@b.c"),
        "ts": ({"type": "string", "format": "date-time"}, "2026-11-29T10:11:12.345Z"),
        "day": ({"type": "string", "format": "date"}, "2026-11-29"),
        "u": ({"type": "string", "format": "uuid"}, str(ID)),
        "i32": ({"type": "integer", "connect.type": "int32"}, -5), "f32": ({"type": "number", "connect.type": "float32"}, 0.5),
        "e": ({"enum": ["A", "B"]}, "A"), "arr": ({"type": "array", "items": {"type": "integer"}}, [3, 4]),
        "m": ({"type": "object", "additionalProperties": {"type": "number"}}, {"k": 2.0}),
        "rec": ({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}, {"x": 9}),
        "opt": ({"oneOf": [{"type": "null"}, {"type": "string"}]}, None),
    }
    schema = {"type": "object", "properties": {n: p for n, (p, _) in props.items()}, "required": list(props)}
    record = {n: v for n, (_, v) in props.items()}
    expected = {**record, "ts": AT, "day": dt.date(2026, 11, 29)}
    return schema, record, expected


def _protobuf() -> tuple[Any, Any, dict]:
    classes = message_classes(
        {"Types": [("id", "int64"), ("d", "double"), ("f", "float"), ("b", "bool"), ("s", "string"), ("bin", "bytes"),
                   ("i32", "int32"), ("si", "sint32"), ("sf", "sfixed32"), ("s64", "sint64"), ("f64", "sfixed64"),
                   ("u32", "uint32"), ("fx32", "fixed32"), ("u64", "uint64"), ("fx64", "fixed64"), ("e", "E"),
                   ("opt", "optional int64"), ("inner", "Inner"), ("rep", "repeated int64"),
                   ("m", "map<string, int64>"), ("ts", "google.protobuf.Timestamp"),
                   ("w64", "google.protobuf.Int64Value"), ("ws", "google.protobuf.StringValue")],
         "Inner": [("x", "string")]}, enums={"E": ["RED", "GREEN"]})
    message = classes["Types"](id=1, d=2.5, f=0.5, b=True, s="t", bin=b"\x02", i32=-3, si=-4, sf=-5, s64=-6, f64=-7,
                               u32=8, fx32=9, u64=10, fx64=11, e=1, inner=classes["Inner"](x="in"), rep=[1, 2],
                               m={"k": 5}, ts=AT)
    message.w64.value = 12
    expected = {"id": 1, "d": 2.5, "f": 0.5, "b": True, "s": "t", "bin": b"\x02", "i32": -3, "si": -4, "sf": -5,
                "s64": -6, "f64": -7, "u32": 8, "fx32": 9, "u64": 10, "fx64": 11, "e": "GREEN", "opt": None,
                "inner": {"x": "in"}, "rep": [1, 2], "m": {"k": 5}, "ts": AT, "w64": 12, "ws": None}
    return classes["Types"], message, expected


def _payload(kind: str, url: str) -> tuple[bytes, dict]:
    client = SchemaRegistryClient({"url": url})
    if kind == "avro":
        schema, record, expected = _avro()
        return AvroSerializer(client, json.dumps(schema))(record, CONTEXT), expected
    if kind == "json":
        schema, record, expected = _json()
        return JSONSerializer(json.dumps(schema), client)(record, CONTEXT), expected
    cls, message, expected = _protobuf()
    return ProtobufSerializer(cls, client, {"use.deprecated.format": False})(message, CONTEXT), expected


@pytest.mark.parametrize("kind", ["avro", "json", "protobuf"])
def test_every_mapped_type_lands_as_iceberg_java_reads_it(kind: str, registry: str, iceberg_oracle, tmp_path) -> None:
    payload, expected = _payload(kind, registry)
    schema = first_schema(writer_struct(FloeClient(registry).schema(1)), ["id"], 1).schema
    decoded = decode_records(kafka_batch([payload]), DecodeSpec(schema, format=ConfluentFormat(registry_url=registry)))
    assert decoded.rows.num_rows == 1, "the record decodes and maps to the columns its schema gave"
    table = HandWrittenTable.create(str(tmp_path / "t"), schema)
    table.commit(table.write_data(decoded.rows.drop_columns([f.name for f in INTERNAL_FIELDS])))
    java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=table.metadata_location).to_pylist()
    assert normalize(java, schema) == normalize([expected], schema)
