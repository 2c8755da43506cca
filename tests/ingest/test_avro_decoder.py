"""ingest.tasks.decoding.avro_decoder and registry: plain and Confluent-framed Avro.

The schema registry is a real HTTP server on 127.0.0.1 serving
``GET /schemas/ids/<id>`` the way Confluent's does.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import pickle
import socket
import struct
import threading
import uuid
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, Optional

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.tasks.decode_records import DecodeSpec, decode_records
from ingest.tasks.decoding import (
    AvroDecoder,
    AvroFormat,
    ConfluentDecoder,
    ConfluentFormat,
    RegistryUnavailableError,
    SchemaRegistryClient,
    UnknownSchemaError,
)
from ingest.tasks.mapping import map_rows
from ingest.tasks.record_errors import DecodeError
from table.schema import Schema
from table.types import (
    DateType,
    DecimalType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
    UUIDType,
)

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
V2 = {  # adds a field with a default: readers of V2 can read V1 data
    **V1,
    "fields": V1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}],
}
READER = V2
INCOMPATIBLE = {**V1, "fields": [{"name": "id", "type": "string"}, {"name": "item", "type": "string"}]}


def avro(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def framed(schema_id: int, schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + avro(schema, datum)


# ---------------------------------------------------------------------------
# A real schema registry over HTTP
# ---------------------------------------------------------------------------


class Registry:
    """A minimal Confluent-compatible registry: ``schemas[id]`` is the answer body."""

    def __init__(self) -> None:
        self.schemas: dict[int, dict[str, Any]] = {}
        self.hits: list[str] = []
        self.status: Optional[int] = None  # force this HTTP status for every request
        self.auth: Optional[str] = None  # required Authorization header
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                registry.hits.append(self.path)
                status, body = registry.answer(self.path, self.headers.get("Authorization"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def answer(self, path: str, auth: Optional[str]) -> tuple[int, dict[str, Any]]:
        if self.status is not None:
            return self.status, {"error_code": self.status * 100, "message": "forced"}
        if self.auth is not None and auth != self.auth:
            return 401, {"error_code": 401, "message": "Unauthorized"}
        prefix, path = "/schemas/ids/", path.partition("?")[0]
        schema_id = int(path[len(prefix):]) if path.startswith(prefix) else -1
        if schema_id not in self.schemas:
            return 404, {"error_code": 40403, "message": "Schema not found"}
        return 200, self.schemas[schema_id]

    def add(self, schema_id: int, schema: dict[str, Any]) -> None:
        self.schemas[schema_id] = {"schema": json.dumps(schema)}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry() -> Iterator[Registry]:
    server = Registry()
    server.add(1, V1)
    server.add(2, V2)
    yield server
    server.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Plain Avro
# ---------------------------------------------------------------------------


def test_plain_avro_with_logical_types_lands_in_the_table() -> None:
    schema = {
        "type": "record",
        "name": "E",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        ],
    }
    ref = uuid.UUID(int=7)
    at = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)
    datum = {"id": 1, "price": Decimal("12.30"), "at": at, "day": dt.date(2024, 1, 2), "ref": ref, "kind": "B"}
    decoded = AvroDecoder(AvroFormat(json.dumps(schema))).decode(avro(schema, datum))
    table = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "price", DecimalType(9, 2)),
        NestedField(3, "at", TimestamptzType()),
        NestedField(4, "day", DateType()),
        NestedField(5, "ref", UUIDType()),
        NestedField(6, "kind", StringType()),
    )
    mapped = map_rows([decoded], table)
    assert mapped.errors == {}
    row = mapped.batch.to_pylist()[0]
    assert row["price"] == Decimal("12.30") and row["ref"] == ref and row["kind"] == "B"
    assert row["at"] == at and row["day"] == dt.date(2024, 1, 2)


def test_plain_avro_resolves_an_older_writer_schema() -> None:
    fmt = AvroFormat(reader_schema=json.dumps(READER), writer_schema=json.dumps(V1))
    assert AvroDecoder(fmt).decode(avro(V1, {"id": 3, "item": "pen"})) == {"id": 3, "item": "pen", "note": None}


def test_plain_avro_from_files(tmp_path: Path) -> None:
    (tmp_path / "reader.avsc").write_text(json.dumps(READER))
    (tmp_path / "writer.avsc").write_text(json.dumps(V1))
    fmt = AvroFormat.from_files(str(tmp_path / "reader.avsc"), str(tmp_path / "writer.avsc"))
    assert AvroDecoder(fmt).decode(avro(V1, {"id": 1, "item": "x"}))["note"] is None
    assert pickle.loads(pickle.dumps(fmt)) == fmt


@pytest.mark.parametrize(
    "payload, reason",
    [
        (avro(V1, {"id": 1, "item": "pen"}) + b"\x00\x01", "invalid Avro: 2 bytes left after the datum"),
        (avro(V1, {"id": 1, "item": "pen"})[:-2], "invalid Avro: EOFError"),
        (b"", "invalid Avro: EOFError"),
        (b"\x02\x0a\xff\xfe\xfd\xfc\xfb", "invalid Avro: UnicodeDecodeError"),
        (b"\x02\x05abc", "invalid Avro: EOFError"),
    ],
)
def test_bad_plain_avro_raises_decode_errors(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        AvroDecoder(AvroFormat(json.dumps(V1))).decode(payload)
    assert info.value.reason.startswith(reason)


def test_an_invalid_reader_schema_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="reader schema is not a valid Avro schema"):
        AvroFormat('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}')
    with pytest.raises(ValueError, match="reader schema is not a valid Avro schema"):
        AvroFormat("not json")


record_schema = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "a", "type": "long"},
        {"name": "b", "type": ["null", "string"]},
        {"name": "c", "type": {"type": "array", "items": "double"}},
        {"name": "d", "type": {"type": "map", "values": "boolean"}},
        {"name": "e", "type": "bytes"},
    ],
}
records = st.fixed_dictionaries(
    {
        "a": st.integers(-(2**63), 2**63 - 1),
        "b": st.none() | st.text(),
        "c": st.lists(st.floats(allow_nan=False)),
        "d": st.dictionaries(st.text(max_size=4), st.booleans(), max_size=3),
        "e": st.binary(),
    }
)


@settings(max_examples=100, deadline=None)
@given(records)
def test_any_record_round_trips(record: dict[str, Any]) -> None:
    decoder = AvroDecoder(AvroFormat(json.dumps(record_schema)))
    assert decoder.decode(avro(record_schema, record)) == record


# ---------------------------------------------------------------------------
# Confluent framing with a schema registry
# ---------------------------------------------------------------------------


def test_confluent_avro_resolves_each_writer_version_and_caches_by_id(registry: Registry) -> None:
    decoder = ConfluentDecoder(ConfluentFormat(json.dumps(READER), registry_url=registry.url))
    old = framed(1, V1, {"id": 1, "item": "pen"})
    new = framed(2, V2, {"id": 2, "item": "ink", "note": "blue"})
    for _ in range(3):
        assert decoder.decode(old) == {"id": 1, "item": "pen", "note": None}
        assert decoder.decode(new) == {"id": 2, "item": "ink", "note": "blue"}
    assert sorted(registry.hits) == ["/schemas/ids/1", "/schemas/ids/2"]


def test_without_a_reader_schema_each_datum_keeps_its_writer_schema(registry: Registry) -> None:
    decoder = ConfluentDecoder(ConfluentFormat(registry_url=registry.url))
    assert decoder.decode(framed(1, V1, {"id": 1, "item": "pen"})) == {"id": 1, "item": "pen"}


def test_a_table_following_a_subject_refuses_the_ids_it_cannot_take_and_ids_of_other_subjects(
    registry: Registry,
) -> None:
    fmt = ConfluentFormat(registry_url=registry.url, subject="orders-value", schema_ids=[1], refused_ids=[[2, "why"]])
    assert (fmt.schema_ids, fmt.refused_ids) == ((1,), ((2, "why"),)), "as read back from the job's JSON"
    decoder = ConfluentDecoder(fmt)
    assert decoder.decode(framed(1, V1, {"id": 1, "item": "pen"})) == {"id": 1, "item": "pen"}
    with pytest.raises(DecodeError, match="^why$"):
        decoder.decode(framed(2, V2, {"id": 2, "item": "ink", "note": "blue"}))
    with pytest.raises(DecodeError, match="schema id 3 is not a version of subject orders-value"):
        decoder.decode(framed(3, V1, {"id": 1, "item": "pen"}))
    assert registry.hits == ["/schemas/ids/1"], "neither a refused id nor another subject's is looked up"


def test_unknown_schema_id_names_the_id_and_is_looked_up_once(registry: Registry) -> None:
    decoder = ConfluentDecoder(ConfluentFormat(json.dumps(READER), registry_url=registry.url))
    for _ in range(3):
        with pytest.raises(UnknownSchemaError) as info:
            decoder.decode(framed(99, V1, {"id": 1, "item": "pen"}))
        assert info.value.schema_id == 99
        assert info.value.reason == f"unknown schema id 99 (not in schema registry {registry.url})"
    assert registry.hits == ["/schemas/ids/99"]


def test_unknown_schema_id_becomes_a_dead_letter(registry: Registry) -> None:
    table = Schema(NestedField(1, "id", LongType()), NestedField(2, "item", StringType()), NestedField(3, "note", StringType()))
    spec = DecodeSpec(table, format=ConfluentFormat(json.dumps(READER), registry_url=registry.url))
    values = [framed(1, V1, {"id": 1, "item": "pen"}), framed(42, V1, {"id": 2, "item": "x"}), b"\x01\x00\x00\x00\x01"]
    out = decode_records(kafka_batch(values), spec)
    assert out.rows.select(["id", "item", "note"]).to_pylist() == [{"id": 1, "item": "pen", "note": None}]
    letters = out.dead_letters.to_pylist()
    assert [(d["source_offset"], d["error_class"]) for d in letters] == [(1, "UnknownSchemaError"), (2, "DecodeError")]
    assert "unknown schema id 42" in letters[0]["error_message"]
    assert letters[0]["value"] == values[1]
    assert "magic byte is 0x01" in letters[1]["error_message"]


@pytest.mark.parametrize("status", [500, 503, 401])
def test_a_failing_registry_fails_the_batch_instead_of_dead_lettering(registry: Registry, status: int) -> None:
    registry.status = status
    table = Schema(NestedField(1, "id", LongType()))
    spec = DecodeSpec(table, format=ConfluentFormat(json.dumps(READER), registry_url=registry.url))
    with pytest.raises(RegistryUnavailableError, match=f"HTTP {status} for schema id 1"):
        decode_records(kafka_batch([framed(1, V1, {"id": 1, "item": "pen"})]), spec)


def test_an_unreachable_registry_fails_the_batch() -> None:
    client = SchemaRegistryClient(f"http://127.0.0.1:{free_port()}", timeout=2.0)
    decoder = ConfluentDecoder(ConfluentFormat(registry_url=client.url), client)
    with pytest.raises(RegistryUnavailableError, match="failed for schema id 1"):
        decoder.decode(framed(1, V1, {"id": 1, "item": "pen"}))


def test_credentials_in_the_url_are_sent_as_basic_auth(registry: Registry) -> None:
    registry.auth = "Basic " + base64.b64encode(b"floe:s3cr:t").decode()
    port = registry.url.rsplit(":", 1)[1]
    client = SchemaRegistryClient(f"http://floe:s3cr%3At@127.0.0.1:{port}/")
    assert client.url == f"http://127.0.0.1:{port}"
    assert json.loads(client.schema(1).text) == V1
    with pytest.raises(RegistryUnavailableError, match="HTTP 401"):
        SchemaRegistryClient(registry.url).schema(1)


def test_a_schema_floe_cannot_read_is_a_record_error(registry: Registry) -> None:
    registry.schemas[5] = {"schema": "syntax = 'proto3';", "schemaType": "PROTOBUF"}
    decoder = ConfluentDecoder(ConfluentFormat(registry_url=registry.url))
    with pytest.raises(DecodeError, match="writer schema id 5: not a serialized Protobuf file descriptor"):
        decoder.decode(framed(5, V1, {"id": 1, "item": "pen"}))


def test_an_incompatible_writer_schema_is_a_record_error(registry: Registry) -> None:
    registry.add(3, INCOMPATIBLE)
    decoder = ConfluentDecoder(ConfluentFormat(json.dumps(READER), registry_url=registry.url))
    with pytest.raises(DecodeError, match="invalid Avro: SchemaResolutionError") as info:
        decoder.decode(framed(3, INCOMPATIBLE, {"id": "x", "item": "pen"}))
    assert len(info.value.reason) <= 320  # fastavro prints whole schemas; dead-letter headers stay small


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"\x00\x00\x01", "not Confluent-framed: 3 bytes, the header alone is 5"),
        (b'{"id": 1}', "not Confluent-framed: magic byte is 0x7b, expected 0x00"),
    ],
)
def test_bad_framing(registry: Registry, payload: bytes, reason: str) -> None:
    decoder = ConfluentDecoder(ConfluentFormat(registry_url=registry.url))
    with pytest.raises(DecodeError) as info:
        decoder.decode(payload)
    assert info.value.reason == reason
    assert registry.hits == []


# ---------------------------------------------------------------------------
# Confluent framing with a local schema directory
# ---------------------------------------------------------------------------


def test_schema_directory(tmp_path: Path) -> None:
    (tmp_path / "1.avsc").write_text(json.dumps(V1))
    (tmp_path / "7.avsc").write_text('{"type": "record", "name": "Broken", "fields": [{"name": "a"}]}')
    fmt = ConfluentFormat(json.dumps(READER), schema_dir=str(tmp_path))
    decoder = ConfluentDecoder(fmt)
    assert decoder.decode(framed(1, V1, {"id": 1, "item": "pen"})) == {"id": 1, "item": "pen", "note": None}
    with pytest.raises(UnknownSchemaError) as info:
        decoder.decode(framed(2, V2, {"id": 1, "item": "pen", "note": None}))
    assert info.value.reason == f"unknown schema id 2 (not in schema directory {tmp_path})"
    with pytest.raises(DecodeError, match="writer schema id 7 is not a valid Avro schema"):
        decoder.decode(framed(7, V1, {"id": 1, "item": "pen"}))


def test_confluent_format_needs_exactly_one_schema_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of registry_url and schema_dir"):
        ConfluentFormat()
    with pytest.raises(ValueError, match="exactly one of registry_url and schema_dir"):
        ConfluentFormat(registry_url="http://x", schema_dir=str(tmp_path))
    fmt = ConfluentFormat(json.dumps(READER), registry_url="http://registry:8081")
    assert pickle.loads(pickle.dumps(fmt)) == fmt


def test_unknown_schema_error_survives_pickling() -> None:
    error = UnknownSchemaError.for_id(12, "somewhere")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.schema_id, copy.reason, str(copy)) == (12, error.reason, str(error))


def kafka_batch(values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["orders"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([0] * n, pa.timestamp("ms", "UTC")),
        }
    )
