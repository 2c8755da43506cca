"""Writes Iceberg tables by hand with ``table/`` primitives, for format-level tests.

``commit/`` is Floe's real commit path (catalog, retries, validation). The
``table/`` interop tests must not depend on it, so this builder writes each
snapshot directly: data and delete files, one new manifest per content kind and
spec, a manifest list carrying the parent's manifests over, and the next
``<version>-<uuid>.metadata.json``. No catalog, no concurrency.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import pyarrow as pa

from table.arrow_schema import cast_to_schema
from table.deletes.writers import EqualityDeleteWriter, PositionDeleteWriter
from table.io import FileIO
from table.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from table.metadata import Snapshot, TableMetadata, metadata_file_name, new_table_metadata
from table.metadata_json import write_table_metadata
from table.parquet.partitioned import write_partitioned
from table.partitioning import build_partition_spec, evolve_partition_spec
from table.schema import Schema
from table.schema_evolution import SchemaUpdate
from table.sort_order import UNSORTED_SORT_ORDER


@dataclass
class HandWrittenTable:
    """A table on local disk whose snapshots this object writes one by one."""

    io: FileIO
    metadata: TableMetadata
    metadata_location: str
    version: int = 0

    @classmethod
    def create(
        cls,
        location: str,
        schema: Schema,
        partition_fields: Sequence[tuple] = (),
        properties: Optional[dict[str, str]] = None,
    ) -> "HandWrittenTable":
        spec = build_partition_spec(schema, partition_fields)
        metadata = new_table_metadata(schema, spec, UNSORTED_SORT_ORDER, location, properties or {})
        io = FileIO.for_location(location)
        path = f"{location}/metadata/{metadata_file_name(0)}"
        write_table_metadata(io, path, metadata)
        return cls(io, metadata, path)

    @property
    def location(self) -> str:
        return self.metadata.location

    # -- files ------------------------------------------------------------------

    def write_data(self, rows: pa.Table, target_file_size_bytes: int = 512 * 1024 * 1024) -> list[DataFile]:
        """Data files for ``rows`` (named like the current schema), split by partition."""
        schema = self.metadata.schema()
        conformed = cast_to_schema(rows, schema)
        return write_partitioned(self.io, self.location, schema, self.metadata.spec(), [conformed], target_file_size_bytes)

    def write_position_deletes(self, data_file: DataFile, positions: Iterable[int]) -> DataFile:
        """One position delete file for rows of ``data_file``, in its partition and spec."""
        writer = PositionDeleteWriter(
            self.io,
            f"{self.location}/data",
            self.metadata.schema(),
            self.metadata.spec_by_id(data_file.spec_id),
            data_file.partition,
        )
        for pos in positions:
            writer.delete(data_file.file_path, pos)
        [delete_file] = writer.close()
        return delete_file

    def write_equality_deletes(
        self, keys: pa.Table, partition: tuple = (), spec_id: Optional[int] = None
    ) -> DataFile:
        """One equality delete file; its columns (by name) are the equality columns."""
        schema = self.metadata.schema()
        ids = [schema.find_field(name).field_id for name in keys.column_names]
        spec = self.metadata.spec() if spec_id is None else self.metadata.spec_by_id(spec_id)
        writer = EqualityDeleteWriter(self.io, f"{self.location}/data", schema, spec, partition, ids)
        writer.write(cast_to_schema(keys, schema.select(*keys.column_names)))
        [delete_file] = writer.close()
        return delete_file

    # -- commits ------------------------------------------------------------------

    def commit(self, added: Sequence[DataFile], operation: str = "append") -> Snapshot:
        """A snapshot adding ``added`` (data and delete files) to the current one."""
        base = self.metadata
        parent = base.current_snapshot()
        snapshot_id = random.getrandbits(62)
        sequence_number = base.next_sequence_number
        manifests = self._new_manifests(snapshot_id, added)
        if parent is not None:
            manifests += read_manifest_list(self.io, parent.manifest_list)
        list_path = f"{self.location}/metadata/snap-{snapshot_id}-1-{uuid.uuid4()}.avro"
        write_manifest_list(self.io, list_path, snapshot_id, parent and parent.snapshot_id, sequence_number, manifests)
        snapshot = Snapshot(
            snapshot_id=snapshot_id,
            parent_snapshot_id=parent and parent.snapshot_id,
            sequence_number=sequence_number,
            timestamp_ms=max(int(time.time() * 1000), base.last_updated_ms + 1),
            manifest_list=list_path,
            summary={"operation": operation},
            schema_id=base.current_schema_id,
        )
        self._write(base.add_snapshot(snapshot).set_branch("main", snapshot_id))
        return snapshot

    def evolve_schema(self, change: Callable[[SchemaUpdate], object]) -> Schema:
        """Apply a schema change (e.g. ``lambda u: u.add_column("x", LongType())``)."""
        update = SchemaUpdate(self.metadata.schema(), self.metadata.last_column_id)
        change(update)
        schema, last_column_id = update.apply(schema_id=max(s.schema_id for s in self.metadata.schemas) + 1)
        self._write(self.metadata.add_schema(schema, last_column_id, make_current=True))
        return schema

    def evolve_spec(self, partition_fields: Sequence[tuple]) -> None:
        """Make a new default spec with these fields (ids reused per Java's rules)."""
        spec = evolve_partition_spec(
            self.metadata.partition_specs, self.metadata.schema(), partition_fields, self.metadata.last_partition_id
        )
        self._write(self.metadata.add_partition_spec(spec, make_default=True))

    def _new_manifests(self, snapshot_id: int, added: Sequence[DataFile]) -> list[ManifestFile]:
        groups: dict[tuple[int, ManifestContent], list[DataFile]] = {}
        for f in added:
            content = ManifestContent.DATA if f.content == DataFileContent.DATA else ManifestContent.DELETES
            groups.setdefault((f.spec_id, content), []).append(f)
        manifests = []
        for (spec_id, content), files in groups.items():
            path = f"{self.location}/metadata/{uuid.uuid4()}-m0.avro"
            entries = [ManifestEntry(ManifestEntryStatus.ADDED, snapshot_id, None, None, f) for f in files]
            manifests.append(
                write_manifest(
                    self.io, path, self.metadata.schema(), self.metadata.spec_by_id(spec_id), snapshot_id, entries, content
                )
            )
        return manifests

    def _write(self, metadata: TableMetadata) -> None:
        previous, previous_updated = self.metadata_location, self.metadata.last_updated_ms
        self.version += 1
        metadata = metadata.with_metadata_log(previous, timestamp_ms=previous_updated).with_last_updated_ms(
            max(int(time.time() * 1000), previous_updated + 1)
        )
        path = f"{self.location}/metadata/{metadata_file_name(self.version)}"
        write_table_metadata(self.io, path, metadata)
        self.metadata, self.metadata_location = metadata, path
