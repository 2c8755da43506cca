"""Tests of table/deletes/vectors.py: pyroaring's 64-bit serialization
against bytes built by hand from the spec's description, the blob framing
(length, magic, CRC), round trips with positions above 2**32, corruptions
refused with the field named, Puffin files of several vectors, and pyiceberg
(a test oracle) decoding what Floe wrote."""

from __future__ import annotations

import struct
import zlib
from itertools import groupby
from pathlib import Path
from typing import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile
from pyroaring import BitMap64, FrozenBitMap64

from table.deletes.vectors import (
    CARDINALITY,
    DV_BLOB_TYPE,
    DV_FIELDS,
    DV_MAGIC,
    MAX_POSITION,
    REFERENCED_DATA_FILE,
    DVBlob,
    InvalidDeletionVector,
    deserialize_vector,
    dv_blob_properties,
    merge,
    positions_of,
    read_deletion_vector,
    serialize_vector,
    to_bitmap,
    write_deletion_vectors,
)
from table.errors import MalformedFileError, ValidationError
from table.io import FileIO
from table.puffin import InvalidPuffinFile, read_puffin_footer

WHERE = "/warehouse/t/data/dv.puffin at 4"


# --------------------------------------------------------------------------
# The spec's layout, built by hand
# --------------------------------------------------------------------------


def _roaring32_arrays(values: Iterable[int]) -> bytes:
    """A 32-bit Roaring bitmap in the portable format, array containers only
    (RoaringFormatSpec: cookie 12346, container count, per container its
    16-bit key and cardinality - 1, then the offsets, then the sorted 16-bit
    values). Valid for at most 4096 values a container."""
    containers = [(key, [v & 0xFFFF for v in group]) for key, group in groupby(sorted(set(values)), lambda v: v >> 16)]
    header = struct.pack("<II", 12346, len(containers))
    header += b"".join(struct.pack("<HH", key, len(low) - 1) for key, low in containers)
    offset = len(header) + 4 * len(containers)
    for _, low in containers:
        header += struct.pack("<I", offset)
        offset += 2 * len(low)
    return header + b"".join(struct.pack(f"<{len(low)}H", *low) for _, low in containers)


def _portable64(positions: Iterable[int], roaring32=_roaring32_arrays) -> bytes:
    """The spec's vector: an 8-byte LE count of 32-bit bitmaps, then for each
    (keys in ascending unsigned order) a 4-byte LE key and the bitmap."""
    keyed = groupby(sorted(set(positions)), lambda p: p >> 32)
    by_key = [(key, [p & 0xFFFFFFFF for p in group]) for key, group in keyed]
    return struct.pack("<Q", len(by_key)) + b"".join(struct.pack("<I", key) + roaring32(low) for key, low in by_key)


def _blob(vector: bytes) -> bytes:
    """The spec's blob: BE length of magic + vector, magic, vector, BE CRC-32 of magic + vector."""
    body = bytes([0xD1, 0xD3, 0x39, 0x64]) + vector
    return struct.pack(">I", len(body)) + body + struct.pack(">I", zlib.crc32(body))


def test_the_brief_example_by_hand() -> None:
    expected_vector = bytes.fromhex(
        "0200000000000000"  # two 32-bit bitmaps
        "00000000"  # key 0
        "3a300000" "01000000" "0000" "0100" "10000000" "0100" "0500"  # {1, 5}: one array container
        "02000000"  # key 2
        "3a300000" "01000000" "0000" "0000" "10000000" "0700"  # {7}
    )
    positions = [1, 5, 2**33 + 7]
    assert _portable64(positions) == expected_vector
    assert BitMap64(positions).serialize() == expected_vector
    assert serialize_vector(np.array(positions, np.int64)) == _blob(expected_vector)
    assert serialize_vector(np.array(positions, np.int64))[:8] == bytes.fromhex("0000003a d1d33964")  # 4 + 54 bytes


@pytest.mark.parametrize(
    "positions",
    [
        [0],
        [0, 70000, 2**32 + 1, MAX_POSITION],  # two containers in key 0; the largest key Java allows
        [2**32 - 1, 2**32, 3 * 2**32 + 65535, 3 * 2**32 + 65536],  # both sides of each boundary
        list(range(0, 8000, 2)) + [2**40 + 3],  # 4000 values in one array container
    ],
)
def test_serialize_vector_matches_the_hand_built_layout(positions: list[int]) -> None:
    assert BitMap64(positions).serialize() == _portable64(positions)
    assert serialize_vector(np.array(positions, np.int64)) == _blob(_portable64(positions))


def test_keys_are_ordered_as_unsigned() -> None:
    # 2**63 is no row position, but shows pyroaring orders keys unsigned: 0x80000000 after 1
    raw = BitMap64([2**63, 2**32]).serialize()
    assert raw == _portable64([2**32, 2**63])
    assert raw[8:12] == struct.pack("<I", 1) and raw.index(struct.pack("<I", 0x80000000)) > 12


def test_a_range_is_written_as_a_run_container_as_java_does() -> None:
    # RoaringFormatSpec with runs: cookie 12347 | (containers - 1) << 16, a run-flag
    # bitset, key and cardinality - 1, no offsets under 4 containers, then the
    # run container: the run count and (start, length - 1) pairs.
    run32 = bytes.fromhex("3b300000" "01" "0000" "0900" "0100" "0a00" "0900")
    expected = struct.pack("<Q", 1) + struct.pack("<I", 5) + run32
    assert serialize_vector(np.arange(5 * 2**32 + 10, 5 * 2**32 + 20)) == _blob(expected)
    # added one by one, the caller's bitmap holds an array container: the blob
    # still has the run container, and the caller's bitmap is not changed
    bitmap = BitMap64()
    for position in range(5 * 2**32 + 10, 5 * 2**32 + 20):
        bitmap.add(position)
    assert bitmap.get_statistics()["n_run_containers"] == 0
    assert serialize_vector(bitmap) == _blob(expected)
    assert bitmap.get_statistics()["n_run_containers"] == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        # even sub-positions: no runs, which pyroaring's bulk add would make run containers
        st.tuples(st.integers(0, 5), st.integers(0, 2**31 - 1)).map(lambda kl: (kl[0] << 32) | (2 * kl[1])),
        max_size=200,
    )
)
def test_pyroaring_matches_the_hand_built_layout_for_any_sparse_set(positions: list[int]) -> None:
    assert BitMap64(positions).serialize() == _portable64(positions)


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------

positions_strategy = st.lists(
    st.one_of(
        st.integers(0, 2**20),
        st.integers(2**32 - 3, 2**32 + 3),
        st.integers(0, MAX_POSITION),
    ),
    max_size=300,
)
ranges = st.lists(st.tuples(st.integers(0, 2**34), st.integers(1, 70000)), max_size=3)


@settings(max_examples=200, deadline=None)
@given(positions=positions_strategy, runs=ranges)
def test_round_trip_of_any_positions(positions: list[int], runs: list[tuple[int, int]]) -> None:
    values = np.array(positions + [p for start, n in runs for p in range(start, start + n)], np.int64)
    blob = serialize_vector(values)
    bitmap = deserialize_vector(blob, WHERE)
    expected = np.unique(values)
    assert len(bitmap) == len(expected)
    read = positions_of(bitmap)
    assert read.dtype == np.int64 and np.array_equal(read, expected)
    assert serialize_vector(bitmap) == blob  # a bitmap gives the same blob as its positions


def test_inputs_of_every_kind_give_one_blob() -> None:
    positions = [3, 2**33, 1, 3]
    blob = serialize_vector(np.array(positions, np.int64))
    small = serialize_vector(np.array([3, 1, 2**31], np.int64))
    assert serialize_vector(np.array([3, 1, 2**31], np.uint32)) == small
    assert serialize_vector(np.array(positions, np.uint64)) == blob
    assert serialize_vector(BitMap64(positions)) == blob
    assert serialize_vector(FrozenBitMap64(positions)) == blob
    assert positions_of(deserialize_vector(blob, WHERE)).tolist() == [1, 3, 2**33]


def test_an_empty_vector_round_trips() -> None:
    blob = serialize_vector(np.array([], np.int64))
    assert blob == _blob(bytes(8))
    bitmap = deserialize_vector(blob, WHERE)
    assert len(bitmap) == 0 and positions_of(bitmap).dtype == np.int64 and positions_of(bitmap).size == 0


@pytest.mark.parametrize(
    ("positions", "reason"),
    [
        (np.array([5, -1, 3], np.int64), "position -1 is negative"),
        (np.array([2**63], np.uint64), "position 9223372036854775808 is above 2\\*\\*63 - 1"),
        (BitMap64([1, 2**63 + 5]), "position 9223372036854775813 is above"),
        (np.array([1.0, 2.0]), "must be integers, got dtype float64"),
        (np.array([True]), "must be integers, got dtype bool"),
    ],
)
def test_positions_that_are_no_rows_are_refused(positions: object, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        serialize_vector(positions)  # type: ignore[arg-type]


def test_merge_is_the_union_and_leaves_both_inputs() -> None:
    a, b = BitMap64([1, 2**40]), FrozenBitMap64([2, 2**40])
    merged = merge(a, b)
    assert positions_of(merged).tolist() == [1, 2, 2**40]
    assert list(a) == [1, 2**40] and list(b) == [2, 2**40]
    merged.add(7)
    assert 7 not in a


def test_to_bitmap_copies() -> None:
    mine = BitMap64([1])
    copy = to_bitmap(mine)
    copy.add(2)
    assert list(mine) == [1]


def test_blob_properties() -> None:
    assert dv_blob_properties("s3://b/data/f.parquet", 12) == {
        "referenced-data-file": "s3://b/data/f.parquet",
        "cardinality": "12",
    }


# --------------------------------------------------------------------------
# Corrupt blobs: each refused, naming where and the field
# --------------------------------------------------------------------------

GOOD = serialize_vector(np.array([1, 5, 2**33 + 7], np.int64))


def _refused(blob: bytes) -> InvalidDeletionVector:
    with pytest.raises(InvalidDeletionVector) as info:
        deserialize_vector(blob, WHERE)
    assert isinstance(info.value, InvalidPuffinFile) and isinstance(info.value, MalformedFileError)
    assert isinstance(info.value, ValidationError)
    assert str(info.value).startswith(f"field '{info.value.field}' of {WHERE}: ")
    return info.value


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("blob", "field", "reason"),
    [
        (b"", "length", "blob is 0 bytes, less than the 12"),
        (GOOD[:11], "length", "less than the 12"),
        (GOOD[:-1], "length", "says 58 bytes of magic and vector, the 65-byte blob holds 57"),
        (GOOD + b"\x00", "length", "the 67-byte blob holds 59"),
        (_flip(GOOD, 3), "length", "says 122 bytes"),
        (_flip(GOOD, 4), "magic", "got 91 d3 39 64, expected d1 d3 39 64"),
        (_flip(GOOD, 20), "crc", "stored CRC-32"),  # a bit of the vector
        (_flip(GOOD, len(GOOD) - 1), "crc", "stored CRC-32"),  # a bit of the CRC
        (_blob(b"\x01\x02\x03"), "vector", "not a portable 64-bit Roaring bitmap"),
        (_blob(BitMap64([1]).serialize()[:-1]), "vector", "not a portable 64-bit Roaring bitmap"),
        # keys out of order: a valid CRC cannot make it a vector
        (_blob(struct.pack("<Q", 2) + struct.pack("<I", 2) + _roaring32_arrays([7])
               + struct.pack("<I", 0) + _roaring32_arrays([1])), "vector", "not a portable"),
        (_blob(BitMap64([3, 2**63]).serialize()), "vector", "position 9223372036854775808 has the most significant"),
    ],
)
def test_a_corrupt_blob_is_refused(blob: bytes, field: str, reason: str) -> None:
    error = _refused(blob)
    assert error.field == field
    assert reason in str(error)


def test_magic_constant() -> None:
    assert DV_MAGIC == b"\xd1\xd3\x39\x64" and DV_BLOB_TYPE == "deletion-vector-v1"


# --------------------------------------------------------------------------
# Puffin files of deletion vectors
# --------------------------------------------------------------------------

VECTORS = {
    "s3://bucket/t/data/b.parquet": BitMap64(range(10_000)),  # one run
    "s3://bucket/t/data/a.parquet": BitMap64([1, 5, 2**33 + 7]),  # above 2**32
    "s3://bucket/t/data/c.parquet": BitMap64(np.random.default_rng(7).choice(70_000, 5_000, replace=False).tolist()),
}


def test_write_then_read_each_vector(tmp_path: Path) -> None:
    location = f"file://{tmp_path}/t/data/dv-1.puffin"
    io = FileIO.for_location(location)
    written = write_deletion_vectors(io, location, VECTORS)
    size = io.size(location)
    assert [w.referenced_data_file for w in written] == sorted(VECTORS)  # sorted by data file path
    assert all(w.location == location and w.file_size_in_bytes == size for w in written)
    assert [w.cardinality for w in written] == [3, 10_000, 5_000]
    for w in written:
        read = read_deletion_vector(io, location, w.content_offset, w.content_size_in_bytes, w.referenced_data_file)
        assert read == VECTORS[w.referenced_data_file]
    # offsets and lengths are exactly the footer's (spec: content_offset, content_size_in_bytes)
    blobs, properties = read_puffin_footer(io, location)
    assert properties["created-by"] == "Floe"
    assert [(b.offset, b.length) for b in blobs] == [(w.content_offset, w.content_size_in_bytes) for w in written]
    for blob, w in zip(blobs, written):
        assert blob.type == DV_BLOB_TYPE and blob.fields == DV_FIELDS == (2147483645,)
        assert (blob.snapshot_id, blob.sequence_number, blob.compression_codec) == (-1, -1, None)
        assert blob.properties == {REFERENCED_DATA_FILE: w.referenced_data_file, CARDINALITY: str(w.cardinality)}
    assert written[0].content_offset == 4  # right after the magic
    assert written[1].content_offset == written[0].content_offset + written[0].content_size_in_bytes


def test_numpy_vectors_are_accepted(tmp_path: Path) -> None:
    location = str(tmp_path / "dv.puffin")
    io = FileIO.for_location(location)
    (written,) = write_deletion_vectors(io, location, {"/d/f.parquet": np.array([9, 2**35, 9], np.int64)})
    assert written == DVBlob(location, "/d/f.parquet", 4, written.content_size_in_bytes, 2, io.size(location))
    read = read_deletion_vector(io, location, 4, written.content_size_in_bytes, "/d/f.parquet")
    assert positions_of(read).tolist() == [9, 2**35]


def test_a_wrong_offset_is_refused_naming_the_file_and_data_file(tmp_path: Path) -> None:
    location = str(tmp_path / "dv.puffin")
    io = FileIO.for_location(location)
    (w,) = write_deletion_vectors(io, location, {"/d/f.parquet": BitMap64([1, 2])})
    with pytest.raises(InvalidDeletionVector) as info:
        read_deletion_vector(io, location, w.content_offset + 1, w.content_size_in_bytes, "/d/f.parquet")
    message = str(info.value)
    assert location in message and "/d/f.parquet" in message and info.value.field == "length"
    with pytest.raises(InvalidPuffinFile, match="past the end"):
        read_deletion_vector(io, location, w.file_size_in_bytes - 2, w.content_size_in_bytes, "/d/f.parquet")


def test_empty_writes_are_refused(tmp_path: Path) -> None:
    location = str(tmp_path / "dv.puffin")
    io = FileIO.for_location(location)
    with pytest.raises(ValidationError, match="no deletion vectors to write"):
        write_deletion_vectors(io, location, {})
    with pytest.raises(ValidationError, match="the deletion vector of /d/f.parquet is empty"):
        write_deletion_vectors(io, location, {"/d/e.parquet": BitMap64([1]), "/d/f.parquet": BitMap64()})
    assert not io.exists(location)


# --------------------------------------------------------------------------
# pyiceberg (test oracle) decodes what Floe wrote
# --------------------------------------------------------------------------


def test_pyiceberg_reads_floes_deletion_vectors(tmp_path: Path) -> None:
    location = str(tmp_path / "dv.puffin")
    io = FileIO.for_location(location)
    written = write_deletion_vectors(io, location, VECTORS)
    puffin = PuffinFile(io.read_bytes(location))
    oracle_blobs = puffin.footer.blobs
    expected = [(w.content_offset, w.content_size_in_bytes) for w in written]
    assert [(b.offset, b.length) for b in oracle_blobs] == expected
    assert [b.snapshot_id for b in oracle_blobs] == [-1] * 3
    vectors = deletion_vectors_from_puffin_file(puffin)
    assert [v.referenced_data_file for v in vectors] == sorted(VECTORS)
    for vector in vectors:
        decoded = sorted(vector.to_vector().to_pylist())
        assert decoded == list(VECTORS[vector.referenced_data_file])
    assert 2**33 + 7 in vectors[0].to_vector().to_pylist()
