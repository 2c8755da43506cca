"""Reading and writing table metadata files (spec "Table Metadata", Appendix C).

Parsing never trusts the file: every error is a :class:`MalformedFileError`
that names the file and the dotted JSON field at fault. The nested schema,
partition spec and sort order parsers report their own fields
(:class:`JsonFieldError`), which are rooted here where the object was found,
e.g. ``partition-specs[0].fields[2].transform``.
"""

from __future__ import annotations

import gzip
import json
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from table.errors import JsonFieldError, MalformedFileError, TableError, ValidationError
from table.metadata import (
    OPERATIONS,
    SUPPORTED_FORMAT_VERSIONS,
    InvalidMetadataError,
    MetadataLogEntry,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
    TableMetadata,
    is_gzip_metadata_name,
)
from table.partitioning import partition_spec_from_json
from table.schema import schema_from_json
from table.sort_order import sort_order_from_json

_T = TypeVar("_T")
_GZIP_MAGIC = b"\x1f\x8b"


class InputIO(Protocol):
    """What reading needs of a FileIO."""

    def read_bytes(self, path: str) -> bytes: ...


class OutputIO(Protocol):
    """What writing needs of a FileIO."""

    def write_bytes(self, path: str, data: bytes) -> None: ...


def read_table_metadata(io: InputIO, path: str) -> TableMetadata:
    """Read and parse the metadata file at ``path`` (gzip detected by its magic bytes)."""
    return parse_table_metadata(io.read_bytes(path), path)


def write_table_metadata(io: OutputIO, path: str, metadata: TableMetadata) -> None:
    """Write ``metadata`` as JSON to ``path``, gzip-compressed when the name says so."""
    data = json.dumps(metadata.to_json(), indent=2).encode("utf-8")
    if is_gzip_metadata_name(path):
        data = gzip.compress(data, mtime=0)
    io.write_bytes(path, data)


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

_MISSING: Any = object()
_KIND_NAMES = {int: "an integer", str: "a string", bool: "a boolean", list: "a list", dict: "a JSON object"}


class _Reader:
    """Typed access to one JSON object of a metadata file; errors name file and dotted field."""

    def __init__(self, obj: Any, path: str, at: str = "") -> None:
        self.path = path
        self.at = at
        if not isinstance(obj, dict):
            raise MalformedFileError(path, at or None, f"must be a JSON object, got {_brief(obj)}")
        self.obj: dict[str, Any] = obj

    def where(self, key: str) -> str:
        return f"{self.at}.{key}" if self.at else key

    def fail(self, key: str, reason: str) -> MalformedFileError:
        return MalformedFileError(self.path, self.where(key), reason)

    def get(self, key: str, kind: type, default: Any = _MISSING) -> Any:
        """``obj[key]`` of ``kind``; a missing key (or null) takes ``default``, else fails."""
        value = self.obj.get(key)
        if value is None:
            if default is _MISSING:
                raise self.fail(key, "is required but missing")
            return default
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.fail(key, f"must be {_KIND_NAMES[kind]}, got {_brief(value)}")
        return value

    def items(self, key: str, default: Any = _MISSING) -> Iterator[tuple[str, Any]]:
        """(dotted path, element) for each element of the list at ``key``."""
        for i, item in enumerate(self.get(key, list, default)):
            yield f"{self.where(key)}[{i}]", item

    def child(self, key: str, default: Any = _MISSING) -> _Reader:
        return _Reader(self.get(key, dict, default), self.path, self.where(key))

    def string_map(self, key: str, default: Any = _MISSING) -> dict[str, str]:
        entries = self.child(key, default)
        return {k: entries.get(k, str) for k in entries.obj}


def _brief(value: Any) -> str:
    """A parsed JSON value, shortened for an error message."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_table_metadata(data: str | bytes, path: str = "<metadata>") -> TableMetadata:
    """Parse a metadata file's content (plain or gzip-compressed JSON) read from ``path``."""
    try:
        obj = json.loads(_decode(data, path))
    except json.JSONDecodeError as e:
        raise MalformedFileError(path, None, f"not valid JSON: {e}") from e
    return table_metadata_from_json(obj, path)


def _decode(data: str | bytes, path: str) -> str:
    if isinstance(data, str):
        return data
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise MalformedFileError(path, None, f"corrupt gzip data: {e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedFileError(path, None, f"not UTF-8 text: {e}") from e


def table_metadata_from_json(obj: Any, path: str = "<metadata>") -> TableMetadata:
    """Build :class:`TableMetadata` from a parsed JSON object; errors are :class:`MalformedFileError`."""
    r = _Reader(obj, path)
    version = r.get("format-version", int)
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise r.fail(
            "format-version",
            f"unsupported format version {version}; Floe reads versions {list(SUPPORTED_FORMAT_VERSIONS)}",
        )
    schemas = tuple(_nested(path, at, item, schema_from_json) for at, item in r.items("schemas"))
    current_snapshot_id = r.get("current-snapshot-id", int, -1)
    try:
        return TableMetadata(
            table_uuid=_uuid(r, "table-uuid"),
            location=r.get("location", str),
            last_sequence_number=r.get("last-sequence-number", int),
            last_updated_ms=r.get("last-updated-ms", int),
            last_column_id=r.get("last-column-id", int),
            schemas=schemas,
            current_schema_id=r.get("current-schema-id", int),
            partition_specs=tuple(
                _nested(path, at, item, partition_spec_from_json) for at, item in r.items("partition-specs")
            ),
            default_spec_id=r.get("default-spec-id", int),
            last_partition_id=r.get("last-partition-id", int),
            sort_orders=tuple(_nested(path, at, item, sort_order_from_json) for at, item in r.items("sort-orders")),
            default_sort_order_id=r.get("default-sort-order-id", int),
            properties=r.string_map("properties", {}),
            current_snapshot_id=None if current_snapshot_id == -1 else current_snapshot_id,
            snapshots=tuple(_snapshot(_Reader(item, path, at)) for at, item in r.items("snapshots", [])),
            snapshot_log=tuple(_snapshot_log_entry(_Reader(i, path, at)) for at, i in r.items("snapshot-log", [])),
            metadata_log=tuple(_metadata_log_entry(_Reader(i, path, at)) for at, i in r.items("metadata-log", [])),
            refs=_refs(r.child("refs", {})),
            statistics=tuple(_Reader(i, path, at).obj for at, i in r.items("statistics", [])),
            partition_statistics=tuple(_Reader(i, path, at).obj for at, i in r.items("partition-statistics", [])),
            format_version=version,
            next_row_id=r.get("next-row-id", int, None),
        )
    except InvalidMetadataError as e:
        raise MalformedFileError(path, e.field, e.reason) from e


def _nested(path: str, at: str, obj: Any, parse: Callable[[Any], _T]) -> _T:
    """Parse a nested schema/spec/sort order, rooting its error's field at ``at``."""
    try:
        return parse(obj)
    except JsonFieldError as e:
        raise MalformedFileError(path, e.field_within(at), e.reason) from e
    except TableError as e:
        raise MalformedFileError(path, at, str(e)) from e


def _uuid(r: _Reader, key: str) -> uuid.UUID:
    text = r.get(key, str)
    try:
        return uuid.UUID(text)
    except ValueError:
        raise r.fail(key, f"not a UUID: {text!r}") from None


def _snapshot(r: _Reader) -> Snapshot:
    summary = r.string_map("summary")
    if summary.get("operation") not in OPERATIONS:
        raise r.fail("summary.operation", f"must be one of {sorted(OPERATIONS)}, got {summary.get('operation')!r}")
    try:
        return _snapshot_of(r, summary)
    except ValidationError as e:
        raise MalformedFileError(r.path, r.at, str(e)) from e


def _snapshot_of(r: _Reader, summary: dict[str, str]) -> Snapshot:
    return Snapshot(
        snapshot_id=r.get("snapshot-id", int),
        parent_snapshot_id=r.get("parent-snapshot-id", int, None),
        sequence_number=r.get("sequence-number", int),
        timestamp_ms=r.get("timestamp-ms", int),
        manifest_list=r.get("manifest-list", str),
        summary=summary,
        schema_id=r.get("schema-id", int, None),
        first_row_id=r.get("first-row-id", int, None),
        added_rows=r.get("added-rows", int, None),
    )


def _snapshot_log_entry(r: _Reader) -> SnapshotLogEntry:
    return SnapshotLogEntry(r.get("timestamp-ms", int), r.get("snapshot-id", int))


def _metadata_log_entry(r: _Reader) -> MetadataLogEntry:
    return MetadataLogEntry(r.get("timestamp-ms", int), r.get("metadata-file", str))


def _refs(r: _Reader) -> dict[str, SnapshotRef]:
    return {name: _ref(r.child(name)) for name in r.obj}


def _ref(r: _Reader) -> SnapshotRef:
    try:
        return SnapshotRef(
            snapshot_id=r.get("snapshot-id", int),
            type=r.get("type", str),
            min_snapshots_to_keep=r.get("min-snapshots-to-keep", int, None),
            max_snapshot_age_ms=r.get("max-snapshot-age-ms", int, None),
            max_ref_age_ms=r.get("max-ref-age-ms", int, None),
        )
    except ValidationError as e:
        raise MalformedFileError(r.path, r.at, str(e)) from e
