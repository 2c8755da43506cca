"""ingest.tasks.direct: one task's frame rows reduced to each key's last change before the direct upsert writes."""

from __future__ import annotations

import json

import pyarrow as pa

from commit.key_index.manifest import empty_manifest
from table.io import FileIO
from ingest.tasks.decode_records import OFFSET_COLUMN, OP_COLUMN, PARTITION_COLUMN
from ingest.tasks.direct import _latest_of_task
from ingest.tasks.frame import (
    BUCKET_COLUMN,
    DELETE_FILE_COLUMN,
    DELETE_POS_COLUMN,
    STATS_COLUMN,
    TOPIC_COLUMN,
    frame_arrow_schema,
)
from ingest.tasks.indexed_writer import IndexPlan
from table.schema import Schema
from table.types import LongType, NestedField, StringType

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()),
                identifier_field_ids=[1])
FRAME = frame_arrow_schema(SCHEMA)
EMPTY_INDEX = IndexPlan(manifest=json.dumps(empty_manifest((1,), 4).to_json()), location="/nonexistent/index",
                        schema=json.dumps(SCHEMA.to_json()), key_ids=(1,), io=FileIO.for_location("/nonexistent/index"))
"""An index with no segment: every key is new (nothing is read from its location)."""


def frame_rows(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{TOPIC_COLUMN: "t", PARTITION_COLUMN: 0, BUCKET_COLUMN: r.get("id", 0) % 4, **r}
                                       for r in rows], FRAME)


def test_a_tasks_batches_reduce_together_and_its_stats_rows_follow_them():
    """A key's last change may be in a later batch than its first; every kept row of every batch reaches the
    writer (a task's rows are not squeezed into one batch), then the stats rows."""
    first = frame_rows([{"id": i % 50, "v": f"a{i}", OP_COLUMN: 0, OFFSET_COLUMN: i} for i in range(100)])
    stats = frame_rows([{STATS_COLUMN: b'{"id": "x", "rows": []}'}])
    second = frame_rows([{"id": 40 + i, "v": f"b{i}", OP_COLUMN: i % 2, OFFSET_COLUMN: 100 + i} for i in range(20)])
    out = list(_latest_of_task(iter([first, stats, second]), EMPTY_INDEX))
    assert out[-1].column(STATS_COLUMN).to_pylist() == [b'{"id": "x", "rows": []}']
    kept = pa.Table.from_batches(out[:-1]).to_pylist()
    assert sorted(r["id"] for r in kept) == list(range(60))
    last = {r["id"]: (r["v"], r[OP_COLUMN]) for r in kept}
    assert last[10] == ("a60", 0) and last[41] == ("b1", 1) and last[59] == ("b19", 1)
    assert {(r[DELETE_FILE_COLUMN], r[DELETE_POS_COLUMN]) for r in kept} == {(None, None)}, "no key was live"
