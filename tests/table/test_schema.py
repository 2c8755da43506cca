"""Tests for table.schema: lookup, projection, JSON and fresh ids."""

from __future__ import annotations

import itertools
import json
import string
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.errors import SchemaError
from table.schema import (
    DELETE_FILE_PATH,
    DELETE_FILE_POS,
    MAX_FIELD_ID,
    Schema,
    SchemaJsonError,
    assign_fresh_ids,
    schema_from_json,
)
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from tests.table.helpers import nested_schema


# --------------------------------------------------------------------------
# lookup
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "field_id"),
    [
        ("id", 1),
        ("location", 2),
        ("location.zone", 3),
        ("points.element", 6),
        ("points.element.x", 7),
        ("points.x", 7),  # short name skips "element" of a struct element
        ("props.key", 10),
        ("props.value", 11),
        ("props.value.v", 12),
        ("props.v", 12),
        ("tags.element", 14),
    ],
)
def test_find_field_by_dotted_name(name: str, field_id: int) -> None:
    assert nested_schema().find_field(name).field_id == field_id


def test_find_column_name_is_canonical() -> None:
    schema = nested_schema()
    assert schema.find_column_name(7) == "points.element.x"
    assert schema.find_column_name(12) == "props.value.v"
    assert schema.find_column_name(14) == "tags.element"


def test_find_field_by_id_includes_element_key_value() -> None:
    schema = nested_schema()
    assert schema.find_field(14) == NestedField(14, "element", IntegerType(), required=False)
    assert schema.find_field(10) == NestedField(10, "key", StringType(), required=True)
    assert schema.find_type(3) == StringType()
    assert schema.find_type("props.value") == StructType(NestedField(12, "v", StringType()))


def test_find_field_case_insensitive() -> None:
    schema = nested_schema()
    assert schema.find_field("LOCATION.lon", case_sensitive=False).field_id == 4
    with pytest.raises(SchemaError, match="LOCATION.lon"):
        schema.find_field("LOCATION.lon")


def test_case_insensitive_lookup_rejects_ambiguous_names() -> None:
    schema = Schema(NestedField(1, "a", IntegerType()), NestedField(2, "A", IntegerType()))
    assert schema.find_field("A").field_id == 2
    with pytest.raises(SchemaError, match="ambiguous"):
        schema.find_field("a", case_sensitive=False)


def test_missing_fields_raise_schema_error_naming_them() -> None:
    schema = nested_schema()
    with pytest.raises(SchemaError, match="'nope'"):
        schema.find_field("nope")
    with pytest.raises(SchemaError, match="id 99"):
        schema.find_field(99)
    with pytest.raises(SchemaError, match="id 99"):
        schema.find_column_name(99)


def test_ids_and_attributes() -> None:
    schema = nested_schema()
    assert schema.highest_field_id == 14
    assert schema.field_ids == frozenset(range(1, 15))
    assert [f.name for f in schema.fields] == ["id", "location", "points", "props", "tags"]
    assert schema.as_struct().fields == schema.fields
    assert schema.identifier_field_names() == {"id"}
    assert schema.parent_id(7) == 6 and schema.parent_id(6) == 5 and schema.parent_id(1) is None
    assert Schema().highest_field_id == 0


def test_duplicate_ids_are_rejected_with_both_names() -> None:
    with pytest.raises(SchemaError, match="id 2 is used by both 'a.b' and 'c'"):
        Schema(
            NestedField(1, "a", StructType(NestedField(2, "b", IntegerType()))),
            NestedField(2, "c", IntegerType()),
        )


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(SchemaError, match="'a'"):
        Schema(NestedField(1, "a", IntegerType()), NestedField(2, "a", LongType()))


def test_reserved_ids_and_delete_columns() -> None:
    assert MAX_FIELD_ID == 2147483647 - 200
    assert (DELETE_FILE_PATH.field_id, DELETE_FILE_PATH.name) == (2147483546, "file_path")
    assert (DELETE_FILE_POS.field_id, DELETE_FILE_POS.name) == (2147483545, "pos")
    assert DELETE_FILE_POS.field_type == LongType() and DELETE_FILE_POS.required


# --------------------------------------------------------------------------
# identifier fields
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "identifier", "reason"),
    [
        ([NestedField(1, "a", IntegerType())], 1, "must be required"),
        ([NestedField(1, "a", DoubleType(), required=True)], 1, "must not be of type double"),
        ([NestedField(1, "a", FloatType(), required=True)], 1, "must not be of type float"),
        ([NestedField(1, "a", StructType(NestedField(2, "b", IntegerType(), True)), True)], 1, "primitive"),
        ([NestedField(1, "a", StructType(NestedField(2, "b", IntegerType(), True)))], 2, "optional field 'a'"),
        ([NestedField(1, "a", ListType(2, IntegerType()), True)], 2, "nested in 'a'"),
        ([NestedField(1, "m", MapType(2, StringType(), 3, IntegerType()), True)], 2, "nested in 'm'"),
        ([NestedField(1, "a", IntegerType(), True)], 5, "not in the schema"),
    ],
)
def test_invalid_identifier_fields(fields: list[NestedField], identifier: int, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        Schema(*fields, identifier_field_ids=[identifier])


def test_identifier_may_be_nested_in_required_structs() -> None:
    schema = nested_schema()
    nested = Schema(*schema.fields, identifier_field_ids=[1, 3])
    assert nested.identifier_field_names() == {"id", "location.zone"}


# --------------------------------------------------------------------------
# projection
# --------------------------------------------------------------------------


def test_project_by_ids_follows_spec_example() -> None:
    file_schema = Schema(
        NestedField(1, "a", IntegerType()), NestedField(2, "b", StringType()), NestedField(3, "c", DoubleType())
    )
    projected = file_schema.project([3, 2, 4])
    assert projected.fields == (NestedField(2, "b", StringType()), NestedField(3, "c", DoubleType()))


def test_project_keeps_parents_of_nested_selections() -> None:
    projected = nested_schema().project([7, 12])
    assert projected.fields == (
        NestedField(5, "points", ListType(6, StructType(NestedField(7, "x", LongType(), required=True)))),
        NestedField(9, "props", MapType(10, StringType(), 11, StructType(NestedField(12, "v", StringType())))),
    )
    assert projected.identifier_field_ids == ()


def test_project_whole_struct_when_no_child_selected() -> None:
    schema = nested_schema()
    projected = schema.project([2, 1])
    assert projected.fields == schema.fields[:2]
    assert projected.identifier_field_ids == (1,)
    assert projected.schema_id == schema.schema_id


def test_project_map_key_keeps_whole_map() -> None:
    schema = nested_schema()
    assert schema.project([10]).fields == (schema.find_field(9),)


def test_select_by_names_returns_full_types() -> None:
    schema = nested_schema()
    assert schema.select("location", "location.zone").fields == (schema.find_field(2),)
    assert schema.select("points.x").find_type("points") == ListType(
        6, StructType(NestedField(7, "x", LongType(), required=True))
    )
    assert schema.select("ID", case_sensitive=False).fields == (schema.find_field(1),)
    with pytest.raises(SchemaError, match="'missing'"):
        schema.select("missing")


# --------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------


def test_json_matches_appendix_c_shapes() -> None:
    schema = Schema(
        NestedField(1, "id", UUIDType(), required=True, doc="row id"),
        NestedField(2, "data", ListType(3, StringType(), element_required=True)),
        NestedField(6, "m", MapType(4, StringType(), 5, DoubleType(), value_required=False), required=True),
        schema_id=7,
        identifier_field_ids=[1],
    )
    assert schema.to_json() == {
        "type": "struct",
        "schema-id": 7,
        "identifier-field-ids": [1],
        "fields": [
            {"id": 1, "name": "id", "required": True, "type": "uuid", "doc": "row id"},
            {
                "id": 2,
                "name": "data",
                "required": False,
                "type": {"type": "list", "element-id": 3, "element": "string", "element-required": True},
            },
            {
                "id": 6,
                "name": "m",
                "required": True,
                "type": {
                    "type": "map",
                    "key-id": 4,
                    "key": "string",
                    "value-id": 5,
                    "value": "double",
                    "value-required": False,
                },
            },
        ],
    }
    assert schema_from_json(schema.to_json()) == schema


def test_defaults_use_single_value_json() -> None:
    spec_example = {
        "type": "struct",
        "schema-id": 0,
        "fields": [
            {
                "id": 1,
                "name": "id",
                "required": True,
                "type": "uuid",
                "initial-default": "0db3e2a8-9d1d-42b9-aa7b-74ebe558dceb",
                "write-default": "ec5911be-b0a7-458c-8438-c9a3e53cffae",
            },
            {"id": 2, "name": "price", "required": False, "type": "decimal(9, 2)", "write-default": "14.20"},
        ],
    }
    schema = schema_from_json(spec_example)
    field = schema.find_field("id")
    assert field.initial_default == uuid.UUID("0db3e2a8-9d1d-42b9-aa7b-74ebe558dceb")
    assert field.write_default == uuid.UUID("ec5911be-b0a7-458c-8438-c9a3e53cffae")
    assert schema.find_field("price").write_default == Decimal("14.20")
    assert schema.find_field("price").initial_default is None
    written = schema.to_json()
    assert written["fields"][0]["initial-default"] == "0db3e2a8-9d1d-42b9-aa7b-74ebe558dceb"
    assert written["fields"][1] == {
        "id": 2, "name": "price", "required": False, "type": "decimal(9,2)", "write-default": "14.20"
    }


@pytest.mark.parametrize(
    ("obj", "field", "reason"),
    [
        ({"fields": [{"id": 1, "name": "ts", "required": True, "type": "varchar"}]}, "fields[0].type", "'ts'"),
        ({"fields": [{"id": 1, "name": "a", "required": True}]}, "fields[0].type", "missing"),
        ({"fields": [{"id": "1", "name": "a", "required": True, "type": "int"}]}, "fields[0].id", "integer"),
        ({"fields": [{"id": 1, "name": "a", "required": 1, "type": "int"}]}, "fields[0].required", "boolean"),
        ({"fields": [{"id": True, "name": "a", "required": True, "type": "int"}]}, "fields[0].id", "integer"),
        (
            {"fields": [{"id": 1, "name": "l", "required": True, "type": {"type": "list", "element-id": 2}}]},
            "fields[0].type.element",
            "missing",
        ),
        (
            {"fields": [{"id": 1, "name": "s", "required": True, "type": {"type": "set"}}]},
            "fields[0].type.type",
            "'set'",
        ),
        (
            {
                "fields": [
                    {
                        "id": 1,
                        "name": "s",
                        "required": True,
                        "type": {"type": "struct", "fields": [{"id": 2, "name": "x", "required": True, "type": "u8"}]},
                    }
                ]
            },
            "fields[0].type.fields[0].type",
            "'x'",
        ),
        ({"fields": [{"id": 1, "name": "d", "required": False, "type": "date", "write-default": "x"}]},
         "fields[0].write-default", "date"),
        ({"fields": "no"}, "fields", "list"),
        ({"type": "list", "fields": []}, "type", "struct"),
        ({"fields": [], "identifier-field-ids": ["a"]}, "identifier-field-ids[0]", "integer"),
        ({"fields": [{"id": 1, "name": "a", "required": False, "type": "int"}], "identifier-field-ids": [1]},
         "fields", "required"),
    ],
)
def test_bad_json_names_the_field(obj: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(SchemaJsonError, match=reason) as info:
        schema_from_json(obj)
    assert info.value.field == field
    assert isinstance(info.value, SchemaError)


def test_unknown_type_message_names_column_and_type() -> None:
    obj = {"fields": [{"id": 1, "name": "ts", "required": True, "type": "varchar"}]}
    with pytest.raises(SchemaError, match=r"unknown type 'varchar'.*'ts'"):
        schema_from_json(obj)


# --------------------------------------------------------------------------
# hypothesis: generated schemas
# --------------------------------------------------------------------------

PRIMITIVES: list[IcebergType] = [
    BooleanType(), IntegerType(), LongType(), FloatType(), DoubleType(), DateType(), TimeType(),
    TimestampType(), TimestamptzType(), StringType(), UUIDType(), BinaryType(), FixedType(7), DecimalType(12, 3),
]
NAMES = st.text(alphabet=string.ascii_letters + "_", min_size=1, max_size=6)


@st.composite
def schemas(draw: st.DrawFn, max_depth: int = 3) -> Schema:
    """Random schemas with unique, gappy ids (so fresh-id tests see real renumbering)."""
    last = [draw(st.integers(0, 50))]

    def next_id() -> int:
        last[0] += draw(st.integers(1, 3))
        return last[0]

    def any_type(depth: int) -> IcebergType:
        kinds = ["primitive"] * 3 + (["struct", "list", "map"] if depth > 0 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "primitive":
            return draw(st.sampled_from(PRIMITIVES))
        if kind == "struct":
            return StructType(*struct_fields(depth - 1))
        if kind == "list":
            element_id = next_id()
            return ListType(element_id, any_type(depth - 1), draw(st.booleans()))
        key_id, value_id = next_id(), next_id()
        return MapType(key_id, any_type(depth - 1), value_id, any_type(depth - 1), draw(st.booleans()))

    def struct_fields(depth: int) -> list[NestedField]:
        names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
        docs = st.none() | st.text(max_size=5)
        return [NestedField(next_id(), n, any_type(depth), draw(st.booleans()), draw(docs)) for n in names]

    fields = struct_fields(max_depth)
    candidates = [f.field_id for f in fields if f.required and f.field_type in PRIMITIVES[:3] + PRIMITIVES[5:]]
    identifiers = draw(st.lists(st.sampled_from(candidates), unique=True)) if candidates else []
    return Schema(*fields, schema_id=draw(st.integers(0, 10)), identifier_field_ids=identifiers)


@given(schemas())
def test_json_round_trip(schema: Schema) -> None:
    text = json.dumps(schema.to_json())
    assert schema_from_json(json.loads(text)) == schema


@given(schemas())
def test_every_field_is_found_by_its_canonical_name(schema: Schema) -> None:
    for field_id in schema.field_ids:
        assert schema.find_field(schema.find_column_name(field_id)).field_id == field_id


@settings(deadline=None)  # the first example imports pyiceberg
@given(schemas())
def test_json_agrees_with_pyiceberg(schema: Schema) -> None:
    from pyiceberg.schema import Schema as PySchema

    ours = schema.to_json()
    theirs = PySchema.model_validate_json(json.dumps(ours))
    assert theirs.highest_field_id == schema.highest_field_id
    assert schema_from_json(json.loads(theirs.model_dump_json())) == schema


@given(schemas(), st.data())
def test_project_keeps_exactly_selected_and_ancestors(schema: Schema, data: st.DataObject) -> None:
    ids = sorted(schema.field_ids)
    selected = data.draw(st.sets(st.sampled_from(ids)) if ids else st.just(set()))
    projected = schema.project(selected)
    assert selected <= projected.field_ids
    for field_id in projected.field_ids:
        # a projected field is selected, under a selected field, or above one
        ancestors = set(schema._ancestors(field_id))
        above_selected = any(field_id in set(schema._ancestors(i)) for i in selected)
        in_map = any(isinstance(schema.find_type(a), MapType) for a in ancestors)  # maps keep keys/values whole
        assert ({field_id} | ancestors) & selected or above_selected or in_map
        assert projected.find_column_name(field_id) == schema.find_column_name(field_id)


@settings(deadline=None)
@given(schemas())
def test_assign_fresh_ids_matches_pyiceberg(schema: Schema) -> None:
    from pyiceberg.schema import Schema as PySchema
    from pyiceberg.schema import assign_fresh_schema_ids

    fresh = assign_fresh_ids(schema)
    theirs = assign_fresh_schema_ids(PySchema.model_validate_json(json.dumps(schema.to_json())))
    assert fresh.fields == schema_from_json(json.loads(theirs.model_dump_json())).fields
    assert fresh.field_ids == frozenset(range(1, len(schema.field_ids) + 1))
    assert fresh.identifier_field_names() == schema.identifier_field_names()


def test_assign_fresh_ids_numbers_struct_fields_before_children() -> None:
    fresh = assign_fresh_ids(nested_schema())
    assert [f.field_id for f in fresh.fields] == [1, 2, 3, 4, 5]
    assert fresh.find_column_name(6) == "location.zone"
    assert fresh.find_column_name(8) == "points.element"
    assert fresh.find_column_name(9) == "points.element.x"
    assert (fresh.find_column_name(11), fresh.find_column_name(12)) == ("props.key", "props.value")
    assert fresh.find_column_name(14) == "tags.element"
    assert fresh.identifier_field_ids == (1,)


def test_assign_fresh_ids_with_custom_counter() -> None:
    counter = itertools.count(100)
    fresh = assign_fresh_ids(Schema(NestedField(7, "a", IntegerType())), lambda: next(counter))
    assert fresh.fields == (NestedField(100, "a", IntegerType()),)
