"""Tests of table/puffin.py: the file layout byte by byte, round trips, the
footer read from the tail only, every corruption refused with the field
named, and pyiceberg (a test oracle) reading a file Floe wrote."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.table.puffin import PuffinFile

from table.errors import MalformedFileError, ValidationError
from table.io import FileIO
from table.puffin import (
    CREATED_BY,
    MAGIC,
    BlobMetadata,
    InvalidPuffinFile,
    PuffinWriter,
    read_blob,
    read_footer,
    read_puffin_footer,
    write_puffin,
)

PATH = "/warehouse/t/data/x.puffin"


def _file(*payloads: bytes) -> bytes:
    writer = PuffinWriter()
    for i, payload in enumerate(payloads):
        writer.add_blob("test-blob-v1", [i], payload, {"n": str(i)})
    return writer.to_bytes()


def _with_footer(data: bytes, payload: bytes, flags: bytes = bytes(4), size: Any = None) -> bytes:
    """``data``'s blobs (up to its footer) under a hand-made footer."""
    (old,) = struct.unpack("<i", data[-12:-8])
    blobs = data[: len(data) - old - 16]
    size = len(payload) if size is None else size
    return blobs + MAGIC + payload + struct.pack("<i", size) + flags + MAGIC


def _error(data: bytes) -> InvalidPuffinFile:
    with pytest.raises(InvalidPuffinFile) as info:
        read_footer(data, PATH)
    assert PATH in str(info.value)
    return info.value


# --------------------------------------------------------------------------
# Layout and round trips
# --------------------------------------------------------------------------


def test_the_layout_is_magic_blobs_then_the_footer() -> None:
    data = _file(b"abc", b"")
    assert data[:4] == b"PFA1" and data[4:7] == b"abc"
    (size,) = struct.unpack("<i", data[-12:-8])
    assert data[-8:-4] == bytes(4)  # flags: uncompressed footer
    assert data[-4:] == b"PFA1"
    assert data[-12 - size - 4 : -12 - size] == b"PFA1"  # footer magic
    assert 7 + 4 + size + 12 == len(data)
    payload = json.loads(data[-12 - size : -12].decode("utf-8"))
    assert payload == {
        "blobs": [
            {"type": "test-blob-v1", "fields": [0], "snapshot-id": -1, "sequence-number": -1,
             "offset": 4, "length": 3, "properties": {"n": "0"}},
            {"type": "test-blob-v1", "fields": [1], "snapshot-id": -1, "sequence-number": -1,
             "offset": 7, "length": 0, "properties": {"n": "1"}},
        ],
        "properties": {"created-by": CREATED_BY},
    }


def test_an_empty_file_has_only_a_footer() -> None:
    data = PuffinWriter().to_bytes({"k": "v"})
    blobs, properties = read_footer(data, PATH)
    assert blobs == [] and properties == {"created-by": "Floe", "k": "v"}
    assert PuffinFile(data).footer.blobs == []


def test_blob_metadata_json_uses_the_spec_names() -> None:
    blob = BlobMetadata("t", (1, 2), 7, 8, 4, 10, "zstd", {"a": "b"})
    obj = blob.to_json()
    assert obj == {"type": "t", "fields": [1, 2], "snapshot-id": 7, "sequence-number": 8, "offset": 4,
                   "length": 10, "compression-codec": "zstd", "properties": {"a": "b"}}
    assert BlobMetadata.from_json(obj) == blob
    bare = BlobMetadata("t", (), -1, -1, 4, 0)
    assert "compression-codec" not in bare.to_json() and "properties" not in bare.to_json()
    assert BlobMetadata.from_json(bare.to_json()) == bare


blob_types = st.text(min_size=1, max_size=20)
texts = st.text(max_size=12)  # any Unicode: the footer is UTF-8 JSON


@settings(max_examples=150, deadline=None)
@given(
    blobs=st.lists(
        st.tuples(blob_types, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3), st.binary(max_size=64),
                  st.dictionaries(texts, texts, max_size=3)),
        max_size=6,
    ),
    file_properties=st.dictionaries(texts, texts, max_size=3),
)
def test_round_trip_of_any_blobs(blobs: list[Any], file_properties: dict[str, str]) -> None:
    writer = PuffinWriter()
    added = [writer.add_blob(t, f, p, props) for t, f, p, props in blobs]
    data = writer.to_bytes(file_properties)
    read, properties = read_footer(data, PATH)
    assert read == added == writer.blobs
    assert properties == {"created-by": CREATED_BY, **file_properties}
    for blob, (blob_type, fields, payload, props) in zip(read, blobs):
        assert data[blob.offset : blob.offset + blob.length] == payload
        assert (blob.type, blob.fields, blob.properties) == (blob_type, tuple(fields), props)
        assert (blob.snapshot_id, blob.sequence_number, blob.compression_codec) == (-1, -1, None)
    # the oracle reads the same footer
    oracle = PuffinFile(data)
    assert [(b.type, b.offset, b.length, b.properties) for b in oracle.footer.blobs] == [
        (b.type, b.offset, b.length, dict(b.properties)) for b in read
    ]
    assert oracle.footer.properties == properties


# --------------------------------------------------------------------------
# I/O: write, footer from the tail, one blob
# --------------------------------------------------------------------------


class _CountingFile:
    """A file that records the byte ranges read from it."""

    def __init__(self, inner: pa.NativeFile, reads: list[tuple[int, int]]) -> None:
        self._inner, self._reads = inner, reads

    def seek(self, offset: int) -> int:
        return self._inner.seek(offset)

    def read(self, n: int) -> bytes:
        start = self._inner.tell()
        data = self._inner.read(n)
        self._reads.append((start, len(data)))
        return data

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


class _CountingIO(FileIO):
    def __init__(self) -> None:
        super().__init__(pafs.LocalFileSystem(), ("", "file"))
        self.reads: list[tuple[int, int]] = []

    def open_input(self, location: str) -> Any:
        return _CountingFile(super().open_input(location), self.reads)


def test_write_then_read_footer_and_blobs(tmp_path: Path) -> None:
    location = f"file://{tmp_path}/a/b.puffin"
    io = FileIO.for_location(location)
    writer = PuffinWriter()
    first = writer.add_blob("x", [1], b"first")
    second = writer.add_blob("y", [], b"\x00" * 1000, {"k": "v"})
    size = write_puffin(io, location, writer, {"p": "q"})
    assert size == io.size(location) == len(io.read_bytes(location))
    blobs, properties = read_puffin_footer(io, location)
    assert blobs == [first, second]
    assert properties == {"created-by": CREATED_BY, "p": "q"}
    assert read_blob(io, location, first.offset, first.length) == b"first"
    assert read_blob(io, location, second.offset, second.length) == b"\x00" * 1000


def test_the_footer_is_read_from_the_tail_only(tmp_path: Path) -> None:
    location = str(tmp_path / "big.puffin")
    writer = PuffinWriter()
    writer.add_blob("x", [], b"\x07" * 1_000_000)
    write_puffin(FileIO.for_location(location), location, writer)
    io = _CountingIO()
    blobs, _ = read_puffin_footer(io, location)
    assert blobs[0].length == 1_000_000
    assert len(io.reads) == 1
    start, length = io.reads[0]
    assert start + length == io.size(location) and length <= 16 * 1024


def test_a_footer_larger_than_the_first_read_takes_a_second_read(tmp_path: Path) -> None:
    location = str(tmp_path / "many.puffin")
    writer = PuffinWriter()
    added = [writer.add_blob("x", [i], b"ab", {"note": "n" * 100}) for i in range(300)]
    write_puffin(FileIO.for_location(location), location, writer)
    io = _CountingIO()
    blobs, _ = read_puffin_footer(io, location)
    assert blobs == added
    assert len(io.reads) == 2
    size = io.size(location)
    assert io.reads[1][0] + io.reads[1][1] == size and io.reads[1][1] > 16 * 1024
    assert io.reads[1][0] > 4 + 2 * 300 - 1  # the blobs themselves are never read


def test_a_blob_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    location = str(tmp_path / "short.puffin")
    io = FileIO.for_location(location)
    writer = PuffinWriter()
    writer.add_blob("x", [], b"abc")
    size = write_puffin(io, location, writer)
    with pytest.raises(InvalidPuffinFile, match=f"field 'blob' of {location}: .*past the end"):
        read_blob(io, location, size - 2, 5)
    with pytest.raises(ValidationError, match="negative"):
        read_blob(io, location, -1, 5)


# --------------------------------------------------------------------------
# Corrupt files: each refused, naming the file and the field
# --------------------------------------------------------------------------


def test_errors_are_typed_as_malformed_file_and_validation_errors() -> None:
    error = _error(b"XXXX" + _file(b"abc")[4:])
    assert isinstance(error, MalformedFileError) and isinstance(error, ValidationError)
    assert error.path == PATH and error.field == "magic"
    assert str(error).startswith(f"field 'magic' of {PATH}: ")


@pytest.mark.parametrize(
    ("corrupt", "field", "reason"),
    [
        (lambda d: b"PFA2" + d[4:], "magic", "file starts with"),
        (lambda d: d[:-1] + b"2", "footer.magic", "file ends with"),
        (lambda d: d[:7] + b"PFA0" + d[11:], "footer.magic", "footer starts with"),
        (lambda d: d[:-8] + b"\x01\x00\x00\x00" + d[-4:], "footer.flags", "LZ4-compressed"),
        (lambda d: d[:-8] + b"\x00\x00\x02\x00" + d[-4:], "footer.flags", "unknown flags"),
        (lambda d: d[:-12] + struct.pack("<i", len(d)) + d[-8:], "footer.payload-size", "does not fit"),
        (lambda d: d[:-12] + struct.pack("<i", -5) + d[-8:], "footer.payload-size", "does not fit"),
        (lambda d: d[:10], "footer", "a Puffin file has at least 20"),
    ],
)
def test_corrupt_framing_is_refused(corrupt: Any, field: str, reason: str) -> None:
    error = _error(corrupt(_file(b"abc")))
    assert error.field == field
    assert reason in str(error)


def test_a_payload_size_off_by_one_finds_no_footer_magic() -> None:
    data = _file(b"abc")
    (size,) = struct.unpack("<i", data[-12:-8])
    error = _error(data[:-12] + struct.pack("<i", size + 1) + data[-8:])
    assert error.field == "footer.magic"


@pytest.mark.parametrize(
    ("payload", "field", "reason"),
    [
        (b"{not json", "footer.payload", "not UTF-8 JSON"),
        (b"\xff\xfe{}", "footer.payload", "not UTF-8 JSON"),
        (b"[]", "footer.payload", "expected a JSON object, got list"),
        (b"{}", "footer.blobs", "required field is missing"),
        (b'{"blobs": {}}', "footer.blobs", "expected a list"),
        (b'{"blobs": [], "properties": {"a": 1}}', "footer.properties.a", "expected a string, got integer"),
        (b'{"blobs": [], "properties": []}', "footer.properties", "expected a JSON object"),
        (b'{"blobs": [7]}', "footer.blobs[0]", "expected a JSON object, got integer"),
    ],
)
def test_a_bad_footer_payload_is_refused(payload: bytes, field: str, reason: str) -> None:
    error = _error(_with_footer(_file(b"abc"), payload))
    assert error.field == field
    assert reason in str(error)


GOOD_BLOB = {"type": "t", "fields": [], "snapshot-id": -1, "sequence-number": -1, "offset": 4, "length": 3}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"type": None}, "type", "expected a string, got null"),
        ({"fields": [1, "2"]}, "fields[1]", "expected an integer, got string"),
        ({"fields": None}, "fields", "expected a list"),
        ({"snapshot-id": "1"}, "snapshot-id", "expected an integer"),
        ({"sequence-number": True}, "sequence-number", "expected an integer, got boolean"),
        ({"offset": 1.5}, "offset", "expected an integer, got number"),
        ({"length": -1}, "length", "must be >= 0"),
        ({"offset": -4}, "offset", "must be >= 0"),
        ({"compression-codec": 3}, "compression-codec", "expected a string"),
        ({"properties": {"k": None}}, "properties.k", "expected a string"),
        ({"offset": 2}, "offset", "outside the blobs [4, 7)"),  # overlaps the header magic
        ({"length": 4}, "offset", "outside the blobs [4, 7)"),  # runs into the footer
    ],
)
def test_a_bad_blob_is_refused(change: dict[str, Any], field: str, reason: str) -> None:
    blob = {**GOOD_BLOB, **change}
    payload = json.dumps({"blobs": [GOOD_BLOB, blob]}).encode()
    error = _error(_with_footer(_file(b"abc"), payload))
    assert error.field == f"footer.blobs[1].{field}"
    assert reason in str(error)


def test_a_missing_blob_field_is_named() -> None:
    for name in ("type", "fields", "snapshot-id", "sequence-number", "offset", "length"):
        blob = {k: v for k, v in GOOD_BLOB.items() if k != name}
        error = _error(_with_footer(_file(b"abc"), json.dumps({"blobs": [blob]}).encode()))
        assert error.field == f"footer.blobs[0].{name}"
        assert "required field is missing" in str(error)


def test_a_tail_that_is_not_the_whole_file_skips_the_header_magic_only() -> None:
    data = _file(b"abcdef")
    blobs, _ = read_footer(data[6:], PATH, file_size=len(data))
    assert [(b.offset, b.length) for b in blobs] == [(4, 6)]
    with pytest.raises(ValidationError, match="only 12 given"):
        read_footer(data[-12:], PATH, file_size=len(data))
    with pytest.raises(ValidationError, match="tail of a 5-byte file"):
        read_footer(data, PATH, file_size=5)


def test_read_puffin_footer_names_the_location_of_a_corrupt_file(tmp_path: Path) -> None:
    location = str(tmp_path / "bad.puffin")
    io = FileIO.for_location(location)
    io.write_bytes(location, _file(b"abc")[:-1] + b"X")
    with pytest.raises(InvalidPuffinFile, match=f"field 'footer.magic' of {location}: file ends with"):
        read_puffin_footer(io, location)
