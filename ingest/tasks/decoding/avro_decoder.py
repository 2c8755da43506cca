"""Avro values: plain (one known writer schema) and Confluent-framed (schema id per message).

A plain Avro value is the binary encoding of one datum, without a container
file header, written with a schema configured up front. A Confluent-framed
value starts with magic byte 0 and the writer schema's id (4 bytes, big
endian), then the datum; the writer schema comes from a schema registry or a
local directory (``ingest.tasks.decoding.registry``) and is parsed once per id.

Either way the datum is read with fastavro's schema resolution into the
configured reader schema (usually the one the table was made from), so that
producers may evolve their schema compatibly without Floe noticing. Logical
types come back as Python values (``Decimal``, ``datetime``, ``date``,
``uuid.UUID``...), which ``ingest.tasks.mapping`` accepts.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from ingest.tasks.decoding.registry import SchemaDirectory, SchemaRegistryClient, UnknownSchemaError, WriterSchemas
from ingest.tasks.record_errors import DecodeError

MAGIC_BYTE = 0
HEADER_SIZE = 5
UNKNOWN_ID_RETRY_SECONDS = 30.0
"""How long an unknown schema id is remembered before the source is asked again."""

ParsedSchema = Any  # fastavro's parsed schema: a dict (or list for unions) it annotates


def parse_avro_schema(text: str, what: str = "Avro schema") -> ParsedSchema:
    """Parse Avro schema JSON text; ValueError names ``what`` when it is invalid."""
    try:
        return fastavro.parse_schema(json.loads(text))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ValueError(f"{what} is not a valid Avro schema: {exc}") from exc


def read_datum(payload: bytes, start: int, writer: ParsedSchema, reader: ParsedSchema | None) -> Any:
    """The one datum encoded in ``payload[start:]``, resolved to ``reader`` when given.

    fastavro reports corrupt input with many exception types (EOFError,
    IndexError, ValueError, its SchemaResolutionError...); each means that this
    message cannot be read, so each becomes a DecodeError carrying its class
    and message. Bytes left over after the datum mean a wrong writer schema.
    """
    stream = io.BytesIO(payload)
    stream.seek(start)
    try:
        datum = fastavro.schemaless_reader(stream, writer, reader)
    except Exception as exc:
        raise DecodeError(f"invalid Avro: {type(exc).__name__}: {_shortened(str(exc))}") from exc
    left = len(payload) - stream.tell()
    if left:
        raise DecodeError(f"invalid Avro: {left} bytes left after the datum (wrong writer schema?)")
    return datum


def _shortened(text: str, limit: int = 280) -> str:
    # fastavro's resolution errors print both schemas whole; a dead letter's header should not.
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------
# Plain Avro
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AvroFormat:
    """Plain Avro values written with ``writer_schema`` (default: the reader schema).

    Schemas are held as JSON text, read on the driver (:meth:`from_files`), so
    that the format ships to executors without any file.
    """

    reader_schema: str
    writer_schema: str | None = None

    def __post_init__(self) -> None:
        parse_avro_schema(self.reader_schema, "reader schema")
        if self.writer_schema is not None:
            parse_avro_schema(self.writer_schema, "writer schema")

    @classmethod
    def from_files(cls, reader_schema_path: str, writer_schema_path: str | None = None) -> AvroFormat:
        writer = Path(writer_schema_path).read_text(encoding="utf-8") if writer_schema_path else None
        return cls(Path(reader_schema_path).read_text(encoding="utf-8"), writer)


class AvroDecoder:
    """Decodes plain Avro values."""

    def __init__(self, fmt: AvroFormat) -> None:
        self._reader = parse_avro_schema(fmt.reader_schema, "reader schema")
        self._writer = parse_avro_schema(fmt.writer_schema, "writer schema") if fmt.writer_schema else self._reader
        if self._writer is self._reader:
            self._reader = None  # no resolution needed

    def decode(self, payload: bytes) -> Any:
        return read_datum(payload, 0, self._writer, self._reader)


# ---------------------------------------------------------------------------
# Confluent-framed Avro
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfluentAvroFormat:
    """Confluent-framed Avro; writer schemas from ``registry_url`` or ``schema_dir``.

    ``reader_schema`` (JSON text) is what every writer schema is resolved to;
    None reads each datum with its own writer schema. A table whose columns
    follow a registry ``subject`` takes the writer schemas ``schema_ids`` and
    refuses those in ``refused_ids`` (id, reason): their records, and those of
    any other id, are dead letters naming why.
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
            raise ValueError("Confluent Avro needs exactly one of registry_url and schema_dir")
        if self.reader_schema is not None:
            parse_avro_schema(self.reader_schema, "reader schema")

    def writer_schemas(self) -> WriterSchemas:
        if self.registry_url is not None:
            return SchemaRegistryClient(self.registry_url, self.registry_timeout)
        assert self.schema_dir is not None
        return SchemaDirectory(self.schema_dir)


class ConfluentAvroDecoder:
    """Decodes Confluent-framed Avro, caching each writer schema by id.

    An unknown id is remembered for :data:`UNKNOWN_ID_RETRY_SECONDS`, so that a
    batch full of them costs one lookup, yet a schema registered later is found.
    """

    def __init__(self, fmt: ConfluentAvroFormat, schemas: WriterSchemas | None = None) -> None:
        self._schemas = schemas if schemas is not None else fmt.writer_schemas()
        self._reader = parse_avro_schema(fmt.reader_schema, "reader schema") if fmt.reader_schema else None
        self._writers: dict[int, ParsedSchema | DecodeError] = {
            schema_id: DecodeError(reason) for schema_id, reason in fmt.refused_ids
        }
        self._unknown: dict[int, tuple[float, UnknownSchemaError]] = {}
        self._taken = frozenset(fmt.schema_ids) if fmt.subject is not None else None
        self._subject = fmt.subject

    def decode(self, payload: bytes) -> Any:
        if len(payload) < HEADER_SIZE:
            raise DecodeError(f"not Confluent-framed Avro: {len(payload)} bytes, the header alone is {HEADER_SIZE}")
        if payload[0] != MAGIC_BYTE:
            raise DecodeError(f"not Confluent-framed Avro: magic byte is {payload[0]:#04x}, expected 0x00")
        writer = self.writer_schema(int.from_bytes(payload[1:HEADER_SIZE], "big"))
        return read_datum(payload, HEADER_SIZE, writer, self._reader)

    def writer_schema(self, schema_id: int) -> ParsedSchema:
        """The parsed writer schema of ``schema_id``; raises the id's DecodeError."""
        cached = self._writers.get(schema_id)
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

    def _load(self, schema_id: int) -> ParsedSchema | DecodeError:
        remembered = self._unknown.get(schema_id)
        if remembered is not None and time.monotonic() - remembered[0] < UNKNOWN_ID_RETRY_SECONDS:
            return remembered[1]
        try:
            text = self._schemas.schema_text(schema_id)
        except UnknownSchemaError as exc:
            self._unknown[schema_id] = (time.monotonic(), exc)
            return exc
        except DecodeError as exc:  # e.g. a Protobuf schema: permanent for this id
            self._writers[schema_id] = exc
            return exc
        try:
            parsed: ParsedSchema | DecodeError = parse_avro_schema(text, f"writer schema id {schema_id}")
        except ValueError as exc:
            parsed = DecodeError(str(exc))
        self._writers[schema_id] = parsed
        return parsed
