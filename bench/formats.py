"""The benchmark's append events in the schema registry's formats: Avro and Protobuf, Confluent-framed.

The same rows as the JSON events (``bench/ingest.py``), serialized by confluent-kafka's own
``AvroSerializer`` and ``ProtobufSerializer`` against the tests' registry, so the three formats land the same
table and their rates compare.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.protobuf_messages import message_classes

AVRO = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"}, {"name": "customer", "type": "string"}, {"name": "amount", "type": "double"},
        {"name": "event_ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "status", "type": "string"}, {"name": "note", "type": "string"},
    ],
}
PROTO_FIELDS = [("id", "int64"), ("customer", "string"), ("amount", "double"),
                ("event_ts", "google.protobuf.Timestamp"), ("status", "string"), ("note", "string")]


def framed(events: list[tuple[bytes, bytes]], kind: str, registry_url: str, topic: str) -> list[tuple[bytes, bytes]]:
    """``events`` (JSON values) with each value Confluent-framed in ``kind`` (``avro`` or ``protobuf``)."""
    serialize = _serializer(kind, registry_url)
    context = SerializationContext(topic, MessageField.VALUE)
    out = []
    for key, value in events:
        row = json.loads(value)
        row["event_ts"] = datetime.fromisoformat(row["event_ts"])
        out.append((key, serialize(row, context)))
    return out


def _serializer(kind: str, registry_url: str) -> Callable[[dict[str, Any], SerializationContext], bytes]:
    client = SchemaRegistryClient({"url": registry_url})
    if kind == "avro":
        return AvroSerializer(client, json.dumps(AVRO))
    order = message_classes({"Order": PROTO_FIELDS}, package="bench")["Order"]
    serializer = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    return lambda row, context: serializer(order(**row), context)
