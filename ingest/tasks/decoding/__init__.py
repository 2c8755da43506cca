"""Kafka value decoders: message bytes -> Python values for ``ingest.tasks.mapping``.

A format is a small frozen dataclass (:class:`JsonFormat`, :class:`AvroFormat`,
:class:`ConfluentFormat`) that ships to executors inside the decode spec;
:func:`decoder_for` builds its decoder there, once per process. A decoder's
``decode(payload)`` returns one record (a dict) or raises ``DecodeError``,
and the record goes to the dead letters; any other exception (an unreachable
schema registry) fails the batch.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias

from ingest.tasks.decoding.avro_decoder import AvroDecoder, AvroFormat
from ingest.tasks.decoding.confluent_decoder import ConfluentDecoder, ConfluentFormat
from ingest.tasks.decoding.json_decoder import JsonDecoder, JsonFormat
from ingest.tasks.decoding.registry import (
    RegisteredSchema,
    RegistryUnavailableError,
    SchemaDirectory,
    SchemaRegistryClient,
    UnknownSchemaError,
    WriterSchemas,
)
from table.schema import Schema
from table.types import DecimalType, IcebergType, NestedType

Format: TypeAlias = JsonFormat | AvroFormat | ConfluentFormat


class Decoder(Protocol):
    def decode(self, payload: bytes) -> Any:
        """One message value as a Python value; raises DecodeError for bad bytes."""
        ...


def decoder_for(fmt: Format, schema: Schema) -> Decoder:
    """The decoder of ``fmt`` for a table of ``schema``."""
    if isinstance(fmt, JsonFormat):
        return JsonDecoder(exact_decimals=_has_decimals(schema.as_struct()))
    if isinstance(fmt, AvroFormat):
        return AvroDecoder(fmt)
    if isinstance(fmt, ConfluentFormat):
        return ConfluentDecoder(fmt, json=JsonDecoder(exact_decimals=_has_decimals(schema.as_struct())))
    raise TypeError(f"unknown value format {fmt!r}")


def _has_decimals(t: IcebergType) -> bool:
    if isinstance(t, DecimalType):
        return True
    return isinstance(t, NestedType) and any(_has_decimals(f.field_type) for f in t.fields)


__all__ = [
    "AvroDecoder",
    "AvroFormat",
    "ConfluentDecoder",
    "ConfluentFormat",
    "Decoder",
    "Format",
    "JsonDecoder",
    "JsonFormat",
    "RegisteredSchema",
    "RegistryUnavailableError",
    "SchemaDirectory",
    "SchemaRegistryClient",
    "UnknownSchemaError",
    "WriterSchemas",
    "decoder_for",
]
