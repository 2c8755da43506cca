"""One Protobuf writer schema (its file's first message) -> Iceberg columns; ids are placeholders.

The mapping (docs/schemas-from-the-stream.md has it as a table):

* ``double``, ``float``, ``bool``, ``string``, ``bytes``: double, float, boolean, string, binary.
* ``int32``, ``sint32``, ``sfixed32``: int. ``int64``, ``sint64``, ``sfixed64``, and the unsigned ``uint32``,
  ``fixed32``, ``uint64``, ``fixed64``: long (a ``uint64`` beyond a long's range is a bad record).
* ``enum``: string (the value's name). A message: struct (one that contains itself is refused).
* ``repeated``: list of required elements; ``map<K, V>``: map.
* ``google.protobuf.Timestamp``: timestamptz. The wrappers (``Int64Value``...): their scalar, optional.
* A field is required when it has no presence (a proto3 scalar, a list, a map: unset reads as its default)
  and optional when it has one (a message, ``optional``, a member of a ``oneof``). A ``oneof`` is its members,
  each an optional column: a new member is a new column.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ingest.driver.writer_schemas.unmappable import UnmappableSchema
from ingest.tasks.decoding.protobuf_decoder import TIMESTAMP, table_message
from table.types import (
    BinaryType,
    BooleanType,
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
)

F = FieldDescriptor
_SCALARS: dict[int, IcebergType] = {
    F.TYPE_DOUBLE: DoubleType(),
    F.TYPE_FLOAT: FloatType(),
    F.TYPE_BOOL: BooleanType(),
    F.TYPE_STRING: StringType(),
    F.TYPE_BYTES: BinaryType(),
    F.TYPE_ENUM: StringType(),
    F.TYPE_INT32: IntegerType(),
    F.TYPE_SINT32: IntegerType(),
    F.TYPE_SFIXED32: IntegerType(),
    F.TYPE_INT64: LongType(),
    F.TYPE_SINT64: LongType(),
    F.TYPE_SFIXED64: LongType(),
    F.TYPE_UINT32: LongType(),
    F.TYPE_FIXED32: LongType(),
    F.TYPE_UINT64: LongType(),
    F.TYPE_FIXED64: LongType(),
}
_WRAPPED: dict[str, IcebergType] = {
    "google.protobuf.DoubleValue": DoubleType(),
    "google.protobuf.FloatValue": FloatType(),
    "google.protobuf.Int64Value": LongType(),
    "google.protobuf.UInt64Value": LongType(),
    "google.protobuf.Int32Value": IntegerType(),
    "google.protobuf.UInt32Value": LongType(),
    "google.protobuf.BoolValue": BooleanType(),
    "google.protobuf.StringValue": StringType(),
    "google.protobuf.BytesValue": BinaryType(),
}


def protobuf_struct(text: str) -> StructType:
    """The columns of a registered Protobuf schema's first message."""
    try:
        message = table_message(text)
    except ValueError as exc:
        raise UnmappableSchema("", str(exc)) from None
    return _Mapper().struct(message, "")


class _Mapper:
    def __init__(self) -> None:
        self._open: set[str] = set()
        self._ids: Callable[[], int] = itertools.count(1).__next__

    def struct(self, message: Descriptor, path: str) -> StructType:
        if message.full_name in self._open:
            raise UnmappableSchema(
                path, f"message {message.full_name} contains itself; Iceberg types are not recursive"
            )
        self._open.add(message.full_name)
        try:
            fields = [self._field(f, _join(path, f.name)) for f in message.fields]
        finally:
            self._open.discard(message.full_name)
        return StructType(*fields)

    def _field(self, field: FieldDescriptor, path: str) -> NestedField:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = self._single(field.message_type.fields_by_name["key"], _join(path, "key"))
            value = self._single(field.message_type.fields_by_name["value"], _join(path, "value"))
            return NestedField(self._ids(), field.name, MapType(self._ids(), key, self._ids(), value, True), True)
        if field.is_repeated:
            element = self._single(field, _join(path, "element"))
            return NestedField(self._ids(), field.name, ListType(self._ids(), element, True), True)
        return NestedField(self._ids(), field.name, self._single(field, path), not field.has_presence)

    def _single(self, field: FieldDescriptor, path: str) -> IcebergType:
        if field.type in _SCALARS:
            return _SCALARS[field.type]
        message = field.message_type
        if field.type != F.TYPE_MESSAGE or message is None:
            raise UnmappableSchema(path, "a Protobuf group has no Iceberg type")
        name = message.full_name
        if name == TIMESTAMP:
            return TimestamptzType()
        if name in _WRAPPED:
            return _WRAPPED[name]
        if name.startswith("google.protobuf."):
            raise UnmappableSchema(path, f"{name} has no Iceberg type Floe maps it to")
        return self.struct(message, path)


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name
