"""One Avro writer schema -> Iceberg columns (field ids are placeholders; the fold assigns the real ones).

The mapping, one rule per Avro type (docs/schemas-from-the-stream.md has it as a table):

* ``null`` union with one other type: that type, optional. Any other union is refused: Iceberg has no sum type.
* ``boolean``, ``int``, ``long``, ``float``, ``double``, ``string``, ``bytes``: boolean, int, long, float, double,
  string, binary. ``enum``: string (its symbol). ``fixed(n)``: fixed[n].
* ``record``: struct; ``array``: list; ``map``: map with string keys. A record that contains itself is refused.
* Logical types: ``decimal`` (bytes or fixed): decimal(P,S); ``date``: date; ``time-millis``, ``time-micros``:
  time; ``timestamp-millis``, ``timestamp-micros``: timestamptz (an instant, in UTC); ``local-timestamp-millis``,
  ``local-timestamp-micros``: timestamp; ``uuid`` (string or fixed(16)): uuid. An unknown logical type is its
  underlying type, as the Avro spec says.

A field is required unless its type is a union with null. Unlike the Avro reader, defaults play no part: a
column's values come from each record, and a field a writer lacks is null.
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

_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
}
_LOGICAL: dict[tuple[str, str], IcebergType] = {
    ("int", "date"): DateType(),
    ("int", "time-millis"): TimeType(),
    ("long", "time-micros"): TimeType(),
    ("long", "timestamp-millis"): TimestamptzType(),
    ("long", "timestamp-micros"): TimestamptzType(),
    ("long", "local-timestamp-millis"): TimestampType(),
    ("long", "local-timestamp-micros"): TimestampType(),
    ("string", "uuid"): UUIDType(),
}


def avro_struct(schema: Any) -> StructType:
    """The columns of a record schema (parsed JSON), ids numbered in walk order."""
    mapper = _Mapper()
    mapped, _ = mapper.type_of(schema, "")
    if not isinstance(mapped, StructType):
        raise UnmappableSchema("", f"the value schema is {_kind(schema)}, not a record: a table needs named fields")
    return mapped


class _Mapper:
    """Walks one schema; named types (records, enums, fixed) are remembered by their full name."""

    def __init__(self) -> None:
        self._named: dict[str, Any] = {}
        self._open: set[str] = set()
        self._ids: Callable[[], int] = itertools.count(1).__next__

    def type_of(self, schema: Any, path: str, namespace: str = "") -> tuple[IcebergType, bool]:
        """The Iceberg type of ``schema`` and whether it is required."""
        if isinstance(schema, list):
            return self._union(schema, path, namespace)
        if isinstance(schema, str):
            return self._named_or_primitive(schema, path, namespace), True
        if not isinstance(schema, dict) or "type" not in schema:
            raise UnmappableSchema(path, f"{schema!r} is not an Avro schema")
        return self._complex(schema, path, namespace), True

    def _union(self, branches: list, path: str, namespace: str) -> tuple[IcebergType, bool]:
        others = [b for b in branches if b != "null"]
        if len(others) != 1:
            kinds = " and ".join(_kind(b) for b in others) or "only null"
            raise UnmappableSchema(path, f"a union of {kinds} has no Iceberg type (only a union with null does)")
        mapped, _ = self.type_of(others[0], path, namespace)
        return mapped, len(others) == len(branches)

    def _named_or_primitive(self, name: str, path: str, namespace: str) -> IcebergType:
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        for candidate in (full, name):
            if candidate in self._open:
                raise UnmappableSchema(path, f"record {candidate} contains itself; Iceberg types are not recursive")
            if candidate in self._named:
                return self._complex(self._named[candidate], path, namespace, defined=True)
        raise UnmappableSchema(path, f"unknown Avro type {name!r}")

    def _complex(self, schema: dict, path: str, namespace: str, defined: bool = False) -> IcebergType:
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical is not None:
            mapped = _logical(schema, kind, logical)
            if mapped is not None:
                self._remember(schema, namespace, defined)
                return mapped
        if kind == "record" or kind == "error":
            return self._record(schema, path, namespace, defined)
        if kind == "enum":
            self._remember(schema, namespace, defined)
            return StringType()
        if kind == "fixed":
            self._remember(schema, namespace, defined)
            return FixedType(int(schema["size"]))
        if kind == "array":
            element, required = self.type_of(schema["items"], _join(path, "element"), namespace)
            return ListType(self._ids(), element, required)
        if kind == "map":
            value, required = self.type_of(schema["values"], _join(path, "value"), namespace)
            return MapType(self._ids(), StringType(), self._ids(), value, required)
        if isinstance(kind, (list, dict)) or kind in _PRIMITIVES:
            return self.type_of(kind, path, namespace)[0]  # {"type": "long"}: the primitive, unannotated
        return self._named_or_primitive(kind, path, namespace)

    def _record(self, schema: dict, path: str, namespace: str, defined: bool) -> StructType:
        full = self._remember(schema, namespace, defined)
        inner = full.rpartition(".")[0]
        self._open.add(full)
        try:
            fields = [self._field(f, path, inner) for f in schema.get("fields", [])]
        finally:
            self._open.discard(full)
        return StructType(*fields)

    def _field(self, field: dict, parent: str, namespace: str) -> NestedField:
        path = _join(parent, field["name"])
        mapped, required = self.type_of(field["type"], path, namespace)
        return NestedField(self._ids(), field["name"], mapped, required, field.get("doc"))

    def _remember(self, schema: dict, namespace: str, defined: bool) -> str:
        name = schema.get("name")
        if name is None:
            return ""
        space = schema.get("namespace", namespace)
        full = name if "." in name or not space else f"{space}.{name}"
        if not defined:
            self._named[full] = schema
        return full


def _logical(schema: dict, kind: Any, logical: str) -> IcebergType | None:
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical == "uuid" and kind == "fixed" and int(schema.get("size", 0)) == 16:
        return UUIDType()
    return _LOGICAL.get((kind, logical)) if isinstance(kind, str) else None


def _kind(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("logicalType") or schema.get("type"))
    return "a union" if isinstance(schema, list) else str(schema)


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name
