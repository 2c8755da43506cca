"""Tests for table.metadata: the model, its updates, file names, time travel."""

from __future__ import annotations

import copy
import gzip
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.errors import NotFoundError, SchemaError, ValidationError
from table.metadata import (
    MetadataLogEntry,
    Snapshot,
    SnapshotLogEntry,
    SnapshotRef,
    TableMetadata,
    metadata_file_name,
    new_table_metadata,
    parse_metadata_version,
)
from table.metadata_json import parse_table_metadata
from table.partitioning import UNPARTITIONED_SPEC, PartitionField, PartitionSpec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER, NullOrder, SortDirection, SortField, SortOrder
from table.transforms import BucketTransform, DayTransform, IdentityTransform
from table.types import (
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)
from tests.table.helpers import FIRST, JAVA_METADATA, SECOND, java_metadata



# --------------------------------------------------------------------------
# parsing a Java-written file
# --------------------------------------------------------------------------


def test_parse_java_metadata_fields() -> None:
    md = java_metadata()
    assert md.format_version == 2
    assert md.table_uuid == uuid.UUID("fb072c92-a02b-11e9-ae9c-1bb7bc9eca94")
    assert md.location == "s3://b/wh/data.db/table"
    assert (md.last_sequence_number, md.last_updated_ms, md.last_column_id) == (2, 1555100955770, 5)
    assert [s.schema_id for s in md.schemas] == [0, 1]
    assert md.schema().find_field("tags.element").field_id == 5
    assert md.schema().find_field("data").doc == "payload"
    assert md.schema_by_id(0).identifier_field_ids == (1,)
    assert md.spec() == PartitionSpec(
        0, (PartitionField(3, 1000, DayTransform(), "ts_day"), PartitionField(1, 1001, BucketTransform(16), "id_bucket"))
    )
    assert md.last_partition_id == 1001
    assert md.sort_order() == SortOrder(
        1,
        (
            SortField(2, IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_FIRST),
            SortField(1, BucketTransform(4), SortDirection.DESC, NullOrder.NULLS_LAST),
        ),
    )
    assert md.sort_order_by_id(0) == UNSORTED_SORT_ORDER
    assert md.properties == {"write.format.default": "parquet", "commit.retry.num-retries": "4"}
    assert md.current_snapshot_id == SECOND
    assert md.refs == {
        "main": SnapshotRef(SECOND, "branch"),
        "test": SnapshotRef(FIRST, "tag", max_ref_age_ms=10000000),
        "audit": SnapshotRef(FIRST, "branch", min_snapshots_to_keep=2, max_snapshot_age_ms=86400000),
    }
    assert md.snapshots[1] == Snapshot(
        snapshot_id=SECOND,
        parent_snapshot_id=FIRST,
        sequence_number=2,
        timestamp_ms=1555100955770,
        manifest_list="s3://b/wh/data.db/table/metadata/snap-3051729675574597004-1-b.avro",
        summary={"operation": "overwrite"},
        schema_id=1,
    )
    assert md.snapshots[0].operation == "append"
    assert md.snapshots[0].summary["added-records"] == "10"
    assert md.snapshot_log == (SnapshotLogEntry(1515100955770, FIRST), SnapshotLogEntry(1555100955770, SECOND))
    assert md.metadata_log == (
        MetadataLogEntry(1515100955770, "s3://b/wh/data.db/table/metadata/00000-a.metadata.json"),
    )
    assert md.statistics[0]["statistics-path"].endswith("stats.puffin")
    assert md.partition_statistics[0]["file-size-in-bytes"] == 100


def test_java_metadata_round_trips_to_the_same_json() -> None:
    md = java_metadata()
    assert md.to_json() == json.loads(JAVA_METADATA)
    assert parse_table_metadata(json.dumps(md.to_json())) == md


def test_accessors() -> None:
    md = java_metadata()
    assert md.current_snapshot() == md.snapshots[1]
    assert md.snapshot_for_ref("test") == md.snapshots[0]
    assert md.snapshot_for_ref("main") == md.snapshots[1]
    assert md.snapshot_for_ref("nope") is None
    assert [s.snapshot_id for s in md.ancestors_of(SECOND)] == [SECOND, FIRST]
    assert md.next_sequence_number == 3
    with pytest.raises(NotFoundError, match="snapshot 7"):
        md.snapshot_by_id(7)
    with pytest.raises(NotFoundError, match="schema with id 9"):
        md.schema_by_id(9)
    with pytest.raises(NotFoundError, match="partition spec with id 9"):
        md.spec_by_id(9)


def test_snapshot_as_of_uses_the_snapshot_log() -> None:
    md = java_metadata()
    assert md.snapshot_as_of(1515100955770).snapshot_id == FIRST
    assert md.snapshot_as_of(1555100955769).snapshot_id == FIRST
    assert md.snapshot_as_of(1555100955770).snapshot_id == SECOND
    assert md.snapshot_as_of(9999999999999).snapshot_id == SECOND
    with pytest.raises(NotFoundError, match="at or before 1515100955769"):
        md.snapshot_as_of(1515100955769)


def test_refs_missing_main_is_derived_from_current_snapshot() -> None:
    obj = json.loads(JAVA_METADATA)
    del obj["refs"]
    md = parse_table_metadata(json.dumps(obj))
    assert md.refs == {"main": SnapshotRef(SECOND, "branch")}


@pytest.mark.parametrize("value", [-1, None, "absent"])
def test_no_current_snapshot(value: Any) -> None:
    obj = json.loads(JAVA_METADATA)
    obj["refs"] = {}
    if value == "absent":
        del obj["current-snapshot-id"]
    else:
        obj["current-snapshot-id"] = value
    md = parse_table_metadata(json.dumps(obj))
    assert md.current_snapshot_id is None and md.current_snapshot() is None
    assert md.to_json()["current-snapshot-id"] == -1  # what v2 readers, Java included, expect


# --------------------------------------------------------------------------
# file names
# --------------------------------------------------------------------------


def test_metadata_file_names() -> None:
    name = metadata_file_name(7)
    assert name.startswith("00007-") and name.endswith(".metadata.json")
    uuid.UUID(name[len("00007-") : -len(".metadata.json")])
    assert metadata_file_name(7) != name
    assert metadata_file_name(123456).startswith("123456-")
    assert metadata_file_name(2, compressed=True).endswith(".gz.metadata.json")
    with pytest.raises(ValidationError):
        metadata_file_name(-1)


@pytest.mark.parametrize(
    ("path", "version"),
    [
        ("s3://b/t/metadata/00042-6f1c2a3e-0000-4000-8000-000000000000.metadata.json", 42),
        ("/t/metadata/00003-abc.gz.metadata.json", 3),
        ("/t/metadata/00003-abc.metadata.json.gz", 3),
        ("/t/metadata/v12.metadata.json", 12),
        ("/t/metadata/v12.gz.metadata.json", 12),
        ("/t/metadata/abc.metadata.json", -1),
        ("/t/metadata/version-hint.text", -1),
    ],
)
def test_parse_metadata_version(path: str, version: int) -> None:
    assert parse_metadata_version(path) == version


@given(st.integers(0, 10**7))
def test_metadata_version_round_trip(version: int) -> None:
    assert parse_metadata_version("s3://b/t/metadata/" + metadata_file_name(version)) == version


# --------------------------------------------------------------------------
# table creation
# --------------------------------------------------------------------------


def creation_inputs() -> tuple[Schema, PartitionSpec, SortOrder]:
    schema = Schema(
        NestedField(10, "id", LongType(), required=True),
        NestedField(11, "ts", TimestamptzType()),
        NestedField(12, "loc", StructType(NestedField(13, "lat", DoubleType()), NestedField(14, "city", StringType()))),
        NestedField(15, "tags", ListType(16, StringType())),
        identifier_field_ids=[10],
    )
    spec = PartitionSpec(
        5,
        (PartitionField(11, 1010, DayTransform(), "ts_day"), PartitionField(14, 1003, IdentityTransform(), "city")),
    )
    order = SortOrder(4, (SortField(10, BucketTransform(8), SortDirection.DESC),))
    return schema, spec, order


def test_new_table_metadata() -> None:
    schema, spec, order = creation_inputs()
    table_uuid = uuid.uuid4()
    md = new_table_metadata(schema, spec, order, "s3://b/t/", {"k": "v"}, table_uuid, timestamp_ms=1234)
    assert md.table_uuid == table_uuid and md.location == "s3://b/t"
    assert (md.last_sequence_number, md.last_updated_ms, md.last_column_id) == (0, 1234, 7)
    assert md.schema().schema_id == 0
    assert [md.schema().find_column_name(i) for i in range(1, 8)] == [
        "id", "ts", "loc", "tags", "loc.lat", "loc.city", "tags.element"
    ]
    assert md.schema().identifier_field_ids == (1,)
    assert md.spec() == PartitionSpec(
        0, (PartitionField(2, 1000, DayTransform(), "ts_day"), PartitionField(6, 1001, IdentityTransform(), "city"))
    )
    assert md.last_partition_id == 1001
    assert md.sort_order() == SortOrder(1, (SortField(1, BucketTransform(8), SortDirection.DESC),))
    assert md.properties == {"k": "v"}
    assert md.snapshots == () and md.current_snapshot() is None and md.refs == {}


def test_new_unpartitioned_unsorted_table() -> None:
    schema, _, _ = creation_inputs()
    md = new_table_metadata(schema, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, "/t", {})
    assert md.last_partition_id == 999
    assert md.default_sort_order_id == 0 and md.sort_order().is_unsorted
    assert isinstance(md.table_uuid, uuid.UUID)


def test_new_table_rejects_bad_inputs() -> None:
    schema, spec, order = creation_inputs()
    with pytest.raises(ValidationError, match="format-version"):
        new_table_metadata(schema, spec, order, "/t", {"format-version": "1"})
    assert "format-version" not in new_table_metadata(schema, spec, order, "/t", {"format-version": "2"}).properties
    with pytest.raises(ValidationError, match="99"):
        new_table_metadata(schema, PartitionSpec(0, (PartitionField(99, 1000, IdentityTransform(), "x"),)), order, "/t")
    with pytest.raises(SchemaError, match="day"):
        new_table_metadata(schema, PartitionSpec(0, (PartitionField(10, 1000, DayTransform(), "x"),)), order, "/t")


@settings(deadline=None)  # the first example imports pyiceberg
@given(st.sampled_from(["partitioned", "unpartitioned"]))
def test_new_table_agrees_with_pyiceberg(kind: str) -> None:
    from pyiceberg.partitioning import PartitionSpec as PySpec
    from pyiceberg.schema import Schema as PySchema
    from pyiceberg.table.metadata import new_table_metadata as py_new_table_metadata
    from pyiceberg.table.sorting import SortOrder as PyOrder

    schema, spec, order = creation_inputs()
    if kind == "unpartitioned":
        spec, order = UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER
    theirs = py_new_table_metadata(
        PySchema.model_validate_json(json.dumps(schema.to_json())),
        PySpec.model_validate_json(json.dumps(spec.to_json())),
        PyOrder.model_validate_json(json.dumps(order.to_json())),
        "s3://b/t",
        {"k": "v"},
    )
    parsed = parse_table_metadata(theirs.model_dump_json(), "pyiceberg")
    ours = new_table_metadata(schema, spec, order, "s3://b/t", {"k": "v"}, parsed.table_uuid,
                              timestamp_ms=parsed.last_updated_ms)
    assert parsed == ours


# --------------------------------------------------------------------------
# snapshots and refs
# --------------------------------------------------------------------------


def empty_table() -> TableMetadata:
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
    return new_table_metadata(schema, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, "/t", {}, timestamp_ms=1000)


def snap(snapshot_id: int, parent: int | None, seq: int, ts: int, op: str = "append") -> Snapshot:
    return Snapshot(snapshot_id, parent, seq, ts, f"/t/metadata/snap-{snapshot_id}.avro", {"operation": op}, 0)


def test_commit_flow_updates_current_refs_and_log() -> None:
    md = empty_table().add_snapshot(snap(1, None, 1, 2000))
    assert md.current_snapshot() is None and md.last_sequence_number == 1 and md.last_updated_ms == 2000
    md = md.set_branch("main", 1)
    assert md.current_snapshot_id == 1 and md.refs["main"] == SnapshotRef(1, "branch")
    assert md.snapshot_log == (SnapshotLogEntry(2000, 1),)
    md = md.add_snapshot(snap(2, 1, 2, 3000, "delete")).set_branch("main", 2)
    assert md.snapshot_as_of(3000).snapshot_id == 2 and md.snapshot_as_of(2999).snapshot_id == 1
    assert [s.snapshot_id for s in md.ancestors_of(2)] == [2, 1]
    assert md.current_snapshot().operation == "delete"


def test_rollback_logs_at_the_given_time() -> None:
    md = empty_table().add_snapshot(snap(1, None, 1, 2000)).set_branch("main", 1)
    md = md.add_snapshot(snap(2, 1, 2, 3000)).set_branch("main", 2)
    rolled = md.set_branch("main", 1, timestamp_ms=5000)
    assert rolled.current_snapshot_id == 1 and rolled.last_updated_ms == 5000
    assert rolled.snapshot_log[-1] == SnapshotLogEntry(5000, 1)
    assert rolled.snapshot_as_of(4000).snapshot_id == 2
    now_rolled = md.set_branch("main", 1)
    assert now_rolled.snapshot_log[-1].timestamp_ms >= 3000


def test_other_branches_and_tags_leave_main_alone() -> None:
    md = empty_table().add_snapshot(snap(1, None, 1, 2000)).set_branch("main", 1)
    md = md.add_snapshot(snap(2, 1, 2, 3000))
    md = md.set_ref("audit", SnapshotRef(2, "branch", min_snapshots_to_keep=3)).set_branch("audit", 1)
    assert md.refs["audit"] == SnapshotRef(1, "branch", min_snapshots_to_keep=3)
    md = md.set_ref("v1", SnapshotRef(2, "tag"))
    assert md.current_snapshot_id == 1 and len(md.snapshot_log) == 1
    with pytest.raises(ValidationError, match="tag"):
        md.set_branch("v1", 1)
    with pytest.raises(ValidationError, match="branch"):
        md.set_ref("main", SnapshotRef(1, "tag"))
    with pytest.raises(NotFoundError, match="snapshot 9"):
        md.set_branch("main", 9)
    assert md.remove_ref("v1").refs.keys() == {"main", "audit"}
    no_main = md.remove_ref("main")
    assert no_main.current_snapshot_id is None and "main" not in no_main.refs
    with pytest.raises(NotFoundError, match="'nope'"):
        md.remove_ref("nope")


def test_add_snapshot_validation() -> None:
    md = empty_table().add_snapshot(snap(1, None, 1, 2000))
    with pytest.raises(ValidationError, match="already exists"):
        md.add_snapshot(snap(1, None, 2, 2000))
    with pytest.raises(ValidationError, match="sequence number 1"):
        md.add_snapshot(snap(2, 1, 1, 2000))
    with pytest.raises(ValidationError, match="operation"):
        Snapshot(3, None, 3, 1, "/m", {"added-files": "1"})


def test_remove_snapshots() -> None:
    md = java_metadata()
    removed = md.remove_snapshots([FIRST])
    assert [s.snapshot_id for s in removed.snapshots] == [SECOND]
    assert set(removed.refs) == {"main"}  # refs to the removed snapshot go with it
    assert removed.snapshot_log == (SnapshotLogEntry(1555100955770, SECOND),)
    assert removed.partition_statistics == () and len(removed.statistics) == 1
    assert list(removed.ancestors_of(SECOND)) == [removed.snapshots[0]]  # the parent expired
    gone = md.remove_snapshots([SECOND])
    assert gone.current_snapshot_id is None and "main" not in gone.refs and gone.statistics == ()
    assert md.remove_snapshots([123]) is md


def test_snapshot_log_is_cut_before_an_expired_snapshot() -> None:
    md = empty_table()
    for i in range(1, 5):
        md = md.add_snapshot(snap(i, i - 1 or None, i, 1000 * (i + 1))).set_branch("main", i)
    md = md.set_branch("main", 2, timestamp_ms=9000)  # the log now reads 1, 2, 3, 4, 2
    trimmed = md.remove_snapshots([3])
    assert [e.snapshot_id for e in trimmed.snapshot_log] == [4, 2]


# --------------------------------------------------------------------------
# schemas, specs, sort orders, properties, metadata log
# --------------------------------------------------------------------------


def test_add_schema_assigns_or_reuses_ids() -> None:
    md = empty_table()
    wider = Schema(*md.schema().fields, NestedField(3, "n", IntegerType()), schema_id=77)
    md2 = md.add_schema(wider, 3)
    assert [s.schema_id for s in md2.schemas] == [0, 1] and md2.current_schema_id == 0
    assert md2.last_column_id == 3
    md3 = md2.add_schema(wider, 3, make_current=True)
    assert len(md3.schemas) == 2 and md3.current_schema_id == 1
    assert md3.add_schema(md.schema(), 3, make_current=True).current_schema_id == 0
    with pytest.raises(ValidationError, match="below the current"):
        md2.add_schema(wider, 2)
    with pytest.raises(ValidationError, match="field id 3"):
        md.add_schema(wider, 2)
    with pytest.raises(NotFoundError):
        md.set_current_schema(5)


def test_add_partition_spec() -> None:
    md = empty_table()
    spec = PartitionSpec(9, (PartitionField(1, 1000, BucketTransform(4), "id_bucket"),))
    md2 = md.add_partition_spec(spec, make_default=True)
    assert md2.spec() == PartitionSpec(1, spec.fields) and md2.last_partition_id == 1000
    assert md2.add_partition_spec(spec) == md2
    assert md2.set_default_spec(0).spec() == UNPARTITIONED_SPEC
    with pytest.raises(SchemaError):
        md.add_partition_spec(PartitionSpec(1, (PartitionField(5, 1000, IdentityTransform(), "x"),)))


def test_add_sort_order() -> None:
    md = empty_table()
    order = SortOrder(5, (SortField(2),))
    md2 = md.add_sort_order(order, make_default=True)
    assert md2.sort_order() == SortOrder(1, order.fields)
    assert md2.add_sort_order(UNSORTED_SORT_ORDER, make_default=True).default_sort_order_id == 0
    with pytest.raises(ValidationError, match="99"):
        md.add_sort_order(SortOrder(1, (SortField(99),)))


def test_properties() -> None:
    md = empty_table().set_properties({"a": "1", "b": "2"}).set_properties({"a": "3"})
    assert md.properties == {"a": "3", "b": "2"}
    assert md.remove_properties(["a", "missing"]).properties == {"b": "2"}
    with pytest.raises(ValidationError, match="'a'"):
        md.set_properties({"a": 1})  # type: ignore[dict-item]


def test_metadata_log_keeps_newest_entries() -> None:
    md = empty_table()
    for i in range(5):
        md = md.with_metadata_log(f"/t/metadata/{i}.metadata.json", 3, timestamp_ms=i)
    assert [e.timestamp_ms for e in md.metadata_log] == [2, 3, 4]
    md = md.set_properties({"write.metadata.previous-versions-max": "1"})
    assert md.with_metadata_log("/t/x", timestamp_ms=9).metadata_log == (MetadataLogEntry(9, "/t/x"),)
    md = md.set_properties({"write.metadata.previous-versions-max": "many"})
    with pytest.raises(ValidationError, match="previous-versions-max"):
        md.with_metadata_log("/t/x", timestamp_ms=9)


def test_default_metadata_log_size_is_100() -> None:
    md = empty_table()
    for i in range(105):
        md = md.with_metadata_log(f"/t/{i}", timestamp_ms=i)
    assert len(md.metadata_log) == 100 and md.metadata_log[0].timestamp_ms == 5


def test_metadata_is_immutable() -> None:
    md = empty_table()
    with pytest.raises(AttributeError):
        md.location = "/elsewhere"  # type: ignore[misc]
    md.set_properties({"a": "b"})
    assert md.properties == {}


# --------------------------------------------------------------------------
# hypothesis: generated histories
# --------------------------------------------------------------------------

OPERATIONS = st.sampled_from(["append", "replace", "overwrite", "delete"])


@st.composite
def histories(draw: st.DrawFn) -> TableMetadata:
    """A table with random commits, branch moves, tags, evolution and expiry."""
    md = empty_table()
    ids = draw(st.lists(st.integers(1, 2**63 - 1), min_size=1, max_size=8, unique=True))
    clock = 1000
    for snapshot_id in ids:
        clock += draw(st.integers(1, 10**6))
        parent = draw(st.sampled_from([None, *(s.snapshot_id for s in md.snapshots)]))
        summary = {"operation": draw(OPERATIONS), **draw(st.dictionaries(st.text(max_size=5).filter(lambda k: k != "operation"), st.text(max_size=5)))}
        snapshot = Snapshot(snapshot_id, parent, md.next_sequence_number, clock, f"/m/{snapshot_id}", summary,
                            md.current_schema_id)
        md = md.add_snapshot(snapshot)
        branch = draw(st.sampled_from(["main", "main", "dev", None]))
        if branch:
            md = md.set_branch(branch, snapshot_id)
        if draw(st.booleans()):
            md = md.set_ref(f"tag{snapshot_id % 7}", SnapshotRef(snapshot_id, "tag", max_ref_age_ms=draw(st.integers(1, 10**9))))
        if draw(st.booleans()):
            md = md.with_metadata_log(f"/t/metadata/{clock}.metadata.json", timestamp_ms=clock)
    if draw(st.booleans()):
        column = NestedField(md.last_column_id + 1, "extra", IntegerType())
        md = md.add_schema(Schema(*md.schema().fields, column), md.last_column_id + 1, make_current=True)
    expired = draw(st.sets(st.sampled_from(ids)))
    return md.remove_snapshots(expired)


@settings(max_examples=60)
@given(histories())
def test_history_json_round_trip(md: TableMetadata) -> None:
    text = json.dumps(md.to_json())
    assert parse_table_metadata(text) == md
    assert parse_table_metadata(gzip.compress(text.encode())) == md


@settings(max_examples=60)
@given(histories())
def test_history_invariants(md: TableMetadata) -> None:
    if md.current_snapshot_id is not None:
        assert md.refs["main"].snapshot_id == md.current_snapshot_id
        assert md.snapshot_log[-1].snapshot_id == md.current_snapshot_id
        assert md.snapshot_as_of(md.last_updated_ms + 1).snapshot_id == md.current_snapshot_id
    for entry in md.snapshot_log:
        md.snapshot_by_id(entry.snapshot_id)  # no log entry outlives its snapshot
    for snapshot in md.snapshots:
        chain = list(md.ancestors_of(snapshot.snapshot_id))
        assert chain[0] == snapshot
        assert all(a.sequence_number > b.sequence_number for a, b in zip(chain, chain[1:]))


@settings(max_examples=40, deadline=None)
@given(histories())
def test_history_agrees_with_pyiceberg(md: TableMetadata) -> None:
    from pyiceberg.table.metadata import TableMetadataUtil

    theirs = TableMetadataUtil.parse_raw(json.dumps(md.to_json()))
    assert theirs.current_snapshot_id == md.current_snapshot_id
    assert {name: ref.snapshot_id for name, ref in theirs.refs.items()} == {
        name: ref.snapshot_id for name, ref in md.refs.items()
    }
    assert parse_table_metadata(theirs.model_dump_json()) == md


def test_copy_of_json_is_independent() -> None:
    md = java_metadata()
    obj = md.to_json()
    mutated = copy.deepcopy(obj)
    mutated["properties"]["x"] = "y"
    assert md.properties.get("x") is None
