"""Deletion vectors: the ``deletion-vector-v1`` Puffin blob (spec: "Deletion Vectors").

A v3 table marks the deleted rows of a data file in one bitmap of row
positions, stored as a blob of a Puffin file and found through the delete
file's ``content_offset`` and ``content_size_in_bytes``, so a reader fetches
exactly one blob and no footer.

The blob is ``length (4, big-endian) | D1 D3 39 64 | vector | CRC-32 (4,
big-endian)``, the vector being Roaring's portable 64-bit layout: an 8-byte
little-endian count of 32-bit bitmaps, then for each, in ascending key order,
its 4-byte little-endian key (the position's high 32 bits) and a portable
32-bit Roaring bitmap of the low 32 bits. ``pyroaring.BitMap64`` serializes
exactly that layout (tests/table/test_deletion_vectors.py checks it against
bytes built by hand), so this module only frames it: length, magic and CRC.

Positions are row positions: non-negative int64, so the most significant bit
is 0 as the spec requires, and every key fits Java's signed int.
"""

from __future__ import annotations

import array
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from pyroaring import AbstractBitMap64, BitMap64

from table.errors import ValidationError
from table.io import FileIO
from table.puffin import InvalidPuffinFile, PuffinWriter, read_blob, write_puffin
from table.schema import ROW_POSITION

DV_BLOB_TYPE = "deletion-vector-v1"
DV_MAGIC = bytes.fromhex("D1D33964")
REFERENCED_DATA_FILE = "referenced-data-file"
CARDINALITY = "cardinality"
MAX_POSITION = 2**63 - 1
DV_FIELDS = (ROW_POSITION.field_id,)
"""The blob's ``fields``: the positions are of ``_pos``, as Iceberg Java writes."""

_BE_UINT32 = struct.Struct(">I")
_FRAMING = 4 + len(DV_MAGIC) + 4  # length, magic, CRC
_MAX_LENGTH = 2**31 - 1  # the length is a Java int

Positions: TypeAlias = np.ndarray | AbstractBitMap64


class InvalidDeletionVector(InvalidPuffinFile):
    """A ``deletion-vector-v1`` blob is corrupt: names where it was read, the field and why."""


@dataclass(frozen=True)
class DVBlob:
    """One deletion vector as written: what its delete file entry records.

    ``location`` is the Puffin file (the entry's ``file_path``), and
    ``cardinality`` its ``record_count``.
    """

    location: str
    referenced_data_file: str
    content_offset: int
    content_size_in_bytes: int
    cardinality: int
    file_size_in_bytes: int


def to_bitmap(positions: Positions) -> BitMap64:
    """A new bitmap of ``positions`` (integers in [0, 2**63)), which is not changed.

    Anything else is refused: a negative position, or one with the top bit
    set, is no row of a data file.
    """
    if isinstance(positions, AbstractBitMap64):
        if positions:  # unsigned: only the top bit can be wrong
            _check_range(0, positions.max())
        return BitMap64(positions)
    values = np.asarray(positions)
    if values.dtype.kind not in "iu":
        raise ValidationError(f"deletion vector positions must be integers, got dtype {values.dtype}")
    if values.size:
        _check_range(int(values.min()), int(values.max()))
    unsigned = array.array("Q")
    unsigned.frombytes(np.ascontiguousarray(values, dtype=np.uint64).tobytes())
    return BitMap64(unsigned)  # from array('Q'): several times faster than from numpy


def serialize_vector(positions: Positions) -> bytes:
    """The ``deletion-vector-v1`` blob of ``positions`` (spec: "deletion-vector-v1 blob type").

    Runs are encoded as run containers, as Iceberg Java does, so deleting a
    range of rows costs a few bytes.
    """
    return _frame(to_bitmap(positions))


def _frame(bitmap: BitMap64) -> bytes:
    """The blob of a bitmap of Floe's own (it is run-optimized in place)."""
    bitmap.run_optimize()
    body = DV_MAGIC + bitmap.serialize()
    if len(body) > _MAX_LENGTH:
        raise ValidationError(f"a deletion vector of {len(body)} bytes does not fit a 4-byte length")
    return _BE_UINT32.pack(len(body)) + body + _BE_UINT32.pack(zlib.crc32(body))


def deserialize_vector(blob: bytes, where: str) -> BitMap64:
    """The positions of a ``deletion-vector-v1`` blob, checking length, magic and CRC.

    ``where`` names the blob in errors (e.g. the Puffin file and offset).
    """
    if len(blob) < _FRAMING:
        reason = f"blob is {len(blob)} bytes, less than the {_FRAMING} of its framing"
        raise InvalidDeletionVector(where, "length", reason)
    (length,) = _BE_UINT32.unpack_from(blob, 0)
    if length != len(blob) - 8:
        raise InvalidDeletionVector(
            where, "length", f"says {length} bytes of magic and vector, the {len(blob)}-byte blob holds {len(blob) - 8}"
        )
    body = blob[4:-4]
    if body[: len(DV_MAGIC)] != DV_MAGIC:
        raise InvalidDeletionVector(where, "magic", f"got {body[:4].hex(' ')}, expected {DV_MAGIC.hex(' ')}")
    (crc,) = _BE_UINT32.unpack_from(blob, len(blob) - 4)
    if crc != zlib.crc32(body):
        raise InvalidDeletionVector(where, "crc", f"stored CRC-32 {crc:08x}, computed {zlib.crc32(body):08x}")
    try:
        bitmap = BitMap64.deserialize(body[len(DV_MAGIC) :])
    except (ValueError, IndexError) as e:
        raise InvalidDeletionVector(where, "vector", f"not a portable 64-bit Roaring bitmap: {e}") from e
    if bitmap and bitmap.max() > MAX_POSITION:
        raise InvalidDeletionVector(where, "vector", f"position {bitmap.max()} has the most significant bit set")
    return bitmap


def positions_of(bitmap: AbstractBitMap64) -> np.ndarray:
    """The positions of ``bitmap``: sorted int64 (no bit of them is the sign bit)."""
    if bitmap and bitmap.max() > MAX_POSITION:
        raise ValidationError(f"position {bitmap.max()} is not a row position: above 2**63 - 1")
    return np.frombuffer(bitmap.to_array(), dtype=np.int64)


def merge(a: AbstractBitMap64, b: AbstractBitMap64) -> BitMap64:
    """A new bitmap of the positions deleted by either (one DV per data file: spec)."""
    merged = BitMap64(a)
    merged |= b
    return merged


def dv_blob_properties(referenced_data_file: str, cardinality: int) -> dict[str, str]:
    """The blob properties the spec requires of a deletion vector."""
    return {REFERENCED_DATA_FILE: referenced_data_file, CARDINALITY: str(cardinality)}


def write_deletion_vectors(io: FileIO, location: str, vectors: Mapping[str, Positions]) -> list[DVBlob]:
    """Write one Puffin file at ``location`` with a blob per data file (sorted by path).

    Returns, for each blob, what its delete file entry must record. An empty
    vector is refused: it deletes nothing, and its entry would be a delete
    file of no rows.
    """
    if not vectors:
        raise ValidationError(f"{location}: no deletion vectors to write")
    writer = PuffinWriter()
    written = []
    for data_file in sorted(vectors):
        bitmap = to_bitmap(vectors[data_file])
        if not bitmap:
            raise ValidationError(f"{location}: the deletion vector of {data_file} is empty")
        properties = dv_blob_properties(data_file, len(bitmap))
        written.append((writer.add_blob(DV_BLOB_TYPE, DV_FIELDS, _frame(bitmap), properties), len(bitmap)))
    size = write_puffin(io, location, writer)
    return [
        DVBlob(location, blob.properties[REFERENCED_DATA_FILE], blob.offset, blob.length, cardinality, size)
        for blob, cardinality in written
    ]


def read_deletion_vector(io: FileIO, location: str, offset: int, length: int, referenced_data_file: str) -> BitMap64:
    """The deletion vector of ``referenced_data_file``: one blob read, no footer.

    ``offset`` and ``length`` are the delete file's ``content_offset`` and
    ``content_size_in_bytes``.
    """
    where = f"{location} (deletion vector of {referenced_data_file} at [{offset}, +{length}))"
    return deserialize_vector(read_blob(io, location, offset, length), where)


def _check_range(low: int, high: int) -> None:
    if low < 0:
        raise ValidationError(f"deletion vector position {low} is negative")
    if high > MAX_POSITION:
        raise ValidationError(f"deletion vector position {high} is above 2**63 - 1")
