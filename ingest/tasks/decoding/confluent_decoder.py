"""Confluent-framed values: magic byte 0, the writer schema's id (4 bytes, big endian), then the value.

The registry says what each id is (``ingest.tasks.decoding.registry``): an Avro schema, whose datum follows
the header in Avro's binary encoding; a JSON Schema, whose value follows as JSON text; or a Protobuf file,
whose message follows its message indexes (``ingest.tasks.decoding.protobuf_decoder``). Each id's reader is
made once and cached.

Avro is read with fastavro's schema resolution into ``reader_schema`` when one is configured, else with its
own writer schema; either way ``ingest.tasks.mapping`` matches the fields to the table's columns by name.
"""

from __future__ import annotations

import json as json_module
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ingest.tasks.decoding.avro_decoder import ParsedSchema, parse_avro_schema, read_datum
from ingest.tasks.decoding.json_decoder import JsonDecoder
from ingest.tasks.decoding.protobuf_decoder import ProtobufReader
from ingest.tasks.decoding.registry import (
    RegisteredSchema,
    SchemaDirectory,
    SchemaRegistryClient,
    UnknownSchemaError,
    WriterSchemas,
)
from ingest.tasks.record_errors import DecodeError

MAGIC_BYTE = 0
HEADER_SIZE = 5
UNKNOWN_ID_RETRY_SECONDS = 30.0
"""How long an unknown schema id is remembered before the source is asked again."""

Reader = Callable[[bytes], Any]
"""Reads one framed value (header included) written with one schema id."""


@dataclass(frozen=True)
class ConfluentFormat:
    """Confluent-framed values; writer schemas from ``registry_url`` or ``schema_dir`` (Avro only).

    ``reader_schema`` (Avro JSON text) is what every Avro writer schema is
    resolved to; None reads each datum with its own writer schema. A table
    whose columns follow a registry ``subject`` takes the writer schemas
    ``schema_ids`` and refuses those in ``refused_ids`` (id, reason): their
    records, and those of any other id, are dead letters naming why.
    """

    reader_schema: str | None = None
    registry_url: str | None = None
    schema_dir: str | None = None
    registry_timeout: float = 10.0
    subject: str | None = None
    schema_ids: tuple[int, ...] = ()
    refused_ids: tuple[tuple[int, str], ...] = ()

    def __post_init__(self) -> None:
        # JSON (the job file) gives lists back
        object.__setattr__(self, "schema_ids", tuple(self.schema_ids))
        object.__setattr__(self, "refused_ids", tuple((int(i), str(r)) for i, r in self.refused_ids))
        if (self.registry_url is None) == (self.schema_dir is None):
            raise ValueError("Confluent framing needs exactly one of registry_url and schema_dir")
        if self.reader_schema is not None:
            parse_avro_schema(self.reader_schema, "reader schema")

    def writer_schemas(self) -> WriterSchemas:
        if self.registry_url is not None:
            return SchemaRegistryClient(self.registry_url, self.registry_timeout)
        assert self.schema_dir is not None
        return SchemaDirectory(self.schema_dir)


class ConfluentDecoder:
    """Decodes Confluent-framed values, caching each writer schema's reader by id.

    An unknown id is remembered for :data:`UNKNOWN_ID_RETRY_SECONDS`, so that a
    batch full of them costs one lookup, yet a schema registered later is found.
    """

    def __init__(
        self, fmt: ConfluentFormat, schemas: WriterSchemas | None = None, json: JsonDecoder | None = None
    ) -> None:
        self._schemas = schemas if schemas is not None else fmt.writer_schemas()
        self._reader = parse_avro_schema(fmt.reader_schema, "reader schema") if fmt.reader_schema else None
        self._readers: dict[int, Reader | DecodeError] = {
            schema_id: DecodeError(reason) for schema_id, reason in fmt.refused_ids
        }
        self._unknown: dict[int, tuple[float, UnknownSchemaError]] = {}
        self._taken = frozenset(fmt.schema_ids) if fmt.subject is not None else None
        self._subject = fmt.subject
        self._json = json or JsonDecoder()

    def decode(self, payload: bytes) -> Any:
        if len(payload) < HEADER_SIZE:
            raise DecodeError(f"not Confluent-framed: {len(payload)} bytes, the header alone is {HEADER_SIZE}")
        if payload[0] != MAGIC_BYTE:
            raise DecodeError(f"not Confluent-framed: magic byte is {payload[0]:#04x}, expected 0x00")
        return self.reader(int.from_bytes(payload[1:HEADER_SIZE], "big"))(payload)

    def reader(self, schema_id: int) -> Reader:
        """The reader of values written with ``schema_id``; raises the id's DecodeError."""
        cached = self._readers.get(schema_id)
        if cached is None and self._taken is not None and schema_id not in self._taken:
            cached = DecodeError(
                f"schema id {schema_id} is not a version of subject {self._subject}, whose versions the table's "
                "columns follow"
            )
        if cached is None:
            cached = self._load(schema_id)
        if isinstance(cached, DecodeError):
            raise cached
        return cached

    def _load(self, schema_id: int) -> Reader | DecodeError:
        remembered = self._unknown.get(schema_id)
        if remembered is not None and time.monotonic() - remembered[0] < UNKNOWN_ID_RETRY_SECONDS:
            return remembered[1]
        try:
            registered = self._schemas.schema(schema_id)
        except UnknownSchemaError as exc:
            self._unknown[schema_id] = (time.monotonic(), exc)
            return exc
        except DecodeError as exc:  # a kind Floe does not read: permanent for this id
            self._readers[schema_id] = exc
            return exc
        made: Reader | DecodeError
        try:
            made = self._reader_of(registered, schema_id)
        except ValueError as exc:
            made = DecodeError(str(exc))
        self._readers[schema_id] = made
        return made

    def _reader_of(self, registered: RegisteredSchema, schema_id: int) -> Reader:
        if registered.kind == "AVRO":
            writer: ParsedSchema = parse_avro_schema(registered.text, f"writer schema id {schema_id}")
            reader = self._reader
            return lambda payload: read_datum(payload, HEADER_SIZE, writer, reader)
        if registered.kind == "JSON":
            _check_json_schema(registered.text, schema_id)
            return lambda payload: self._json.decode(payload[HEADER_SIZE:])
        if registered.kind == "PROTOBUF":
            try:
                return ProtobufReader(registered.text, HEADER_SIZE)
            except ValueError as exc:
                raise ValueError(f"writer schema id {schema_id}: {exc}") from None
        raise ValueError(f"schema id {schema_id} is a {registered.kind} schema, which Floe does not read")


def _check_json_schema(text: str, schema_id: int) -> None:
    try:
        json_module.loads(text)
    except ValueError as exc:
        raise ValueError(f"writer schema id {schema_id} is not valid JSON Schema text: {exc}") from None
