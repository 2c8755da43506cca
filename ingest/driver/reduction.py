"""Upsert reduction: one row per key, the last one in Kafka order.

Within a micro-batch a key may change many times; only its last change
matters to the table (the writer turns it into an equality delete plus, for
an upsert, the final row image). "Last" is Kafka order: the greatest
``(partition, offset, topic)``. A key's records share a partition when
producers key by it, so this is its log order; the topic only breaks ties
between topics, to keep replays deterministic.

The reduction is a Spark window, ``row_number() over (partition by key order
by partition desc, offset desc, topic desc) = 1``: one hash exchange by key,
one external sort that spills, so no process ever holds every key in memory
and the driver sees none of them. (Measured against ``max_by(struct(row),
struct(order))`` grouped by key, which sorts twice around its partial
aggregate: the window is a quarter faster.) ``_floe_stats`` is part of the
window's partition: null for every row, unique for each decode task's stats
row, so those pass through intact.

``cluster_by`` adds leading partition columns: a table partition key that
the key determines, so that one exchange by it serves both the reduction
and the writer's clustering.

:func:`ingest.tasks.latest_change.latest_positions` is the same rule on one
task's rows, in Arrow, for the direct upsert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ingest.tasks.latest_change import KAFKA_ORDER
from ingest.tasks.output import side_row_columns

_RANK = "_floe_rank"


def quoted(name: str) -> str:
    """A top-level column name as a Spark column reference."""
    return "`" + name.replace("`", "``") + "`"


def key_column(path: str) -> str:
    """A dotted key path as a Spark reference (each level quoted)."""
    return ".".join(quoted(part) for part in path.split("."))


def reduce_to_latest(rows: Any, key_paths: Sequence[str], cluster_by: Sequence[str] = ()) -> Any:
    """``rows`` (a DataFrame of decoded rows) with only each key's last change."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not key_paths:
        raise ValueError("upsert reduction needs key columns")
    partition = [F.col(quoted(c)) for c in cluster_by] + [F.col(key_column(p)) for p in key_paths]
    partition += [F.col(quoted(c)) for c in side_row_columns(rows.columns)]
    order = [F.col(quoted(c)).desc() for c in KAFKA_ORDER]
    window = Window.partitionBy(*partition).orderBy(*order)
    ranked = rows.withColumn(_RANK, F.row_number().over(window))
    return ranked.where(F.col(_RANK) == 1).drop(_RANK)
