"""Explicit table schemas: columns written as Iceberg's JSON without field ids.

Ids are left out because users cannot know them before the table exists;
:func:`build_schema` assigns them the way Iceberg does at table creation, so
the schema Floe creates matches what any other Iceberg writer would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from service.config.fields import Section
from service.config.problems import invalid, join_path, show, unknown_key
from table.errors import SchemaError
from table.schema import Schema, assign_fresh_ids, schema_from_json
from table.types import parse_primitive

_PRIMITIVE_HINT = (
    "an Iceberg type such as long, string, decimal(10,2), timestamptz, fixed[16], or a struct/list/map object"
)
_NESTED_KEYS = {
    "struct": {"type", "fields"},
    "list": {"type", "element", "element-required"},
    "map": {"type", "key", "value", "value-required"},
}
_COLUMN_KEYS = {"name", "type", "required", "doc"}

# ----------------------------------------------------------------------------- checking


def check_type(value: Any, at: str = "") -> Any:
    """A column type: a primitive name, or a struct/list/map object as in Iceberg's JSON, without ids."""
    if isinstance(value, str):
        try:
            return str(parse_primitive(value.strip()))
        except SchemaError:
            raise invalid((at, f"expected {_PRIMITIVE_HINT}, got {show(value)}")) from None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in _NESTED_KEYS:
        raise invalid((at, f"expected {_PRIMITIVE_HINT}, got {show(value)}"))
    _refuse_unknown_keys(value, _NESTED_KEYS[kind], at)
    return {"struct": _check_struct, "list": _check_list, "map": _check_map}[kind](value, at)


def _refuse_unknown_keys(value: Mapping[str, Any], allowed: Iterable[str], at: str) -> None:
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise invalid((join_path(at, unknown[0]), unknown_key(sorted(allowed))))


def _check_struct(value: dict, at: str) -> dict:
    fields = value.get("fields")
    if not isinstance(fields, list) or not fields:
        raise invalid((join_path(at, "fields"), f"expected a non-empty list of columns, got {show(fields)}"))
    return {
        "type": "struct",
        "fields": [_check_column(f, join_path(at, f"fields[{i}]")) for i, f in enumerate(fields)],
    }


def _check_list(value: dict, at: str) -> dict:
    if "element" not in value:
        raise invalid((join_path(at, "element"), "required for a list (got nothing)"))
    required = _check_bool(value.get("element-required", False), join_path(at, "element-required"))
    return {
        "type": "list",
        "element": check_type(value["element"], join_path(at, "element")),
        "element-required": required,
    }


def _check_map(value: dict, at: str) -> dict:
    for key in ("key", "value"):
        if key not in value:
            raise invalid((join_path(at, key), "required for a map (got nothing)"))
    return {
        "type": "map",
        "key": check_type(value["key"], join_path(at, "key")),
        "value": check_type(value["value"], join_path(at, "value")),
        "value-required": _check_bool(value.get("value-required", False), join_path(at, "value-required")),
    }


def _check_column(value: Any, at: str) -> dict:
    if not isinstance(value, dict):
        raise invalid((at, f"expected a column mapping (name, type, required, doc), got {show(value)}"))
    _refuse_unknown_keys(value, _COLUMN_KEYS, at)
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise invalid((join_path(at, "name"), f"expected a column name, got {show(name)}"))
    if "type" not in value:
        raise invalid((join_path(at, "type"), "required (got nothing)"))
    return {
        "name": name,
        "type": check_type(value["type"], join_path(at, "type")),
        "required": _check_bool(value.get("required", False), join_path(at, "required")),
        "doc": value.get("doc"),
    }


def _check_bool(value: Any, at: str) -> bool:
    if not isinstance(value, bool):
        raise invalid((at, f"expected true or false, got {show(value)}"))
    return value


class Column(Section):
    """A table column; nested types are written as in Iceberg's JSON, without field ids."""

    name: str = Field(min_length=1, description="Column name.")
    type: Annotated[Any, BeforeValidator(check_type)] = Field(
        description="Iceberg type: `long`, `decimal(10,2)`, `timestamptz`, or `{type: struct, fields: [...]}`, "
        "`{type: list, element: ..., element-required: ...}`, `{type: map, key: ..., value: ..., value-required: ...}`.",
        json_schema_extra={"type_name": "Iceberg type"},
    )
    required: bool = Field(False, description="Whether the column may not be null.")
    doc: str | None = Field(None, description="Column documentation kept in the table schema.")


# ----------------------------------------------------------------------------- building


def _type_json(spec: Any, next_id: Callable[[], int]) -> Any:
    """Iceberg JSON of a checked type, with ids from ``next_id`` (renumbered afterwards)."""
    if isinstance(spec, str):
        return spec
    if spec["type"] == "struct":
        return {"type": "struct", "fields": [_field_json(f, next_id) for f in spec["fields"]]}
    if spec["type"] == "list":
        return {
            "type": "list",
            "element-id": next_id(),
            "element": _type_json(spec["element"], next_id),
            "element-required": spec["element-required"],
        }
    return {
        "type": "map",
        "key-id": next_id(),
        "key": _type_json(spec["key"], next_id),
        "value-id": next_id(),
        "value": _type_json(spec["value"], next_id),
        "value-required": spec["value-required"],
    }


def _field_json(column: Mapping[str, Any], next_id: Callable[[], int]) -> dict[str, Any]:
    field = {
        "id": next_id(),
        "name": column["name"],
        "required": column["required"],
        "type": _type_json(column["type"], next_id),
    }
    if column.get("doc"):
        field["doc"] = column["doc"]
    return field


def build_schema(columns: list[Column], key: list[str]) -> Schema:
    """The Iceberg schema of ``columns``, ids assigned as Iceberg does at table creation."""
    counter = iter(range(1, 1_000_000))
    fields = [_field_json(c.model_dump(), lambda: next(counter)) for c in columns]
    schema = schema_from_json({"type": "struct", "schema-id": 0, "fields": fields})
    identifiers = [schema.find_field(name).field_id for name in key]
    return assign_fresh_ids(Schema(*schema.fields, identifier_field_ids=identifiers))


def has_field(schema: Schema, name: str) -> bool:
    """Whether ``name`` (a dotted path for nested fields) is a field of ``schema``."""
    try:
        schema.find_field(name)
        return True
    except (SchemaError, KeyError):
        return False
