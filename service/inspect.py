"""What ``floe table list|describe|history|files|scan`` shows.

Each function returns plain text lines built from catalog and ``table/``
objects; the CLI only prints them, so they are testable without a terminal.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from commit.catalog.base import Catalog
from table.io import FileIO
from table.manifest import DataFileContent
from table.metadata import TableMetadata
from table.scan import TableScan

_SUMMARY_KEYS = (
    "added-data-files",
    "added-delete-files",
    "added-records",
    "deleted-records",
    "total-records",
    "total-data-files",
    "total-delete-files",
)


def _when(timestamp_ms: int) -> str:
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def list_tables(catalog: Catalog) -> list[str]:
    """Every table of every namespace, as ``namespace.table``."""
    lines = []
    for namespace in _all_namespaces(catalog, ()):
        lines += sorted(str(ident) for ident in catalog.list_tables(namespace))
    return lines


def _all_namespaces(catalog: Catalog, parent: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for namespace in catalog.list_namespaces(parent):
        yield namespace
        yield from _all_namespaces(catalog, namespace)


def describe(metadata_location: str, metadata: TableMetadata) -> list[str]:
    """Schema, partition specs, sort order, properties and the current snapshot."""
    current = metadata.current_snapshot()
    lines = [
        f"location:          {metadata.location}",
        f"metadata:          {metadata_location}",
        f"format version:    {metadata.format_version}",
        f"table uuid:        {metadata.table_uuid}",
        f"last sequence:     {metadata.last_sequence_number}",
        f"current snapshot:  {current.snapshot_id if current else 'none'}",
        f"schema (id {metadata.current_schema_id}):",
        *(f"  {field}" for field in metadata.schema().fields),
        f"identifier fields: {', '.join(metadata.schema().identifier_field_names()) or 'none'}",
        "partition specs:",
    ]
    for spec in metadata.partition_specs:
        default = " (default)" if spec.spec_id == metadata.default_spec_id else ""
        fields = ", ".join(
            f"{f.name}={f.transform}({metadata.schema().find_column_name(f.source_id)})" for f in spec.fields
        )
        lines.append(f"  {spec.spec_id}{default}: {fields or 'unpartitioned'}")
    order = metadata.sort_order()
    lines.append(f"sort order:        {', '.join(str(f) for f in order.fields) or 'unsorted'}")
    lines.append("properties:")
    lines += [f"  {key} = {value}" for key, value in sorted(metadata.properties.items())]
    return lines


def history(metadata: TableMetadata) -> list[str]:
    """Snapshots of the main branch, newest first, with their summaries."""
    current = metadata.current_snapshot()
    if current is None:
        return ["no snapshots"]
    lines = []
    for snapshot in metadata.ancestors_of(current.snapshot_id):
        summary = snapshot.summary
        counts = " ".join(f"{k}={summary[k]}" for k in _SUMMARY_KEYS if k in summary)
        floe = " ".join(f"{k}={v}" for k, v in summary.items() if k.startswith("floe."))
        lines.append(
            f"{_when(snapshot.timestamp_ms)}  seq={snapshot.sequence_number}  id={snapshot.snapshot_id}  "
            f"{snapshot.operation}  {counts}  {floe}".rstrip()
        )
    return lines


def files(io: FileIO, metadata: TableMetadata) -> list[str]:
    """Live data files with their size, rows and the delete files applying to each; a deletion
    vector (v3) is shown with its cardinality and Puffin file."""
    lines, delete_files = [], set()
    for task in TableScan(io, metadata).plan_files():
        f = task.data_file
        vectors = [d for d in task.delete_files if d.is_deletion_vector]
        kinds = Counter(d.content for d in task.delete_files if not d.is_deletion_vector)
        delete_files |= {d.location_key for d in task.delete_files}
        dv = "".join(f"  dv={d.record_count} deleted in {d.file_path}@{d.content_offset}" for d in vectors)
        lines.append(
            f"{f.file_path}  spec={f.spec_id} partition={f.partition}  {f.file_size_in_bytes} B  "
            f"{f.record_count} rows  seq={task.data_sequence_number}  "
            f"position-deletes={kinds[DataFileContent.POSITION_DELETES]} "
            f"equality-deletes={kinds[DataFileContent.EQUALITY_DELETES]}{dv}"
        )
    lines.append(f"{len(lines)} data files; {len(delete_files)} delete files apply to them")
    return lines


def scan(io: FileIO, metadata: TableMetadata, limit: int | None, columns: tuple[str, ...] = ("*",)) -> list[str]:
    """Live rows as JSON lines (merge-on-read: deletes applied), at most ``limit``."""
    lines: list[str] = []
    for batch in TableScan(io, metadata, selected_fields=columns).to_batches():
        for row in pa.Table.from_batches([batch]).to_pylist():
            if limit is not None and len(lines) >= limit:
                return lines
            lines.append(json.dumps(row, default=_json_value, ensure_ascii=False))
    return lines


def _json_value(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
