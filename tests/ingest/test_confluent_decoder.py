"""ingest.tasks.decoding.confluent_decoder: JSON Schema and Protobuf values, framed by confluent-kafka's own
serializers against the tests' schema registry, read back by Floe's decoder."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from ingest.tasks.decoding import ConfluentDecoder, ConfluentFormat, SchemaRegistryClient as FloeRegistryClient
from ingest.tasks.record_errors import DecodeError
from tests.support.protobuf_messages import message_classes
from tests.support.schema_registry import SchemaRegistry

CONTEXT = SerializationContext("orders", MessageField.VALUE)


@pytest.fixture()
def registry() -> Iterator[tuple[SchemaRegistry, str]]:
    server = SchemaRegistry()
    url = server.serve()
    yield server, url
    server.close()


def test_json_schema_values_read_back_as_written(registry: tuple[SchemaRegistry, str]) -> None:
    _, url = registry
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
              "required": ["id"]}
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": url}))
    payload = serialize({"id": 7, "at": "2026-11-29T10:00:00Z"}, CONTEXT)
    assert ConfluentDecoder(ConfluentFormat(registry_url=url)).decode(payload) == {"id": 7, "at": "2026-11-29T10:00:00Z"}


def test_protobuf_values_read_back_with_presence_enums_wrappers_and_timestamps(registry: tuple[SchemaRegistry, str]) -> None:
    server, url = registry
    classes = message_classes(
        {"Order": [("id", "int64"), ("qty", "int32"), ("note", "optional string"), ("color", "Color"),
                   ("ship", "Ship"), ("tags", "repeated string"), ("scores", "map<string, int64>"),
                   ("at", "google.protobuf.Timestamp"), ("zip", "google.protobuf.StringValue"),
                   ("email", "string"), ("phone", "string")],
         "Ship": [("city", "string")]},
        oneofs={"Order": {"contact": ["email", "phone"]}}, enums={"Color": ["RED", "GREEN"]})
    order, ship = classes["Order"], classes["Ship"]
    serialize = ProtobufSerializer(order, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})
    full = order(id=1, qty=2, note="n", color=1, ship=ship(city="c"), tags=["a", "b"], scores={"x": 3},
                 at=datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC), phone="555")
    full.zip.value = "z"
    decoder = ConfluentDecoder(ConfluentFormat(registry_url=url))
    assert decoder.decode(serialize(full, CONTEXT)) == {
        "id": 1, "qty": 2, "note": "n", "color": "GREEN", "ship": {"city": "c"}, "tags": ["a", "b"],
        "scores": {"x": 3}, "at": datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC), "zip": "z",
        "email": None, "phone": "555"}
    empty = decoder.decode(serialize(order(), CONTEXT))
    assert empty == {"id": 0, "qty": 0, "note": None, "color": "RED", "ship": None, "tags": [], "scores": {},
                     "at": None, "zip": None, "email": None, "phone": None}, "presence: None; none: the default"
    assert FloeRegistryClient(url).schema(1).kind == "PROTOBUF"


def test_a_protobuf_record_of_another_message_of_the_file_is_a_dead_letter(registry: tuple[SchemaRegistry, str]) -> None:
    _, url = registry
    classes = message_classes({"Order": [("id", "int64")], "Ship": [("city", "string")]})
    ship = classes["Ship"]
    payload = ProtobufSerializer(ship, SchemaRegistryClient({"url": url}), {"use.deprecated.format": False})(
        ship(city="c"), CONTEXT)
    with pytest.raises(DecodeError, match=r"a record of message \[1\] of its schema's file"):
        ConfluentDecoder(ConfluentFormat(registry_url=url)).decode(payload)
