"""Confluent-framed Protobuf values: after the 5-byte header, the message's indexes, then its bytes.

A Protobuf writer schema is a whole ``.proto`` file, kept by the registry; Floe asks for it serialized (a
base64 ``FileDescriptorProto``, what confluent-kafka's serializer registers). A table is made of the file's
first message, the one a record marks with the index list ``[0]``; a record of another message of the file
is a dead letter. The Protobuf well-known types a table maps (``google.protobuf`` Timestamp and the
wrappers) resolve from the runtime's own descriptors.

Values come out as ``ingest.tasks.mapping`` takes them: a field without presence has its default when unset
(proto3 has no null for it), a field with presence (a message, ``optional``, a ``oneof`` member) is None when
unset, an enum is its value's name, a Timestamp an aware datetime, a wrapper its value.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2, wrappers_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message

from ingest.tasks.record_errors import DecodeError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = frozenset(
    f"google.protobuf.{name}"
    for name in (
        "DoubleValue",
        "FloatValue",
        "Int64Value",
        "UInt64Value",
        "Int32Value",
        "UInt32Value",
        "BoolValue",
        "StringValue",
        "BytesValue",
    )
)
_KNOWN_FILES = (timestamp_pb2.DESCRIPTOR, wrappers_pb2.DESCRIPTOR)


def file_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` of a registered Protobuf schema (base64); ValueError when it is not one."""
    try:
        proto = descriptor_pb2.FileDescriptorProto()
        proto.ParseFromString(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, UnicodeEncodeError, ProtobufDecodeError) as exc:
        raise ValueError(f"not a serialized Protobuf file descriptor: {exc}") from None
    if not proto.message_type:
        raise ValueError("the Protobuf schema declares no message")
    return proto


def table_message(text: str) -> Descriptor:
    """The descriptor of the schema's first message: the one a table is made of."""
    proto = file_descriptor(text)
    pool = descriptor_pool.DescriptorPool()
    for known in _KNOWN_FILES:
        pool.AddSerializedFile(known.serialized_pb)
    unknown = [d for d in proto.dependency if d not in {k.name for k in _KNOWN_FILES}]
    if unknown:
        raise ValueError(f"the Protobuf schema imports {', '.join(unknown)}, which Floe does not resolve yet")
    try:
        pool.Add(proto)
        prefix = f"{proto.package}." if proto.package else ""
        return pool.FindMessageTypeByName(prefix + proto.message_type[0].name)
    except (TypeError, KeyError) as exc:
        raise ValueError(f"the Protobuf schema does not build: {exc}") from None


class ProtobufReader:
    """Reads framed values of one Protobuf writer schema into dicts."""

    def __init__(self, text: str, header_size: int) -> None:
        self._message = message_factory.GetMessageClass(table_message(text))
        self._start = header_size

    def __call__(self, payload: bytes) -> dict[str, Any]:
        indexes, start = _message_indexes(payload, self._start)
        if indexes != [0]:
            raise DecodeError(f"a record of message {indexes} of its schema's file; the table is made of message [0]")
        message = self._message()
        try:
            message.ParseFromString(payload[start:])
        except ProtobufDecodeError as exc:
            raise DecodeError(f"invalid Protobuf: {exc}") from None
        return _as_dict(message)


def _message_indexes(payload: bytes, start: int) -> tuple[list[int], int]:
    """The zigzag varint list after the header (a lone 0 byte is ``[0]``), and where the message begins."""
    count, at = _zigzag(payload, start)
    if count == 0:
        return [0], at
    indexes = []
    for _ in range(count):
        index, at = _zigzag(payload, at)
        indexes.append(index)
    return indexes, at


def _zigzag(payload: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(payload) or shift > 63:
            raise DecodeError("invalid Protobuf framing: the message indexes end early")
        byte = payload[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


def _as_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _field_value(field, getattr(message, field.name))
    return out


def _field_value(field: Any, value: Any) -> Any:  # a FieldDescriptor (upb's or the Python one)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {k: _single(value_field, v) for k, v in value.items()}
    if field.is_repeated:
        return [_single(field, v) for v in value]
    return _single(field, value)


def _single(field: FieldDescriptor, value: Any) -> Any:
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.message_type is None:
        return value
    name = field.message_type.full_name
    if name == TIMESTAMP:
        return EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
    if name in WRAPPERS:
        return value.value
    return _as_dict(value)
