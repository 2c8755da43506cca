"""The Puffin file format (spec: "Puffin file"), which holds deletion vectors.

A Puffin file is ``Magic Blob₁ ... Blobₙ Footer``; the footer is ``Magic
FooterPayload FooterPayloadSize Flags Magic`` with a JSON payload that lists
each blob's type, offset and length. Encoding and decoding are pure
(:class:`PuffinWriter`, :func:`read_footer`) and kept apart from the I/O
helpers (:func:`write_puffin`, :func:`read_puffin_footer`, :func:`read_blob`),
so that the format can be tested without files and files are read in as few
requests as an object store allows: the footer from the file's tail, a blob
from its offset.

Floe writes neither compressed blobs nor a compressed footer, and refuses to
read a compressed footer (LZ4, for which no library is installed): the
deletion vectors it reads are found through manifests (``content_offset``,
``content_size_in_bytes``) and need no footer at all.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from table.errors import MalformedFileError, ValidationError
from table.io import FileIO, FileIOError, removed_on_failure

MAGIC = b"PFA1"
CREATED_BY = "Floe"
"""The ``created-by`` file property (spec: "Common properties")."""

FLAG_COMPRESSED = 0x01  # byte 0, bit 0: the footer payload is LZ4-compressed
_INT32 = struct.Struct("<i")  # "a 4 byte integer is always signed ... little-endian"
_TRAILER = len(MAGIC) + 4 + 4  # FooterPayloadSize, Flags, Magic: the last 12 bytes
_SMALLEST_FILE = len(MAGIC) + len(MAGIC) + _TRAILER  # no blobs, empty payload
_TAIL_GUESS = 16 * 1024  # bytes read from the end at first; most footers fit
_MAX_INT32 = 2**31 - 1


class InvalidPuffinFile(MalformedFileError, ValidationError):
    """A Puffin file (or its blob) breaks the spec: names the file, the field and why.

    A :class:`MalformedFileError` like any other unreadable file, and a
    :class:`ValidationError` since it breaks a rule of the spec.
    """


@dataclass(frozen=True)
class BlobMetadata:
    """One blob in the footer (spec: "BlobMetadata").

    ``offset`` and ``length`` locate the blob's bytes in the file; for a
    deletion vector they are the data file's ``content_offset`` and
    ``content_size_in_bytes``.
    """

    type: str
    fields: tuple[int, ...]
    snapshot_id: int
    sequence_number: int
    offset: int
    length: int
    compression_codec: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the footer, with the spec's field names."""
        obj: dict[str, Any] = {
            "type": self.type,
            "fields": list(self.fields),
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence_number,
            "offset": self.offset,
            "length": self.length,
        }
        if self.compression_codec is not None:
            obj["compression-codec"] = self.compression_codec
        if self.properties:
            obj["properties"] = dict(self.properties)
        return obj

    @classmethod
    def from_json(cls, obj: Any, path: str = "<puffin footer>", at: str = "blob") -> BlobMetadata:
        """Parse one footer blob; errors name ``path`` and the field (``at.<name>``)."""
        if not isinstance(obj, dict):
            raise InvalidPuffinFile(path, at, f"expected a JSON object, got {_kind(obj)}")
        fields = _required(obj, "fields", list, path, at)
        for i, field_id in enumerate(fields):
            _check_int(field_id, path, f"{at}.fields[{i}]")
        codec = obj.get("compression-codec")
        if codec is not None and not isinstance(codec, str):
            raise InvalidPuffinFile(path, f"{at}.compression-codec", f"expected a string, got {_kind(codec)}")
        blob = cls(
            type=_required(obj, "type", str, path, at),
            fields=tuple(fields),
            snapshot_id=_required(obj, "snapshot-id", int, path, at),
            sequence_number=_required(obj, "sequence-number", int, path, at),
            offset=_required(obj, "offset", int, path, at),
            length=_required(obj, "length", int, path, at),
            compression_codec=codec,
            properties=_string_map(obj.get("properties", {}), path, f"{at}.properties"),
        )
        for name, value in (("offset", blob.offset), ("length", blob.length)):
            if value < 0:
                raise InvalidPuffinFile(path, f"{at}.{name}", f"must be >= 0, got {value}")
        return blob


class PuffinWriter:
    """Blobs gathered in memory, then encoded as one Puffin file by :meth:`to_bytes`.

    Floe's Puffin files hold deletion vectors, a few bytes to a few MB each,
    so the whole file is built in memory and written in one request.
    """

    def __init__(self) -> None:
        self._parts: list[bytes] = [MAGIC]
        self._offset = len(MAGIC)
        self._blobs: list[BlobMetadata] = []

    @property
    def blobs(self) -> list[BlobMetadata]:
        """The blobs added so far, in file order."""
        return list(self._blobs)

    def add_blob(
        self,
        blob_type: str,
        fields: Sequence[int],
        payload: bytes,
        properties: Mapping[str, str] | None = None,
        *,
        snapshot_id: int = -1,
        sequence_number: int = -1,
    ) -> BlobMetadata:
        """Append an uncompressed blob; returns its metadata, with its offset and length.

        Snapshot id and sequence number default to -1: they are not known when
        a deletion vector is written (spec: "deletion-vector-v1").
        """
        blob = BlobMetadata(
            type=blob_type,
            fields=tuple(fields),
            snapshot_id=snapshot_id,
            sequence_number=sequence_number,
            offset=self._offset,
            length=len(payload),
            properties=dict(properties or {}),
        )
        self._parts.append(bytes(payload))
        self._offset += len(payload)
        self._blobs.append(blob)
        return blob

    def to_bytes(self, file_properties: Mapping[str, str] | None = None) -> bytes:
        """The whole file: magic, the blobs, then the footer (uncompressed payload)."""
        properties = {"created-by": CREATED_BY, **(file_properties or {})}
        metadata = {"blobs": [b.to_json() for b in self._blobs], "properties": properties}
        payload = json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(payload) > _MAX_INT32:
            raise ValidationError(f"Puffin footer payload of {len(payload)} bytes does not fit a 4-byte size")
        footer = MAGIC + payload + _INT32.pack(len(payload)) + bytes(4) + MAGIC
        return b"".join(self._parts) + footer


def read_footer(
    tail: bytes, path: str = "<puffin>", file_size: int | None = None
) -> tuple[list[BlobMetadata], dict[str, str]]:
    """The blobs and file properties in a Puffin file's footer.

    ``tail`` is the last ``len(tail)`` bytes of the ``file_size``-byte file
    (the whole file when ``file_size`` is not given); it must hold the whole
    footer. The header magic is checked too when ``tail`` is the whole file.
    Every blob must lie between the header magic and the footer.
    """
    size = len(tail) if file_size is None else file_size
    if len(tail) > size:
        raise ValidationError(f"{path}: {len(tail)} bytes given as the tail of a {size}-byte file")
    footer_length = _footer_length(tail, path, size)
    if footer_length > len(tail):
        raise ValidationError(f"{path}: the Puffin footer is {footer_length} bytes, only {len(tail)} given")
    if len(tail) == size and tail[: len(MAGIC)] != MAGIC:
        raise InvalidPuffinFile(path, "magic", f"file starts with {tail[:4]!r}, expected {MAGIC!r}")
    footer = tail[len(tail) - footer_length :]
    if footer[: len(MAGIC)] != MAGIC:
        raise InvalidPuffinFile(path, "footer.magic", f"footer starts with {footer[:4]!r}, expected {MAGIC!r}")
    metadata = _parse_payload(footer[len(MAGIC) : -_TRAILER], path)
    blobs_json = _required(metadata, "blobs", list, path, "footer")
    blobs = [BlobMetadata.from_json(b, path, f"footer.blobs[{i}]") for i, b in enumerate(blobs_json)]
    end = size - footer_length
    for i, blob in enumerate(blobs):
        if blob.offset < len(MAGIC) or blob.offset + blob.length > end:
            raise InvalidPuffinFile(
                path,
                f"footer.blobs[{i}].offset",
                f"blob [{blob.offset}, {blob.offset + blob.length}) is outside the blobs [{len(MAGIC)}, {end})",
            )
    return blobs, _string_map(metadata.get("properties", {}), path, "footer.properties")


def write_puffin(
    io: FileIO, location: str, writer: PuffinWriter, file_properties: Mapping[str, str] | None = None
) -> int:
    """Write the file at ``location`` in one request; returns its size in bytes.

    A failed write leaves no partial file: no snapshot references it yet.
    """
    data = writer.to_bytes(file_properties)
    with removed_on_failure(io, location):
        io.write_bytes(location, data)
    return len(data)


def read_puffin_footer(io: FileIO, location: str) -> tuple[list[BlobMetadata], dict[str, str]]:
    """The footer of the Puffin file at ``location``, read from its tail only.

    One read of the last 16 KiB, and a second one only for a larger footer.
    """
    size = io.size(location)
    with io.open_input(location) as f:
        tail = _read_at(f, location, max(0, size - _TAIL_GUESS), min(size, _TAIL_GUESS))
        footer_length = _footer_length(tail, location, size)
        if footer_length > len(tail):
            tail = _read_at(f, location, size - footer_length, footer_length)
    return read_footer(tail, location, size)


def read_blob(io: FileIO, location: str, offset: int, length: int) -> bytes:
    """The ``length`` bytes at ``offset`` of the file at ``location`` (one blob, as stored)."""
    if offset < 0 or length < 0:
        raise ValidationError(f"{location}: blob [{offset}, +{length}) is negative")
    with io.open_input(location) as f:
        data = _read_at(f, location, offset, length)
    if len(data) != length:
        raise InvalidPuffinFile(
            location, "blob", f"blob [{offset}, {offset + length}) ends past the end of the file ({offset + len(data)})"
        )
    return data


def _footer_length(tail: bytes, path: str, file_size: int) -> int:
    """The footer's length from the last 12 bytes, checking the trailing magic and the flags."""
    if file_size < _SMALLEST_FILE:
        reason = f"file is {file_size} bytes, a Puffin file has at least {_SMALLEST_FILE}"
        raise InvalidPuffinFile(path, "footer", reason)
    if len(tail) < _TRAILER:
        raise ValidationError(f"{path}: the last {_TRAILER} bytes are needed, only {len(tail)} given")
    trailer = tail[-_TRAILER:]
    if trailer[-len(MAGIC) :] != MAGIC:
        raise InvalidPuffinFile(path, "footer.magic", f"file ends with {trailer[-4:]!r}, expected {MAGIC!r}")
    flags = trailer[4:8]
    if flags[0] & FLAG_COMPRESSED:
        raise InvalidPuffinFile(path, "footer.flags", "the footer payload is LZ4-compressed, which Floe cannot read")
    if flags != bytes(4):
        raise InvalidPuffinFile(path, "footer.flags", f"unknown flags set: 0x{flags.hex()}")
    (payload_size,) = _INT32.unpack(trailer[:4])
    footer_length = len(MAGIC) + payload_size + _TRAILER
    if payload_size < 0 or len(MAGIC) + footer_length > file_size:
        raise InvalidPuffinFile(
            path, "footer.payload-size", f"payload size {payload_size} does not fit the {file_size}-byte file"
        )
    return footer_length


def _parse_payload(payload: bytes, path: str) -> dict[str, Any]:
    try:
        metadata = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidPuffinFile(path, "footer.payload", f"not UTF-8 JSON: {e}") from e
    if not isinstance(metadata, dict):
        raise InvalidPuffinFile(path, "footer.payload", f"expected a JSON object, got {_kind(metadata)}")
    return metadata


def _read_at(f: Any, location: str, offset: int, length: int) -> bytes:
    """Read from an open file; pyarrow's OSError becomes a FileIOError naming it."""
    try:
        f.seek(offset)
        return f.read(length)
    except OSError as e:
        raise FileIOError(location, f"read {length} bytes at {offset} of", str(e)) from e


def _required(obj: dict[str, Any], name: str, kind: type, path: str, at: str) -> Any:
    if name not in obj:
        raise InvalidPuffinFile(path, f"{at}.{name}", "required field is missing")
    value = obj[name]
    if kind is int:
        return _check_int(value, path, f"{at}.{name}")
    if not isinstance(value, kind):
        raise InvalidPuffinFile(path, f"{at}.{name}", f"expected a {_kind_name(kind)}, got {_kind(value)}")
    return value


def _check_int(value: Any, path: str, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPuffinFile(path, at, f"expected an integer, got {_kind(value)}")
    return value


def _string_map(value: Any, path: str, at: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidPuffinFile(path, at, f"expected a JSON object, got {_kind(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise InvalidPuffinFile(path, f"{at}.{key}", f"expected a string, got {_kind(item)}")
    return dict(value)


def _kind(value: Any) -> str:
    return "null" if value is None else _kind_name(type(value))


def _kind_name(kind: type) -> str:
    return {dict: "JSON object", list: "list", str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        kind, kind.__name__
    )
