"""Plain Avro values (one known writer schema), and what Confluent-framed Avro shares with them.

A plain Avro value is the binary encoding of one datum, without a container
file header, written with a schema configured up front. Confluent-framed
values (a schema id per message) are :mod:`ingest.tasks.decoding.confluent_decoder`.

Either way the datum is read with fastavro's schema resolution into the
configured reader schema (usually the one the table was made from), so that
producers may evolve their schema compatibly without Floe noticing. Logical
types come back as Python values (``Decimal``, ``datetime``, ``date``,
``uuid.UUID``...), which ``ingest.tasks.mapping`` accepts.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from ingest.tasks.record_errors import DecodeError

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
