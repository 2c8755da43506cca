"""ingest.driver.writer_schemas: Avro writer schemas mapped to Iceberg columns, and folded into a table's schema."""

from __future__ import annotations

import pytest

from ingest.driver.table_diff import Kind, type_text
from ingest.driver.writer_schemas.avro_types import avro_struct
from ingest.driver.writer_schemas.unmappable import UnmappableSchema
from ingest.driver.writer_schemas.fold import WriterSchemaRefused, first_schema, fold

# One case per row of the mapping table in docs/schemas-from-the-stream.md.
MAPPING = [
    ("boolean", "boolean"),
    ("int", "int"),
    ("long", "long"),
    ("float", "float"),
    ("double", "double"),
    ("string", "string"),
    ("bytes", "binary"),
    ({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}, "string"),
    ({"type": "fixed", "name": "F4", "size": 4}, "fixed[4]"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, "decimal(9,2)"),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4}, "decimal(18,4)"),
    ({"type": "int", "logicalType": "date"}, "date"),
    ({"type": "int", "logicalType": "time-millis"}, "time"),
    ({"type": "long", "logicalType": "time-micros"}, "time"),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamptz"),
    ({"type": "long", "logicalType": "timestamp-micros"}, "timestamptz"),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp"),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp"),
    ({"type": "string", "logicalType": "uuid"}, "uuid"),
    ({"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}, "uuid"),
    ({"type": "string", "logicalType": "no-such-logical-type"}, "string"),
    ({"type": "array", "items": "long"}, "list<required long>"),
    ({"type": "array", "items": ["null", "long"]}, "list<long>"),
    ({"type": "map", "values": "double"}, "map<string, required double>"),
    (
        {"type": "record", "name": "Inner", "fields": [{"name": "a", "type": "int"}]},
        "struct<a: required int>",
    ),
]


def _record(field_type: object, name: str = "v") -> dict:
    return {"type": "record", "name": "Value", "namespace": "t", "fields": [{"name": name, "type": field_type}]}


@pytest.mark.parametrize(("avro", "iceberg"), MAPPING, ids=[m[1] + "-" + str(i) for i, m in enumerate(MAPPING)])
def test_each_avro_type_maps_to_its_iceberg_type(avro: object, iceberg: str) -> None:
    (field,) = avro_struct(_record(avro)).fields
    assert (field.required, type_text(field.field_type)) == (True, iceberg)
    (optional,) = avro_struct(_record(["null", avro])).fields
    assert (optional.required, type_text(optional.field_type)) == (False, iceberg)


def test_a_named_type_is_used_again_by_its_name_and_namespace() -> None:
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "home", "type": {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}},
            {"name": "work", "type": ["null", "shop.Address"]},
            {"name": "other", "type": "Address"},
        ],
    }
    struct = avro_struct(schema)
    assert [type_text(f.field_type) for f in struct.fields] == ["struct<city: required string>"] * 3
    assert [f.required for f in struct.fields] == [True, False, True]


@pytest.mark.parametrize(
    ("field_type", "message"),
    [
        (["null", "string", "long"], "field v: a union of string and long has no Iceberg type"),
        ("Nope", "field v: unknown Avro type 'Nope'"),
    ],
)
def test_what_iceberg_cannot_hold_is_refused_naming_the_field(field_type: object, message: str) -> None:
    with pytest.raises(UnmappableSchema, match=message):
        avro_struct(_record(field_type))


def test_a_record_that_contains_itself_is_refused() -> None:
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(UnmappableSchema, match="field next: record Node contains itself"):
        avro_struct(node)


def test_a_value_that_is_not_a_record_is_refused() -> None:
    with pytest.raises(UnmappableSchema, match="the value schema is long, not a record"):
        avro_struct("long")


V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "note", "type": "string"},
        {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}},
    ],
}


def _v(*edits: tuple[str, object]) -> dict:
    fields = {f["name"]: dict(f) for f in V1["fields"]}
    for name, field_type in edits:
        if field_type is None:
            fields.pop(name)
        else:
            fields[name] = {"name": name, "type": field_type}
    return {**V1, "fields": list(fields.values())}


SHIP2 = {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}]}


def test_the_first_schema_numbers_its_columns_as_at_creation_and_keys_them() -> None:
    first = first_schema(avro_struct(V1), ["id"], 1)
    schema = first.schema
    assert [(f.field_id, f.name) for f in schema.fields] == [(1, "id"), (2, "qty"), (3, "note"), (4, "ship")]
    assert schema.find_field("ship.city").field_id == 5
    assert schema.identifier_field_ids == [1] or tuple(schema.identifier_field_ids) == (1,)
    assert first.last_column_id == 5


def test_evolutions_keep_every_field_id_and_add_new_ones_after_the_last() -> None:
    first = first_schema(avro_struct(V1), ["id"], 1)
    v2 = _v(("qty", "long"), ("note", None), ("ship", SHIP2), ("extra", ["null", "string"]))
    folded = fold(first.schema, first.last_column_id, avro_struct(v2), 2)
    schema = folded.schema
    assert {f.name: f.field_id for f in schema.fields} == {"id": 1, "qty": 2, "note": 3, "ship": 4, "extra": 7}
    assert schema.find_field("ship.zip").field_id == 6
    assert type_text(schema.find_type("qty")) == "long"
    assert not schema.find_field("note").required  # dropped by the writer: kept, optional, written as null
    assert not schema.find_field("ship.zip").required  # added: optional, rows before have none
    assert sorted(c.kind.value for c in folded.changes) == ["add column", "add column", "make optional", "widen type"]
    assert "widen column qty from int to long" in folded.summary()


def test_a_narrower_or_an_older_writer_changes_nothing() -> None:
    first = first_schema(avro_struct(V1), ["id"], 1)
    wide = fold(first.schema, first.last_column_id, avro_struct(_v(("qty", "long"))), 2)
    narrow = fold(wide.schema, wide.last_column_id, avro_struct(V1), 1)
    assert narrow.changes == () and narrow.schema is wide.schema


def test_folding_in_either_order_takes_every_writer() -> None:
    v2 = avro_struct(_v(("qty", "long"), ("note", ["null", "string"]), ("ship", SHIP2)))
    v1 = avro_struct(V1)
    a = first_schema(v1, ["id"], 1)
    a = fold(a.schema, a.last_column_id, v2, 2)
    b = first_schema(v2, ["id"], 2)
    b = fold(b.schema, b.last_column_id, v1, 1)
    shape = lambda s: sorted((n, s.find_field(n).required, type_text(s.find_type(n))) for n in ("qty", "note", "ship.zip", "ship.city"))
    assert shape(a.schema) == shape(b.schema)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("qty", "string"), "writer schema id 9 refused: column 'qty' is int in the table and string in the writer schema"),
        (("id", None), "column 'id' is the key in the table and absent in the writer schema"),
        (("id", ["null", "long"]), "column 'id' is required \\(a key\\) in the table and optional"),
        (("ship", "string"), "column 'ship' is struct<city: required string> in the table and string"),
    ],
)
def test_a_change_iceberg_does_not_allow_refuses_the_writer_schema(edit: tuple[str, object], message: str) -> None:
    first = first_schema(avro_struct(V1), ["id"], 1)
    with pytest.raises(WriterSchemaRefused, match=message) as refused:
        fold(first.schema, first.last_column_id, avro_struct(_v(edit)), 9)
    assert refused.value.schema_id == 9


def test_a_key_that_is_optional_in_the_first_writer_is_refused() -> None:
    with pytest.raises(WriterSchemaRefused, match="column 'id' is the key in the table and optional"):
        first_schema(avro_struct(_v(("id", ["null", "long"]))), ["id"], 3)


# ---------------------------------------------------------------------------
# JSON Schema: one case per row of its mapping table
# ---------------------------------------------------------------------------

from ingest.driver.writer_schemas.json_schema_types import json_schema_struct  # noqa: E402

JSON_MAPPING = [
    ({"type": "boolean"}, "boolean"),
    ({"type": "integer"}, "long"),
    ({"type": "number"}, "double"),
    ({"type": "string"}, "string"),
    ({"type": "string", "format": "email"}, "string"),
    ({"type": "string", "format": "date-time"}, "timestamptz"),
    ({"type": "string", "format": "date"}, "date"),
    ({"type": "string", "format": "time"}, "time"),
    ({"type": "string", "format": "uuid"}, "uuid"),
    ({"type": "integer", "connect.type": "int8"}, "int"),
    ({"type": "integer", "connect.type": "int16"}, "int"),
    ({"type": "integer", "connect.type": "int32"}, "int"),
    ({"type": "integer", "connect.type": "int64"}, "long"),
    ({"type": "number", "connect.type": "float32"}, "float"),
    ({"type": "number", "connect.type": "float64"}, "double"),
    ({"type": "string", "connect.type": "bytes"}, "binary"),
    ({"enum": ["a", "b"]}, "string"),
    ({"type": "array", "items": {"type": "integer"}}, "list<required long>"),
    ({"type": "array", "items": {"type": ["integer", "null"]}}, "list<long>"),
    ({"type": "object", "additionalProperties": {"type": "number"}}, "map<string, required double>"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, "struct<a: required long>"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, "struct<a: long>"),
    ({"$ref": "#/definitions/Inner"}, "struct<x: string>"),
]


def _object(prop: object) -> dict:
    return {"type": "object", "properties": {"v": prop}, "required": ["v"],
            "definitions": {"Inner": {"type": "object", "properties": {"x": {"type": "string"}}}}}


@pytest.mark.parametrize(("prop", "iceberg"), JSON_MAPPING, ids=[m[1] + "-" + str(i) for i, m in enumerate(JSON_MAPPING)])
def test_each_json_schema_type_maps_to_its_iceberg_type(prop: dict, iceberg: str) -> None:
    (field,) = json_schema_struct(_object(prop)).fields
    assert (field.required, type_text(field.field_type)) == (True, iceberg)
    for nullable in ({"oneOf": [{"type": "null"}, prop]}, {"anyOf": [prop, {"type": "null"}]}):
        (optional,) = json_schema_struct(_object(nullable)).fields
        assert (optional.required, type_text(optional.field_type)) == (False, iceberg)


def test_a_json_property_not_listed_as_required_or_allowing_null_is_optional() -> None:
    schema = {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": "integer"}, "b": {"type": ["null", "string"]}, "c": {"type": "string"}}}
    assert [(f.name, f.required) for f in json_schema_struct(schema).fields] == [("a", True), ("b", False), ("c", False)]


@pytest.mark.parametrize(
    ("prop", "message"),
    [
        ({"type": ["string", "integer"]}, "field v: a value of types string or integer has no Iceberg type"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "field v: oneOf of 2 schemas has no Iceberg type"),
        ({"type": "object"}, "field v: an object with neither properties nor a schema for its values"),
        ({"type": "array"}, "field v: an array without items"),
        ({"$ref": "other.json#/X"}, "field v: \\$ref other.json#/X points outside the schema"),
        ({}, "field v: a schema that allows any value has no Iceberg type"),
    ],
)
def test_json_schema_that_iceberg_cannot_hold_is_refused_naming_the_field(prop: object, message: str) -> None:
    with pytest.raises(UnmappableSchema, match=message):
        json_schema_struct(_object(prop))


def test_a_json_schema_that_refers_to_itself_is_refused() -> None:
    schema = {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}},
              "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}}
    with pytest.raises(UnmappableSchema, match="contains itself"):
        json_schema_struct(schema)


# ---------------------------------------------------------------------------
# Protobuf: one case per row of its mapping table
# ---------------------------------------------------------------------------

import base64  # noqa: E402

from ingest.driver.writer_schemas.protobuf_types import protobuf_struct  # noqa: E402
from tests.support.protobuf_messages import message_classes  # noqa: E402

PROTO_MAPPING = [
    ("double", "double", True), ("float", "float", True), ("bool", "boolean", True), ("string", "string", True),
    ("bytes", "binary", True), ("int32", "int", True), ("sint32", "int", True), ("sfixed32", "int", True),
    ("int64", "long", True), ("sint64", "long", True), ("sfixed64", "long", True), ("uint32", "long", True),
    ("fixed32", "long", True), ("uint64", "long", True), ("fixed64", "long", True), ("Color", "string", True),
    ("optional int64", "long", False), ("Inner", "struct<x: required string>", False),
    ("repeated int64", "list<required long>", True), ("map<string, int64>", "map<string, required long>", True),
    ("google.protobuf.Timestamp", "timestamptz", False), ("google.protobuf.Int64Value", "long", False),
    ("google.protobuf.Int32Value", "int", False), ("google.protobuf.UInt32Value", "long", False),
    ("google.protobuf.UInt64Value", "long", False), ("google.protobuf.DoubleValue", "double", False),
    ("google.protobuf.FloatValue", "float", False), ("google.protobuf.BoolValue", "boolean", False),
    ("google.protobuf.StringValue", "string", False), ("google.protobuf.BytesValue", "binary", False),
]


def _serialized(cls: type) -> str:
    return base64.b64encode(cls.DESCRIPTOR.file.serialized_pb).decode()


@pytest.mark.parametrize(("proto", "iceberg", "required"), PROTO_MAPPING,
                         ids=[f"{m[0]}-{i}" for i, m in enumerate(PROTO_MAPPING)])
def test_each_protobuf_type_maps_to_its_iceberg_type(proto: str, iceberg: str, required: bool) -> None:
    classes = message_classes({"Value": [("v", proto)], "Inner": [("x", "string")]}, enums={"Color": ["RED", "GREEN"]})
    (field,) = protobuf_struct(_serialized(classes["Value"])).fields
    assert (field.required, type_text(field.field_type)) == (required, iceberg)


def test_a_oneof_is_its_members_each_optional_and_the_table_is_the_first_message() -> None:
    classes = message_classes({"Order": [("id", "int64"), ("email", "string"), ("phone", "string")], "Other": []},
                              oneofs={"Order": {"contact": ["email", "phone"]}})
    struct = protobuf_struct(_serialized(classes["Order"]))
    assert [(f.name, f.required) for f in struct.fields] == [("id", True), ("email", False), ("phone", False)]


def test_a_message_that_contains_itself_is_refused() -> None:
    classes = message_classes({"Node": [("next", "Node")]})
    with pytest.raises(UnmappableSchema, match="field next: message shop.Node contains itself"):
        protobuf_struct(_serialized(classes["Node"]))


def test_a_schema_given_as_proto_text_is_refused_as_not_a_serialized_descriptor() -> None:
    text = _serialized(message_classes({"V": [("v", "string")]})["V"])
    with pytest.raises(UnmappableSchema, match="not a serialized Protobuf file descriptor"):
        protobuf_struct("syntax = 'proto3'; message V { string v = 1; }")
    assert protobuf_struct(text).fields[0].name == "v"
