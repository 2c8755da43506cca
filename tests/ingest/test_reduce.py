"""ingest.driver.reduction: one row per key, the last in Kafka order, computed by Spark.

Checked against a plain-Python reference on random change streams in which
keys repeat within and across partitions and topics.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from ingest.tasks.decode_records import OFFSET_COLUMN, OP_COLUMN, PARTITION_COLUMN
from ingest.tasks.frame import TOPIC_COLUMN
from ingest.driver.reduction import reduce_to_latest
from ingest.tasks.latest_change import latest_positions

pytestmark = [pytest.mark.spark]


def frame(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema)


FLAT = pa.schema([
    ("id", pa.int64()), ("region", pa.string()), ("value", pa.string()),
    (OP_COLUMN, pa.int8()), (PARTITION_COLUMN, pa.int32()), (OFFSET_COLUMN, pa.int64()), (TOPIC_COLUMN, pa.string()),
])


def random_changes(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    next_offset: dict[tuple[str, int], int] = {}
    rows = []
    for i in range(n):
        topic, partition = rng.choice(["t1", "t2"]), rng.randrange(4)
        offset = next_offset.get((topic, partition), 0)
        next_offset[(topic, partition)] = offset + rng.randrange(1, 3)  # gaps, as compaction leaves
        rows.append({"id": rng.randrange(300), "region": rng.choice(["eu", "us"]), "value": f"v{i}",
                     OP_COLUMN: rng.choice([0, 0, 1]), PARTITION_COLUMN: partition, OFFSET_COLUMN: offset,
                     TOPIC_COLUMN: topic})
    rng.shuffle(rows)  # Spark gives no order either
    return rows


def reference(rows: list[dict[str, Any]], key: Any) -> dict[Any, dict[str, Any]]:
    latest: dict[Any, dict[str, Any]] = {}
    for row in rows:
        k = key(row)
        order = (row[PARTITION_COLUMN], row[OFFSET_COLUMN], row[TOPIC_COLUMN])
        best = latest.get(k)
        if best is None or order > (best[PARTITION_COLUMN], best[OFFSET_COLUMN], best[TOPIC_COLUMN]):
            latest[k] = row
    return latest


def test_each_composite_key_keeps_its_last_change_in_kafka_order(spark):
    rows = random_changes(5000, seed=3)
    df = spark.createDataFrame(frame(rows, FLAT))
    reduced = reduce_to_latest(df, ["id", "region"]).toArrow().to_pylist()
    expected = reference(rows, lambda r: (r["id"], r["region"]))
    assert len(reduced) == len(expected)
    assert {(r["id"], r["region"]): r for r in reduced} == expected


def test_a_later_offset_wins_over_an_earlier_one_whatever_the_input_order(spark):
    rows = [
        {"id": 1, "region": "eu", "value": "second", OP_COLUMN: 0, PARTITION_COLUMN: 0, OFFSET_COLUMN: 11, TOPIC_COLUMN: "t"},
        {"id": 1, "region": "eu", "value": "deleted", OP_COLUMN: 1, PARTITION_COLUMN: 0, OFFSET_COLUMN: 12, TOPIC_COLUMN: "t"},
        {"id": 1, "region": "eu", "value": "first", OP_COLUMN: 0, PARTITION_COLUMN: 0, OFFSET_COLUMN: 10, TOPIC_COLUMN: "t"},
        {"id": 2, "region": "eu", "value": "only", OP_COLUMN: 0, PARTITION_COLUMN: 0, OFFSET_COLUMN: 9, TOPIC_COLUMN: "t"},
    ]
    reduced = reduce_to_latest(spark.createDataFrame(frame(rows, FLAT)), ["id"]).toArrow().to_pylist()
    assert sorted((r["id"], r["value"], r[OP_COLUMN]) for r in reduced) == [(1, "deleted", 1), (2, "only", 0)]


def test_a_nested_key_path_groups_by_the_nested_field(spark):
    schema = pa.schema([
        ("k", pa.struct([("id", pa.int64()), ("x", pa.string())])), ("value", pa.string()),
        (OP_COLUMN, pa.int8()), (PARTITION_COLUMN, pa.int32()), (OFFSET_COLUMN, pa.int64()), (TOPIC_COLUMN, pa.string()),
    ])
    rows = [
        {"k": {"id": i % 7, "x": str(i)}, "value": f"v{i}", OP_COLUMN: 0, PARTITION_COLUMN: 0, OFFSET_COLUMN: i,
         TOPIC_COLUMN: "t"}
        for i in range(50)
    ]
    reduced = reduce_to_latest(spark.createDataFrame(frame(rows, schema)), ["k.id"]).toArrow().to_pylist()
    assert sorted(r["value"] for r in reduced) == sorted(f"v{i}" for i in range(43, 50))
    assert all(r["k"]["x"] == r["value"][1:] for r in reduced), "the whole row image of the winner is kept"


def test_the_reduction_is_a_shuffle_and_an_external_sort_not_a_collection(spark):
    df = spark.createDataFrame(frame(random_changes(100, seed=1), FLAT))
    plan = reduce_to_latest(df, ["id"])._jdf.queryExecution().executedPlan().toString()
    assert "Exchange hashpartitioning(id" in plan, plan
    assert "Sort [id" in plan and "Window [row_number()" in plan, plan  # both spill to disk


def test_a_partition_key_the_key_determines_shares_the_exchange(spark):
    rows = [dict(r, pkey=str(r["id"] % 3)) for r in random_changes(500, seed=4)]
    schema = FLAT.append(pa.field("pkey", pa.string()))
    df = spark.createDataFrame(frame(rows, schema)).repartition("pkey")
    reduced = reduce_to_latest(df, ["id"], cluster_by=["pkey"])
    plan = reduced._jdf.queryExecution().executedPlan().toString()
    assert plan.count("Exchange") == 1, plan
    expected = reference(rows, lambda r: r["id"])
    assert {r["id"]: r for r in reduced.toArrow().to_pylist()} == expected


# ---------------------------------------------------------------------------
# latest_positions: the same rule on one task's rows, in Arrow (the direct upsert)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_one_tasks_rows_keep_each_keys_last_change_in_kafka_order_and_their_input_order(seed):
    rows = random_changes(3000, seed=seed)
    batch = pa.RecordBatch.from_pylist(rows, FLAT)
    kept_at = latest_positions(batch, pa.table({"id": batch.column("id"), "region": batch.column("region")}))
    assert list(kept_at) == sorted(kept_at), "the kept rows stay in their input order"
    reduced = batch.take(pa.array(kept_at))
    expected = reference(rows, lambda r: (r["id"], r["region"]))
    kept = reduced.to_pylist()
    assert {(r["id"], r["region"]): r for r in kept} == expected and len(kept) == len(expected)
    values = batch.column("value").to_pylist()
    positions = [values.index(r["value"]) for r in kept]
    assert positions == sorted(positions), "the kept rows stay in their input order"


def test_a_task_without_repeated_keys_keeps_every_row_as_it_came():
    rows = [{"id": i, "region": "eu", "value": f"v{i}", OP_COLUMN: 0, PARTITION_COLUMN: 0, OFFSET_COLUMN: 100 - i,
             TOPIC_COLUMN: "t"} for i in range(50)]
    batch = pa.RecordBatch.from_pylist(rows, FLAT)
    assert list(latest_positions(batch, pa.table({"id": batch.column("id")}))) == list(range(50))
