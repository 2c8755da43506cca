"""One JSON Schema (the registry's ``JSON`` type) -> Iceberg columns; ids are placeholders, as for Avro.

The mapping (docs/schemas-from-the-stream.md has it as a table):

* ``object`` with ``properties``: struct. A property is required when ``required`` lists it and its type
  does not allow null. An ``object`` with no ``properties`` but an ``additionalProperties`` schema: map with
  string keys.
* ``boolean``: boolean; ``integer``: long; ``number``: double; ``string``: string, or by ``format``:
  ``date-time`` timestamptz, ``date`` date, ``time`` time, ``uuid`` uuid (other formats stay strings).
* Kafka Connect's ``connect.type`` narrows a number: ``int8``, ``int16``, ``int32`` int; ``int64`` long;
  ``float32`` float; ``float64`` double; ``bytes`` binary.
* ``array`` with ``items``: list. ``enum`` of strings: string.
* A type list or ``oneOf``/``anyOf`` of one type and ``null``: that type, optional. Any other choice of types
  is refused, as Iceberg has no sum type.
* ``$ref`` to ``#/definitions/...`` or ``#/$defs/...``: the schema it names (one that contains itself is
  refused).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ingest.driver.writer_schemas.unmappable import UnmappableSchema
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
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
    TimestamptzType,
    TimeType,
    UUIDType,
)

_FORMATS: dict[str, IcebergType] = {
    "date-time": TimestamptzType(),
    "date": DateType(),
    "time": TimeType(),
    "uuid": UUIDType(),
}
_CONNECT: dict[str, IcebergType] = {
    "int8": IntegerType(),
    "int16": IntegerType(),
    "int32": IntegerType(),
    "int64": LongType(),
    "float32": FloatType(),
    "float64": DoubleType(),
    "bytes": BinaryType(),
}
_SIMPLE: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "integer": LongType(),
    "number": DoubleType(),
    "string": StringType(),
}


def json_schema_struct(schema: Any) -> StructType:
    """The columns of an ``object`` JSON Schema (parsed JSON)."""
    mapped, _ = _Mapper(schema).type_of(schema, "")
    if not isinstance(mapped, StructType):
        raise UnmappableSchema("", "the value schema is not an object with properties: a table needs named fields")
    return mapped


class _Mapper:
    def __init__(self, root: Any) -> None:
        self._root = root
        self._open: set[str] = set()
        self._ids: Callable[[], int] = itertools.count(1).__next__

    def type_of(self, schema: Any, path: str) -> tuple[IcebergType, bool]:
        """The Iceberg type of ``schema``, and whether it allows no null."""
        if schema is True or schema == {}:
            raise UnmappableSchema(path, "a schema that allows any value has no Iceberg type")
        if not isinstance(schema, dict):
            raise UnmappableSchema(path, f"{schema!r} is not a JSON Schema")
        if "$ref" in schema:
            return self._ref(schema["$ref"], path)
        for key in ("oneOf", "anyOf"):
            if key in schema:
                return self._choice(schema[key], path, key)
        kinds = schema.get("type")
        if kinds is None and "enum" in schema:
            kinds = "string" if all(isinstance(v, str) for v in schema["enum"]) else None
        if kinds is None and "properties" in schema:
            kinds = "object"
        if isinstance(kinds, list):
            others = [k for k in kinds if k != "null"]
            if len(others) != 1:
                raise UnmappableSchema(path, f"a value of types {' or '.join(others)} has no Iceberg type")
            return self._typed(others[0], schema, path), len(others) == len(kinds)
        if not isinstance(kinds, str):
            raise UnmappableSchema(path, "the schema names no type")
        if kinds == "null":
            raise UnmappableSchema(path, "a value that is always null has no Iceberg type")
        return self._typed(kinds, schema, path), True

    def _choice(self, options: list, path: str, key: str) -> tuple[IcebergType, bool]:
        others = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        if len(others) != 1:
            raise UnmappableSchema(path, f"{key} of {len(others)} schemas has no Iceberg type (only one and null)")
        mapped, required = self.type_of(others[0], path)
        return mapped, required and len(others) == len(options)

    def _ref(self, ref: str, path: str) -> tuple[IcebergType, bool]:
        if not ref.startswith("#/"):
            raise UnmappableSchema(path, f"$ref {ref} points outside the schema, which Floe does not follow")
        if ref in self._open:
            raise UnmappableSchema(path, f"$ref {ref} contains itself; Iceberg types are not recursive")
        target: Any = self._root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict) or part not in target:
                raise UnmappableSchema(path, f"$ref {ref} names nothing in the schema")
            target = target[part]
        self._open.add(ref)
        try:
            return self.type_of(target, path)
        finally:
            self._open.discard(ref)

    def _typed(self, kind: str, schema: dict, path: str) -> IcebergType:
        connect = schema.get("connect.type")
        if isinstance(connect, str) and connect in _CONNECT:
            return _CONNECT[connect]
        if kind == "string" and schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        if kind in _SIMPLE:
            return _SIMPLE[kind]
        if kind == "array":
            if "items" not in schema:
                raise UnmappableSchema(path, "an array without items has no Iceberg type")
            element, required = self.type_of(schema["items"], _join(path, "element"))
            return ListType(self._ids(), element, required)
        if kind == "object":
            return self._object(schema, path)
        raise UnmappableSchema(path, f"unknown JSON Schema type {kind!r}")

    def _object(self, schema: dict, path: str) -> IcebergType:
        properties = schema.get("properties")
        if not properties:
            values = schema.get("additionalProperties")
            if not isinstance(values, dict) or not values:
                raise UnmappableSchema(path, "an object with neither properties nor a schema for its values")
            value, required = self.type_of(values, _join(path, "value"))
            return MapType(self._ids(), StringType(), self._ids(), value, required)
        needed = set(schema.get("required", ()))
        fields = []
        for name, prop in properties.items():
            mapped, not_null = self.type_of(prop, _join(path, name))
            doc = prop.get("description") if isinstance(prop, dict) else None
            fields.append(NestedField(self._ids(), name, mapped, not_null and name in needed, doc))
        return StructType(*fields)


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name
