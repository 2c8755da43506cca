"""Avro for Iceberg (spec Appendix A): Iceberg types as Avro schemas, and the
raw reading and writing of Avro container files.

Manifests and manifest lists are Avro files whose schemas carry Iceberg field
ids; :mod:`table.manifest` models their content and uses this module for the
Avro itself. Values are read as stored, without Avro logical types, so that
they keep the Python representation of docs/table-api.md.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import BufferedReader, BytesIO, RawIOBase
from typing import Any, cast

import fastavro

from table.errors import MalformedFileError, ValidationError
from table.io import FileIO, FileIOError
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

# --------------------------------------------------------------------------
# Iceberg type -> Avro schema (Appendix A), named as Iceberg Java names them
# --------------------------------------------------------------------------


def avro_schema(struct: StructType, record_name: str) -> dict[str, Any]:
    """The Avro schema of ``struct``, with field ids where Appendix A puts them."""
    return _AvroSchemaBuilder().record(struct, record_name)


class _AvroSchemaBuilder:
    """Converts types, defining each Avro named type once and referencing it after."""

    def __init__(self) -> None:
        self._defined: set[str] = set()

    def _named(self, name: str, schema: dict[str, Any]) -> Any:
        """The full definition the first time, the bare name afterwards."""
        if name in self._defined:
            return name
        self._defined.add(name)
        return {**schema, "name": name}

    def record(self, struct: StructType, name: str) -> Any:
        fields = [self.field(f) for f in struct.fields]
        return self._named(name, {"type": "record", "fields": fields})

    def field(self, field: NestedField) -> dict[str, Any]:
        name = avro_name(field.name)
        schema = _avro_field(name, self.of(field.field_type, field.field_id), field)
        if name != field.name:
            schema["iceberg-field-name"] = field.name
        return schema

    def of(self, t: IcebergType, field_id: int) -> Any:
        if isinstance(t, StructType):
            return self.record(t, f"r{field_id}")
        if isinstance(t, ListType):
            item = self.of(t.element_type, t.element_id)
            items = item if t.element_required else ["null", item]
            return {"type": "array", "items": items, "element-id": t.element_id}
        if isinstance(t, MapType):
            return self.map(t)
        return self.primitive(t)

    def map(self, t: MapType) -> dict[str, Any]:
        """Maps are arrays of key/value records, as Java writes non-string keys."""
        key = _avro_field("key", self.of(t.key_type, t.key_id), t.key_field)
        value = _avro_field("value", self.of(t.value_type, t.value_id), t.value_field)
        items = self._named(f"k{t.key_id}_v{t.value_id}", {"type": "record", "fields": [key, value]})
        return {"type": "array", "logicalType": "map", "items": items}

    def primitive(self, t: IcebergType) -> Any:
        if isinstance(t, DecimalType):
            return self._named(
                f"decimal_{t.precision}_{t.scale}",
                {
                    "type": "fixed",
                    "size": decimal_required_bytes(t.precision),
                    "logicalType": "decimal",
                    "precision": t.precision,
                    "scale": t.scale,
                },
            )
        if isinstance(t, UUIDType):
            return self._named("uuid_fixed", {"type": "fixed", "size": 16, "logicalType": "uuid"})
        if isinstance(t, FixedType):
            return self._named(f"fixed_{t.length}", {"type": "fixed", "size": t.length})
        if type(t) in _AVRO_PRIMITIVES:
            avro_type = _AVRO_PRIMITIVES[type(t)]
            return dict(avro_type) if isinstance(avro_type, dict) else avro_type
        raise ValidationError(f"type {t} cannot be stored in an Avro manifest")


def _avro_field(avro_name: str, avro_type: Any, field: NestedField) -> dict[str, Any]:
    """A record field; optional ones are unions with null that default to null."""
    if field.required:
        return {"name": avro_name, "type": avro_type, "field-id": field.field_id}
    return {"name": avro_name, "type": ["null", avro_type], "default": None, "field-id": field.field_id}


_AVRO_PRIMITIVES: dict[type, Any] = {
    BooleanType: "boolean",
    IntegerType: "int",
    LongType: "long",
    FloatType: "float",
    DoubleType: "double",
    StringType: "string",
    BinaryType: "bytes",
    DateType: {"type": "int", "logicalType": "date"},
    TimeType: {"type": "long", "logicalType": "time-micros"},
    TimestampType: {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False},
    TimestamptzType: {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
}


def decimal_required_bytes(precision: int) -> int:
    """Fewest bytes whose two's complement holds every ``precision``-digit number."""
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


def avro_name(name: str) -> str:
    """Iceberg Java's renaming of names Avro forbids; valid names are unchanged.

    Like Java, letters are Unicode letters; a leading digit gets a "_" before
    it and any other character becomes "_x" and its hex code.
    """
    out = []
    for i, ch in enumerate(name):
        if ch.isalpha() or ch == "_" or (i > 0 and ch.isdecimal()):
            out.append(ch)
        elif ch.isdecimal():
            out.append("_" + ch)
        else:
            out.append(f"_x{ord(ch):X}")
    return "".join(out)


# --------------------------------------------------------------------------
# Avro container files
# --------------------------------------------------------------------------


def write_avro(
    io: FileIO,
    path: str,
    schema: dict[str, Any],
    records: Iterable[dict[str, Any]],
    metadata: dict[str, str],
    codec: str,
) -> int:
    """Stream ``records`` into a new Avro file and return its length."""
    parsed = fastavro.parse_schema(schema)
    with io.open_output(path) as out:
        try:
            fastavro.writer(out, parsed, records, codec=codec, metadata=metadata)
        except (ValueError, TypeError, OverflowError, AttributeError) as e:
            raise ValidationError(f"cannot write {path}: {e}") from e
        except OSError as e:
            raise FileIOError(path, "write", str(e)) from e
        return int(out.tell())


_MAGIC = b"Obj\x01"
# The Avro container header after its magic bytes.
_HEADER_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "header",
        "fields": [
            {"name": "meta", "type": {"type": "map", "values": "bytes"}},
            {"name": "sync", "type": {"type": "fixed", "name": "sync", "size": 16}},
        ],
    }
)


@dataclass(frozen=True)
class AvroFile:
    """An open Avro file: its key-value metadata, writer schema and records."""

    metadata: dict[str, str]
    schema: dict[str, Any]
    records: Iterator[dict[str, Any]]


@contextmanager
def open_avro(io: FileIO, path: str) -> Iterator[AvroFile]:
    """Stream an Avro file's records as stored, without logical-type conversion.

    fastavro would turn dates and timestamps into ``datetime`` objects, which
    cannot hold every Iceberg value and are not the representation of
    docs/table-api.md, so the reader is given a header whose schema has no
    logical types. Parse and IO errors name the file.
    """
    with io.open_input(path) as f, _read_errors(path):
        if f.read(len(_MAGIC)) != _MAGIC:
            raise MalformedFileError(path, None, "not an Avro object container file")
        header = cast(dict[str, Any], fastavro.schemaless_reader(f, _HEADER_SCHEMA))
        metadata = {k: v.decode("utf-8") for k, v in header["meta"].items()}
        schema = json.loads(metadata["avro.schema"])
        raw_header = BytesIO(_MAGIC)
        raw_header.seek(len(_MAGIC))
        meta = {**header["meta"], "avro.schema": json.dumps(_without_logical_types(schema)).encode()}
        fastavro.schemaless_writer(raw_header, _HEADER_SCHEMA, {**header, "meta": meta})
        stream = BufferedReader(_Prefixed(raw_header.getvalue(), f), 1 << 16)
        # A container file's records are records of its schema; fastavro types them as any Avro value.
        yield AvroFile(metadata, schema, cast(Iterator[dict[str, Any]], fastavro.reader(stream)))


@contextmanager
def _read_errors(path: str) -> Iterator[None]:
    try:
        yield
    except (ValueError, EOFError, zlib.error, OverflowError, KeyError, TypeError, SystemError) as e:
        # SystemError: fastavro's C reader on a corrupt length prefix.
        raise MalformedFileError(path, None, f"cannot read Avro data: {e!r}") from e
    except OSError as e:
        raise FileIOError(path, "read", str(e)) from e


def _without_logical_types(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        return {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    return schema


class _Prefixed(RawIOBase):
    """``prefix`` followed by the rest of ``source``: a file with a rewritten header."""

    def __init__(self, prefix: bytes, source: Any) -> None:
        self._prefix = memoryview(prefix)
        self._source = source

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if len(self._prefix):
            n = min(len(buffer), len(self._prefix))
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._source.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def record_field_type(record: dict[str, Any], name: str) -> dict[str, Any]:
    """The (non-null) record type of field ``name`` of an Avro record schema."""
    field = next(f for f in record["fields"] if f["name"] == name)
    t = field["type"]
    if isinstance(t, list):
        t = next(b for b in t if b != "null")
    if not isinstance(t, dict):
        raise TypeError(f"{name} is not a record")
    return t
