"""Protobuf message classes built at run time from a field list, for the tests' producers.

Each call builds its own file in its own descriptor pool, so two versions of one message (same full name)
live side by side, as two producers' compiled classes would. A field is ``(name, type)`` where type is a
scalar name (``int64``, ``string``...), a well-known type (``google.protobuf.StringValue``...), ``repeated
T``, ``map<K,V>``, ``optional T`` or the name of another message of the file; ``oneofs`` groups fields.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2

F = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64, "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}


def message_classes(messages: dict[str, list[tuple[str, str]]], package: str = "shop",
                    oneofs: dict[str, dict[str, list[str]]] | None = None,
                    enums: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The classes of ``messages`` (the first is the file's first message), by name."""
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}_{id(messages)}.proto", package=package, syntax="proto3")
    file.dependency.extend(["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"])
    for name, symbols in (enums or {}).items():
        enum = file.enum_type.add(name=name)
        for number, symbol in enumerate(symbols):
            enum.value.add(name=symbol, number=number)
    for name, fields in messages.items():
        message = file.message_type.add(name=name)
        groups = (oneofs or {}).get(name, {})
        for group in groups:
            message.oneof_decl.add(name=group)
        for number, (field_name, kind) in enumerate(fields, start=1):
            _add_field(file, message, field_name, kind, number, package, groups, enums or {})
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}")) for name in messages}


def _add_field(file: Any, message: Any, name: str, kind: str, number: int, package: str,
               groups: dict[str, list[str]], enums: dict[str, list[str]]) -> None:
    label = F.LABEL_OPTIONAL
    proto3_optional = False
    if kind.startswith("repeated "):
        label, kind = F.LABEL_REPEATED, kind[len("repeated "):]
    elif kind.startswith("optional "):
        proto3_optional, kind = True, kind[len("optional "):]
    if kind.startswith("map<"):
        key, value = kind[4:-1].split(",")
        entry = message.nested_type.add(name=f"{name.title().replace('_', '')}Entry")
        entry.options.map_entry = True
        _typed(entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL), key.strip(), package, enums)
        _typed(entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL), value.strip(), package, enums)
        field = message.field.add(name=name, number=number, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                                  type_name=f".{package}.{message.name}.{entry.name}")
        return
    field = message.field.add(name=name, number=number, label=label)
    _typed(field, kind, package, enums)
    for index, (group, members) in enumerate(groups.items()):
        if name in members:
            field.oneof_index = index
    if proto3_optional:
        field.proto3_optional = True
        field.oneof_index = len(message.oneof_decl)
        message.oneof_decl.add(name=f"_{name}")


def _typed(field: Any, kind: str, package: str, enums: dict[str, list[str]]) -> None:
    if kind in SCALARS:
        field.type = SCALARS[kind]
    elif kind.startswith("google.protobuf."):
        field.type, field.type_name = F.TYPE_MESSAGE, f".{kind}"
    elif kind in enums:
        field.type, field.type_name = F.TYPE_ENUM, f".{package}.{kind}"
    else:
        field.type, field.type_name = F.TYPE_MESSAGE, f".{package}.{kind}"
