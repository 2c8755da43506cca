"""Iceberg v2 data types (spec: "Schemas and Data Types", Appendix C).

Types are immutable values. ``str(t)`` of a primitive is its JSON type string
("long", "decimal(9,2)", "fixed[16]"), so a type round-trips through
:func:`parse_primitive`. Nested types carry the field ids that Iceberg uses to
track columns across renames and reorders.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from table.errors import SchemaError


class IcebergType:
    """Base of every Iceberg type."""

    @property
    def is_primitive(self) -> bool:
        return isinstance(self, PrimitiveType)

    @property
    def is_nested(self) -> bool:
        return not self.is_primitive


class PrimitiveType(IcebergType):
    """A leaf type. Subclasses without parameters are singletons by value."""

    _name: str = ""

    def __str__(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)


class BooleanType(PrimitiveType):
    _name = "boolean"


class IntegerType(PrimitiveType):
    """32-bit signed integer."""

    _name = "int"


class LongType(PrimitiveType):
    """64-bit signed integer."""

    _name = "long"


class FloatType(PrimitiveType):
    """32-bit IEEE 754 float."""

    _name = "float"


class DoubleType(PrimitiveType):
    """64-bit IEEE 754 float."""

    _name = "double"


class DateType(PrimitiveType):
    """Calendar date; stored as days since 1970-01-01."""

    _name = "date"


class TimeType(PrimitiveType):
    """Time of day without date or zone; stored as microseconds since midnight."""

    _name = "time"


class TimestampType(PrimitiveType):
    """Timestamp without zone; stored as microseconds since the epoch."""

    _name = "timestamp"


class TimestamptzType(PrimitiveType):
    """Timestamp with zone (UTC-adjusted); stored as microseconds since the epoch."""

    _name = "timestamptz"


class StringType(PrimitiveType):
    """UTF-8 character sequence."""

    _name = "string"


class UUIDType(PrimitiveType):
    """Universally unique identifier; 16 bytes."""

    _name = "uuid"


class BinaryType(PrimitiveType):
    """Arbitrary-length byte array."""

    _name = "binary"


class FixedType(PrimitiveType):
    """Fixed-length byte array of ``length`` bytes."""

    def __init__(self, length: int) -> None:
        if length <= 0:
            raise SchemaError(f"fixed length must be positive, got {length}")
        self.length = length

    def __str__(self) -> str:
        return f"fixed[{self.length}]"

    def __repr__(self) -> str:
        return f"FixedType({self.length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FixedType) and other.length == self.length

    def __hash__(self) -> int:
        return hash(("fixed", self.length))


class DecimalType(PrimitiveType):
    """Fixed-point decimal with ``precision`` digits, ``scale`` of them after the point."""

    MAX_PRECISION = 38

    def __init__(self, precision: int, scale: int) -> None:
        if not 0 < precision <= self.MAX_PRECISION:
            raise SchemaError(f"decimal precision must be in 1..38, got {precision}")
        if scale > precision:
            raise SchemaError(f"decimal scale {scale} exceeds precision {precision}")
        self.precision = precision
        self.scale = scale

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})"

    def __repr__(self) -> str:
        return f"DecimalType({self.precision}, {self.scale})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DecimalType) and other.precision == self.precision and other.scale == self.scale

    def __hash__(self) -> int:
        return hash(("decimal", self.precision, self.scale))


@dataclass(frozen=True)
class NestedField:
    """A named, id-carrying field of a struct (or a schema)."""

    field_id: int
    name: str
    field_type: IcebergType
    required: bool = False
    doc: str | None = None
    initial_default: Any = None
    write_default: Any = None

    @property
    def optional(self) -> bool:
        return not self.required

    def __str__(self) -> str:
        req = "required" if self.required else "optional"
        return f"{self.field_id}: {self.name}: {req} {self.field_type}"


class NestedType(IcebergType):
    """A struct, list or map."""

    @property
    def fields(self) -> tuple[NestedField, ...]:
        """The child fields, each with its id (list element, map key/value included)."""
        raise NotImplementedError


class StructType(NestedType):
    """A tuple of named fields, each with a unique id."""

    __slots__ = ("_fields",)

    def __init__(self, *fields: NestedField) -> None:
        self._fields = tuple(fields)

    @property
    def fields(self) -> tuple[NestedField, ...]:
        return self._fields

    def field_by_name(self, name: str) -> NestedField | None:
        return next((f for f in self._fields if f.name == name), None)

    def field_by_id(self, field_id: int) -> NestedField | None:
        return next((f for f in self._fields if f.field_id == field_id), None)

    def __iter__(self) -> Iterator[NestedField]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StructType) and other._fields == self._fields

    def __hash__(self) -> int:
        return hash(self._fields)

    def __repr__(self) -> str:
        return "StructType(" + ", ".join(repr(f) for f in self._fields) + ")"

    def __str__(self) -> str:
        return "struct<" + ", ".join(str(f) for f in self._fields) + ">"


@dataclass(frozen=True)
class ListType(NestedType):
    """A list whose elements share one type and one field id."""

    element_id: int
    element_type: IcebergType
    element_required: bool = True

    @property
    def element_field(self) -> NestedField:
        return NestedField(self.element_id, "element", self.element_type, self.element_required)

    @property
    def fields(self) -> tuple[NestedField, ...]:
        return (self.element_field,)

    def __str__(self) -> str:
        return f"list<{self.element_type}>"


@dataclass(frozen=True)
class MapType(NestedType):
    """A map; keys are always required, values may be optional."""

    key_id: int
    key_type: IcebergType
    value_id: int
    value_type: IcebergType
    value_required: bool = True

    @property
    def key_field(self) -> NestedField:
        return NestedField(self.key_id, "key", self.key_type, True)

    @property
    def value_field(self) -> NestedField:
        return NestedField(self.value_id, "value", self.value_type, self.value_required)

    @property
    def fields(self) -> tuple[NestedField, ...]:
        return (self.key_field, self.value_field)

    def __str__(self) -> str:
        return f"map<{self.key_type}, {self.value_type}>"


_SIMPLE: dict[str, PrimitiveType] = {
    t._name: t()
    for t in (
        BooleanType,
        IntegerType,
        LongType,
        FloatType,
        DoubleType,
        DateType,
        TimeType,
        TimestampType,
        TimestamptzType,
        StringType,
        UUIDType,
        BinaryType,
    )
}
_FIXED = re.compile(r"^fixed\[\s*(\d+)\s*\]$")
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def parse_primitive(text: str) -> PrimitiveType:
    """Parse a JSON type string ("long", "decimal(9, 2)", "fixed[16]")."""
    if text in _SIMPLE:
        return _SIMPLE[text]
    if m := _FIXED.match(text):
        return FixedType(int(m.group(1)))
    if m := _DECIMAL.match(text):
        return DecimalType(int(m.group(1)), int(m.group(2)))
    raise SchemaError(f"unknown type {text!r}")


PrimitiveLike: TypeAlias = PrimitiveType | str
