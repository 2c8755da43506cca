"""Tests for table.schema_evolution: type promotions and SchemaUpdate."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.errors import SchemaError
from table.schema import Schema
from table.schema_evolution import SchemaUpdate, is_promotion
from table.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
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
)
from tests.table.helpers import nested_schema


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

