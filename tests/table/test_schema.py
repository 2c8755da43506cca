"""Tests for table.schema: lookup, projection, JSON, fresh ids and evolution."""

from __future__ import annotations

import itertools
import json
import re
import string
import uuid
from decimal import Decimal
from types import SimpleNamespace
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
    SchemaUpdate,
    assign_fresh_ids,
    is_promotion,
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


def nested_schema() -> Schema:
    """id, a struct, a list of structs, a map with struct values, and a list of ints."""
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(
            2,
            "location",
            StructType(
                NestedField(3, "zone", StringType(), required=True),
                NestedField(4, "Lon", DoubleType()),
            ),
            required=True,
        ),
        NestedField(
            5,
            "points",
            ListType(6, StructType(NestedField(7, "x", LongType(), required=True), NestedField(8, "y", LongType()))),
        ),
        NestedField(9, "props", MapType(10, StringType(), 11, StructType(NestedField(12, "v", StringType())))),
        NestedField(13, "tags", ListType(14, IntegerType(), element_required=False)),
        schema_id=3,
        identifier_field_ids=[1],
    )


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


# --------------------------------------------------------------------------
# evolution
# --------------------------------------------------------------------------


def update() -> SchemaUpdate:
    return SchemaUpdate(nested_schema(), last_column_id=14)


def test_add_top_level_and_nested_columns_get_fresh_ids() -> None:
    schema, last = (
        update()
        .add_column("score", MapType(1, StringType(), 2, ListType(3, IntegerType())), doc="points")
        .add_column(("location", "alt"), FloatType())
        .add_column(("points", "z"), LongType())
        .add_column(("props", "w"), BooleanType())
        .apply()
    )
    assert last == 21
    assert schema.find_field("score") == NestedField(
        15, "score", MapType(16, StringType(), 17, ListType(18, IntegerType())), doc="points"
    )
    assert schema.find_field("location.alt").field_id == 19
    assert schema.find_column_name(20) == "points.element.z"
    assert schema.find_column_name(21) == "props.value.w"
    assert schema.fields[-1].name == "score"


def test_add_required_column_needs_a_default() -> None:
    with pytest.raises(SchemaError, match="required column 'x' without a default"):
        update().add_column("x", IntegerType(), required=True)
    schema, _ = update().add_column("x", IntegerType(), required=True, default=5).apply()
    assert schema.find_field("x").initial_default == 5 and schema.find_field("x").write_default == 5


def test_add_column_default_must_fit_type() -> None:
    with pytest.raises(SchemaError, match="'x'.*default"):
        update().add_column("x", IntegerType(), default="five")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("a.b", "ambiguous"),
        ("id", "exists"),
        (("location", "zone"), "exists"),
        (("id", "x"), "not a struct"),
        (("nope", "x"), "'nope'"),
        (("tags", "x"), "not a struct"),
    ],
)
def test_add_column_errors(path: Any, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        update().add_column(path, IntegerType())


def test_add_column_twice_is_rejected() -> None:
    with pytest.raises(SchemaError, match="already being added"):
        update().add_column("x", IntegerType()).add_column("x", LongType())


def test_add_after_delete_reuses_the_name_with_a_new_id() -> None:
    schema, _ = update().delete_column("tags").add_column("tags", StringType()).apply()
    assert schema.find_field("tags") == NestedField(15, "tags", StringType())


def test_rename_keeps_ids() -> None:
    schema, last = update().rename_column("location.zone", "region").rename_column("id", "key").apply()
    assert schema.find_field("location.region").field_id == 3
    assert schema.find_field("key").field_id == 1
    assert schema.identifier_field_names() == {"key"}
    assert last == 14


def test_rename_to_existing_name_fails_on_apply() -> None:
    with pytest.raises(SchemaError, match="'tags'"):
        update().rename_column("props", "tags").apply()


def test_delete_columns() -> None:
    schema, _ = update().delete_column("points.x").delete_column("tags").apply()
    assert "tags" not in {f.name for f in schema.fields}
    assert schema.find_type("points.element") == StructType(NestedField(8, "y", LongType()))


def test_delete_identifier_needs_new_identifiers() -> None:
    with pytest.raises(SchemaError, match="identifier field 'id'"):
        update().delete_column("id").apply()
    schema, _ = update().delete_column("id").set_identifier_fields("location.zone").apply()
    assert schema.identifier_field_ids == (3,)


@pytest.mark.parametrize(
    ("name", "reason"),
    [("points.element", "list element"), ("props.key", "map key"), ("missing", "'missing'")],
)
def test_delete_errors(name: str, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        update().delete_column(name)


def test_changes_to_deleted_columns_are_rejected() -> None:
    with pytest.raises(SchemaError, match="being deleted"):
        update().delete_column("tags").rename_column("tags", "t")
    with pytest.raises(SchemaError, match="pending updates"):
        update().rename_column("tags", "t").delete_column("tags")
    with pytest.raises(SchemaError, match="being deleted"):
        update().delete_column("location").add_column(("location", "z"), IntegerType())


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        (IntegerType(), LongType(), True),
        (FloatType(), DoubleType(), True),
        (DecimalType(9, 2), DecimalType(18, 2), True),
        (DecimalType(9, 2), DecimalType(18, 3), False),
        (DecimalType(9, 2), DecimalType(8, 2), False),
        (LongType(), IntegerType(), False),
        (IntegerType(), StringType(), False),
        (DoubleType(), FloatType(), False),
        (DateType(), TimestampType(), False),
    ],
)
def test_type_promotions(old: IcebergType, new: IcebergType, ok: bool) -> None:
    assert is_promotion(old, new) is ok
    base = Schema(NestedField(1, "c", old))
    if ok:
        schema, _ = SchemaUpdate(base, 1).update_column("c", new).apply()
        assert schema.find_type("c") == new
    else:
        with pytest.raises(SchemaError, match=re.escape(f"column 'c' from {old} to {new}")):
            SchemaUpdate(base, 1).update_column("c", new)


def test_update_column_of_list_element_and_map_value() -> None:
    base = Schema(
        NestedField(1, "l", ListType(2, IntegerType())), NestedField(3, "m", MapType(4, StringType(), 5, FloatType()))
    )
    schema, _ = SchemaUpdate(base, 5).update_column("l.element", LongType()).update_column("m.value", DoubleType()).apply()
    assert schema.find_type("l") == ListType(2, LongType())
    assert schema.find_type("m") == MapType(4, StringType(), 5, DoubleType())


def test_update_nested_type_is_rejected() -> None:
    with pytest.raises(SchemaError, match="not a primitive"):
        update().update_column("location", StructType())


def test_make_optional_and_update_doc() -> None:
    schema, _ = update().make_optional("location.zone").make_optional("points.element").update_doc("tags", "t").apply()
    assert schema.find_field("location.zone").optional
    assert schema.find_field("points.element").optional
    assert schema.find_field("tags").doc == "t"
    with pytest.raises(SchemaError, match="map keys"):
        update().make_optional("props.key")


def test_identifier_cannot_become_optional() -> None:
    with pytest.raises(SchemaError, match="'id' must be required"):
        update().make_optional("id").apply()


def test_moves() -> None:
    schema, _ = (
        update()
        .add_column("new", IntegerType())
        .move_first("new")
        .move_after("id", "props")
        .move_before("location.Lon", "location.zone")
        .apply()
    )
    assert [f.name for f in schema.fields] == ["new", "location", "points", "props", "id", "tags"]
    assert [f.name for f in schema.find_type("location").fields] == ["Lon", "zone"]


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (lambda u: u.move_after("id", "location.zone"), "different structs"),
        (lambda u: u.move_before("id", "id"), "itself"),
        (lambda u: u.move_first("points.element"), "struct fields"),
        (lambda u: u.move_first("nope"), "'nope'"),
    ],
)
def test_move_errors(call: Any, reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        call(update())


def test_set_identifier_fields_resolves_against_new_schema() -> None:
    schema, _ = (
        update()
        .add_column("region", StringType(), required=True, default="eu")
        .set_identifier_fields("id", "region")
        .apply(schema_id=4)
    )
    assert schema.identifier_field_names() == {"id", "region"}
    assert schema.schema_id == 4
    with pytest.raises(SchemaError, match="'points.element.x' must not be nested in 'points'"):
        update().set_identifier_fields("points.x").apply()


def test_last_column_id_must_cover_schema() -> None:
    with pytest.raises(SchemaError, match="last column id 3"):
        SchemaUpdate(nested_schema(), 3)


def test_no_changes_returns_equal_schema() -> None:
    assert update().apply() == (nested_schema(), 14)


def _pyiceberg_update(schema: Schema) -> Any:
    """pyiceberg's UpdateSchema on ``schema``, as an oracle (no table or catalog)."""
    from pyiceberg.partitioning import PartitionSpec as PySpec
    from pyiceberg.schema import Schema as PySchema
    from pyiceberg.table.metadata import new_table_metadata as py_new
    from pyiceberg.table.sorting import SortOrder as PyOrder
    from pyiceberg.table.update.schema import UpdateSchema

    py_schema = PySchema.model_validate_json(json.dumps(schema.to_json()))
    py_md = py_new(py_schema, PySpec(), PyOrder(), "file:///t", {})
    return UpdateSchema(SimpleNamespace(table_metadata=py_md), schema=py_schema)  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_evolution_agrees_with_pyiceberg(data: st.DataObject) -> None:
    base = nested_schema()
    ours = SchemaUpdate(base, base.highest_field_id)
    theirs = _pyiceberg_update(base)
    base_names = ["location", "points", "props", "tags"]
    top = list(base_names)  # columns that can be moved, added ones included
    for step in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["add", "rename", "move", "promote", "optional"]))
        name = data.draw(st.sampled_from(top if op == "move" else base_names))
        if op == "add":
            from pyiceberg.types import StringType as PyString

            new = f"added{step}"
            ours.add_column(new, StringType(), doc="d")
            theirs.add_column(new, PyString(), doc="d")
            top.append(new)
        elif op == "rename":
            new = f"{name}_r{step}"
            ours.rename_column(name, new)  # later changes still use the base name
            theirs.rename_column(name, new)
        elif op == "move":
            other = data.draw(st.sampled_from(top))
            if other != name:
                ours.move_after(name, other)
                theirs.move_after(name, other)
        elif op == "promote" and name.startswith("tags"):
            from pyiceberg.types import LongType as PyLong

            ours.update_column(f"{name}.element", LongType())
            theirs.update_column(f"{name}.element", PyLong())
        elif op == "optional" and name.startswith("location"):
            ours.make_optional(f"{name}.zone")
            theirs.make_column_optional(f"{name}.zone")
    schema, _ = ours.apply()
    expected = json.loads(theirs._apply().model_dump_json())
    assert schema.to_json()["fields"] == expected["fields"]
