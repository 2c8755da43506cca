"""Builders shared by the table/ tests."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from table.io import FileIO
from table.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from table.metadata import Snapshot, TableMetadata, new_table_metadata
from table.metadata_json import parse_table_metadata
from table.partitioning import UNPARTITIONED_SPEC, PartitionSpec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
    UUIDType,
)


def nested_schema() -> Schema:
    """id, a struct, a list of structs, a map with struct values, and a list of ints."""
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(
            2,
            "location",
            StructType(
                NestedField(3, "zone", StringType(), required=True),
                NestedField(4, "Lon", DoubleType()),
            ),
            required=True,
        ),
        NestedField(
            5,
            "points",
            ListType(6, StructType(NestedField(7, "x", LongType(), required=True), NestedField(8, "y", LongType()))),
        ),
        NestedField(9, "props", MapType(10, StringType(), 11, StructType(NestedField(12, "v", StringType())))),
        NestedField(13, "tags", ListType(14, IntegerType(), element_required=False)),
        schema_id=3,
        identifier_field_ids=[1],
    )


class LocalIO:
    """The two FileIO methods the metadata functions use, over the local disk."""

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        Path(path).write_bytes(data)


# A v2 metadata file laid out as Iceberg Java's TableMetadataParser writes it,
# with the field values of the spec's examples.
JAVA_METADATA = """{
  "format-version" : 2,
  "table-uuid" : "fb072c92-a02b-11e9-ae9c-1bb7bc9eca94",
  "location" : "s3://b/wh/data.db/table",
  "last-sequence-number" : 2,
  "last-updated-ms" : 1555100955770,
  "last-column-id" : 5,
  "current-schema-id" : 1,
  "schemas" : [ {
    "type" : "struct",
    "schema-id" : 0,
    "identifier-field-ids" : [ 1 ],
    "fields" : [ {
      "id" : 1,
      "name" : "id",
      "required" : true,
      "type" : "long"
    }, {
      "id" : 2,
      "name" : "data",
      "required" : false,
      "type" : "string"
    }, {
      "id" : 3,
      "name" : "ts",
      "required" : false,
      "type" : "timestamptz"
    } ]
  }, {
    "type" : "struct",
    "schema-id" : 1,
    "identifier-field-ids" : [ 1 ],
    "fields" : [ {
      "id" : 1,
      "name" : "id",
      "required" : true,
      "type" : "long"
    }, {
      "id" : 2,
      "name" : "data",
      "required" : false,
      "type" : "string",
      "doc" : "payload"
    }, {
      "id" : 3,
      "name" : "ts",
      "required" : false,
      "type" : "timestamptz"
    }, {
      "id" : 4,
      "name" : "tags",
      "required" : false,
      "type" : {
        "type" : "list",
        "element-id" : 5,
        "element" : "string",
        "element-required" : true
      }
    } ]
  } ],
  "default-spec-id" : 0,
  "partition-specs" : [ {
    "spec-id" : 0,
    "fields" : [ {
      "name" : "ts_day",
      "transform" : "day",
      "source-id" : 3,
      "field-id" : 1000
    }, {
      "name" : "id_bucket",
      "transform" : "bucket[16]",
      "source-id" : 1,
      "field-id" : 1001
    } ]
  } ],
  "last-partition-id" : 1001,
  "default-sort-order-id" : 1,
  "sort-orders" : [ {
    "order-id" : 0,
    "fields" : [ ]
  }, {
    "order-id" : 1,
    "fields" : [ {
      "transform" : "identity",
      "source-id" : 2,
      "direction" : "asc",
      "null-order" : "nulls-first"
    }, {
      "transform" : "bucket[4]",
      "source-id" : 1,
      "direction" : "desc",
      "null-order" : "nulls-last"
    } ]
  } ],
  "properties" : {
    "write.format.default" : "parquet",
    "commit.retry.num-retries" : "4"
  },
  "current-snapshot-id" : 3051729675574597004,
  "refs" : {
    "main" : {
      "snapshot-id" : 3051729675574597004,
      "type" : "branch"
    },
    "test" : {
      "snapshot-id" : 3055729675574597004,
      "type" : "tag",
      "max-ref-age-ms" : 10000000
    },
    "audit" : {
      "snapshot-id" : 3055729675574597004,
      "type" : "branch",
      "min-snapshots-to-keep" : 2,
      "max-snapshot-age-ms" : 86400000
    }
  },
  "snapshots" : [ {
    "sequence-number" : 1,
    "snapshot-id" : 3055729675574597004,
    "timestamp-ms" : 1515100955770,
    "summary" : {
      "operation" : "append",
      "added-data-files" : "1",
      "added-records" : "10"
    },
    "manifest-list" : "s3://b/wh/data.db/table/metadata/snap-3055729675574597004-1-a.avro",
    "schema-id" : 0
  }, {
    "sequence-number" : 2,
    "snapshot-id" : 3051729675574597004,
    "parent-snapshot-id" : 3055729675574597004,
    "timestamp-ms" : 1555100955770,
    "summary" : {
      "operation" : "overwrite"
    },
    "manifest-list" : "s3://b/wh/data.db/table/metadata/snap-3051729675574597004-1-b.avro",
    "schema-id" : 1
  } ],
  "statistics" : [ {
    "snapshot-id" : 3051729675574597004,
    "statistics-path" : "s3://b/wh/data.db/table/metadata/stats.puffin",
    "file-size-in-bytes" : 413,
    "file-footer-size-in-bytes" : 42,
    "blob-metadata" : [ {
      "type" : "apache-datasketches-theta-v1",
      "snapshot-id" : 3051729675574597004,
      "sequence-number" : 2,
      "fields" : [ 1 ]
    } ]
  } ],
  "partition-statistics" : [ {
    "snapshot-id" : 3055729675574597004,
    "statistics-path" : "s3://b/wh/data.db/table/metadata/partition-stats.parquet",
    "file-size-in-bytes" : 100
  } ],
  "snapshot-log" : [ {
    "timestamp-ms" : 1515100955770,
    "snapshot-id" : 3055729675574597004
  }, {
    "timestamp-ms" : 1555100955770,
    "snapshot-id" : 3051729675574597004
  } ],
  "metadata-log" : [ {
    "timestamp-ms" : 1515100955770,
    "metadata-file" : "s3://b/wh/data.db/table/metadata/00000-a.metadata.json"
  } ]
}"""


FIRST, SECOND = 3055729675574597004, 3051729675574597004


def java_metadata() -> TableMetadata:
    return parse_table_metadata(JAVA_METADATA, "s3://b/wh/data.db/table/metadata/00001-b.metadata.json")


# Columns of every primitive kind that filters bind to.
FILTER_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "x", DoubleType()),
    NestedField(3, "s", StringType()),
    NestedField(4, "f", FloatType()),
    NestedField(5, "n", IntegerType()),
    NestedField(6, "point", StructType(NestedField(7, "px", IntegerType()))),
    NestedField(8, "d", DecimalType(9, 2)),
    NestedField(9, "day", DateType()),
    NestedField(10, "ts", TimestamptzType()),
    NestedField(11, "u", UUIDType()),
    NestedField(12, "b", BinaryType()),
    NestedField(13, "Mixed", BooleanType()),
)


class HandTable:
    """A table whose snapshots are written by hand with table/ primitives.

    Each commit writes one manifest per (content, spec) of the files it adds
    and a manifest list that keeps every earlier manifest; snapshot ids count
    1, 2, ... and timestamps are 1000 times the id unless given. Unlike
    ``tests.support.table_builder.HandWrittenTable``, nothing is random, so
    tests can name snapshots and time-travel by timestamp.
    """

    def __init__(self, location: str, schema: Schema, spec: PartitionSpec = UNPARTITIONED_SPEC) -> None:
        self.location = location
        self.io = FileIO.for_location(location)
        md = new_table_metadata(schema, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, location, timestamp_ms=1)
        self.metadata: TableMetadata = md if not spec.fields else md.add_partition_spec(spec, make_default=True)
        self.manifests: list[ManifestFile] = []
        self.snapshot_id = 0

    @property
    def schema(self) -> Schema:
        return self.metadata.schema()

    def commit(
        self, data: Sequence[DataFile] = (), deletes: Sequence[DataFile] = (), ts: Optional[int] = None
    ) -> int:
        """Add the files as a new snapshot on main; returns its id."""
        parent = self.snapshot_id or None
        self.snapshot_id += 1
        sid, seq = self.snapshot_id, self.metadata.next_sequence_number
        new = [
            self._manifest(sid, content, spec_id, [f for f in files if f.spec_id == spec_id])
            for content, files in ((ManifestContent.DATA, data), (ManifestContent.DELETES, deletes))
            for spec_id in sorted({f.spec_id for f in files})
        ]
        manifest_list = f"{self.location}/metadata/snap-{sid}.avro"
        write_manifest_list(self.io, manifest_list, sid, parent, seq, new + self.manifests)
        self.manifests = read_manifest_list(self.io, manifest_list)
        operation = "overwrite" if deletes else "append"
        timestamp = ts if ts is not None else 1000 * sid
        snapshot = Snapshot(sid, parent, seq, timestamp, manifest_list, {"operation": operation}, self.schema.schema_id)
        self.metadata = self.metadata.add_snapshot(snapshot).set_branch("main", sid)
        return sid

    def _manifest(self, sid: int, content: ManifestContent, spec_id: int, files: list[DataFile]) -> ManifestFile:
        entries = [ManifestEntry(ManifestEntryStatus.ADDED, None, None, None, f) for f in files]
        path = f"{self.location}/metadata/m{sid}-{content.name}-{spec_id}.avro"
        spec = self.metadata.spec_by_id(spec_id)
        return write_manifest(self.io, path, self.schema, spec, sid, entries, content)

