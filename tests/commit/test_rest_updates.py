"""commit/catalog/rest/updates.py: a metadata change as REST requirements and updates (pure)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from commit.catalog.rest.updates import UnsupportedChange, commit_for
from table.metadata import Snapshot, SnapshotRef, TableMetadata, new_table_metadata
from table.partitioning import UNPARTITIONED_SPEC
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.types import LongType, NestedField, StringType

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "data", StringType()))


def table() -> TableMetadata:
    return new_table_metadata(SCHEMA, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, "/wh/db/t", {"a": "1", "b": "2"})


def snapshot(snapshot_id: int, parent: int | None, sequence: int) -> Snapshot:
    return Snapshot(snapshot_id, parent, sequence, 1_700_000_000_000 + sequence, f"/wh/db/t/metadata/snap-{snapshot_id}.avro",
                    {"operation": "append", "added-records": "1"})


def test_an_append_adds_its_snapshot_and_moves_main_where_it_was() -> None:
    base = table().add_snapshot(snapshot(1, None, 1)).set_branch("main", 1)
    new = base.add_snapshot(snapshot(2, 1, 2)).set_branch("main", 2)
    change = commit_for(base, new)
    assert change.requirements == (
        {"type": "assert-table-uuid", "uuid": str(base.table_uuid)},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1},
    )
    assert change.updates == (
        {"action": "add-snapshot", "snapshot": snapshot(2, 1, 2).to_json()},
        {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 2, "type": "branch"},
    )


def test_the_first_snapshot_asserts_that_main_does_not_exist_yet() -> None:
    base = table()
    change = commit_for(base, base.add_snapshot(snapshot(1, None, 1)).set_branch("main", 1))
    assert {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None} in change.requirements


def test_expiry_properties_tags_and_schemas() -> None:
    base = table().add_snapshot(snapshot(1, None, 1)).add_snapshot(snapshot(2, 1, 2)).set_branch("main", 2)
    base = base.set_ref("old", SnapshotRef(1, "tag"))
    evolved = Schema(*SCHEMA.fields, NestedField(3, "extra", StringType()), schema_id=1)
    new = (base.remove_ref("old").remove_snapshots([1]).set_properties({"a": "9", "c": "3"}).remove_properties(["b"])
           .add_schema(evolved, 3, make_current=True))
    change = commit_for(base, new)
    assert {"action": "remove-snapshots", "snapshot-ids": [1]} in change.updates
    assert {"action": "remove-snapshot-ref", "ref-name": "old"} in change.updates
    assert change.updates.index({"action": "remove-snapshot-ref", "ref-name": "old"}) < \
        change.updates.index({"action": "remove-snapshots", "snapshot-ids": [1]}), "a ref goes before its snapshot"
    assert {"type": "assert-ref-snapshot-id", "ref": "old", "snapshot-id": 1} in change.requirements
    assert {"action": "set-properties", "updates": {"a": "9", "c": "3"}} in change.updates
    assert {"action": "remove-properties", "removals": ["b"]} in change.updates
    assert {"action": "add-schema", "schema": evolved.to_json()} in change.updates
    assert {"action": "set-current-schema", "schema-id": 1} in change.updates
    assert {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2} in change.requirements
    assert {"type": "assert-current-schema-id", "current-schema-id": 0} in change.requirements


def test_nothing_changed_is_only_the_uuid_assertion() -> None:
    base = table()
    assert commit_for(base, base).updates == ()


def test_a_different_table_is_refused() -> None:
    base = table()
    with pytest.raises(UnsupportedChange, match="table UUID changed"):
        commit_for(base, replace(base, table_uuid=uuid.uuid4()))
