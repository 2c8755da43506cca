"""A real table in a real catalog for the commit-path tests: files written by
``table/`` writers, commits made by :class:`SnapshotProducer`, rows read back
through ``table/scan.py`` and ``table/reader.py``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import pyarrow as pa

from commit.catalog.base import Catalog
from commit.snapshot_producer import SnapshotOperation, SnapshotProducer
from table.arrow_schema import cast_to_schema
from table.deletes.writers import EqualityDeleteWriter, PositionDeleteWriter
from table.io import FileIO
from table.manifest import DataFile, ManifestEntryStatus, ManifestFile, read_manifest_entries, read_manifest_list
from table.metadata import Snapshot, TableMetadata
from table.parquet.partitioned import write_partitioned
from table.partitioning import UNPARTITIONED_SPEC, build_partition_spec
from table.scan import TableScan
from table.schema import Schema
from table.types import LongType, NestedField, StringType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "data", StringType(), required=False),
    NestedField(3, "category", StringType(), required=False),
)


@dataclass
class CommitTable:
    """One table of a catalog, with helpers to write files, commit and read rows."""

    catalog: Catalog
    identifier: str
    io: FileIO

    @classmethod
    def create(
        cls,
        catalog: Catalog,
        name: str = "db.t",
        *,
        partitioned: bool = False,
        properties: Optional[dict[str, str]] = None,
    ) -> CommitTable:
        namespace = name.rsplit(".", 1)[0]
        if not catalog.namespace_exists(namespace):
            catalog.create_namespace(namespace)
        spec = build_partition_spec(SCHEMA, [("identity", "category")]) if partitioned else UNPARTITIONED_SPEC
        loaded = catalog.create_table(name, SCHEMA, spec, properties=properties)
        return cls(catalog, name, loaded.io)

    # -- state -----------------------------------------------------------------

    def metadata(self) -> TableMetadata:
        return self.catalog.load_table(self.identifier).metadata

    def metadata_location(self) -> str:
        return self.catalog.load_pointer(self.identifier).metadata_location

    @property
    def location(self) -> str:
        return self.metadata().location

    def current(self) -> Snapshot:
        snapshot = self.metadata().current_snapshot()
        assert snapshot is not None
        return snapshot

    def manifests(self, snapshot: Optional[Snapshot] = None) -> list[ManifestFile]:
        snapshot = snapshot or self.current()
        return read_manifest_list(self.io, snapshot.manifest_list)

    def live_paths(self, snapshot: Optional[Snapshot] = None) -> set[str]:
        """Paths of the live data and delete files of a snapshot."""
        return {
            e.data_file.file_path
            for m in self.manifests(snapshot)
            for e in read_manifest_entries(self.io, m)
            if e.status != ManifestEntryStatus.DELETED
        }

    def rows(self, snapshot_id: Optional[int] = None) -> list[dict[str, Any]]:
        """The table's rows (merged with deletes), sorted by id."""
        scan = TableScan(self.io, self.metadata(), snapshot_id=snapshot_id)
        return sorted(scan.to_arrow().to_pylist(), key=lambda r: r["id"])

    def ids(self) -> list[int]:
        return [r["id"] for r in self.rows()]

    def files_on_disk(self) -> set[str]:
        """Every file under the table location (tests only: commits never list)."""
        root = self.location
        found = set()
        for directory, _, names in os.walk(root):
            found.update(os.path.join(directory, n) for n in names)
        return found

    # -- files -----------------------------------------------------------------

    def write_data(self, ids: Sequence[int], category: str = "a") -> DataFile:
        """One data file holding rows ``ids`` (data = "v<id>"), in partition ``category``."""
        md = self.metadata()
        rows = pa.table(
            {"id": pa.array(ids, pa.int64()), "data": [f"v{i}" for i in ids], "category": [category] * len(ids)}
        )
        [data_file] = write_partitioned(self.io, md.location, md.schema(), md.spec(), [cast_to_schema(rows, md.schema())])
        return data_file

    def write_position_deletes(self, data_file: DataFile, positions: Iterable[int]) -> DataFile:
        md = self.metadata()
        writer = PositionDeleteWriter(
            self.io, f"{md.location}/data", md.schema(), md.spec_by_id(data_file.spec_id), data_file.partition
        )
        for pos in positions:
            writer.delete(data_file.file_path, pos)
        [delete_file] = writer.close()
        return delete_file

    def write_equality_deletes(self, ids: Sequence[int], partition: tuple = ()) -> DataFile:
        md = self.metadata()
        schema = md.schema()
        partition = partition if md.spec().fields else ()
        writer = EqualityDeleteWriter(self.io, f"{md.location}/data", schema, md.spec(), partition, [1])
        writer.write(cast_to_schema(pa.table({"id": pa.array(ids, pa.int64())}), schema.select("id")))
        [delete_file] = writer.close()
        return delete_file

    # -- commits ---------------------------------------------------------------

    def producer(self, operation: SnapshotOperation, **options: Any) -> SnapshotProducer:
        options.setdefault("sleep", lambda seconds: None)
        return SnapshotProducer(self.catalog, self.identifier, operation, **options)

    def commit(self, operation: SnapshotOperation, **options: Any) -> Snapshot:
        return self.producer(operation, **options).commit()

    def append(self, ids: Sequence[int], category: str = "a") -> tuple[DataFile, Snapshot]:
        from commit.operations.fast_append import FastAppend

        data_file = self.write_data(ids, category)
        return data_file, self.commit(FastAppend([data_file]))
