"""Upsert reduction: one row per key, the last one in Kafka order.

Within a micro-batch a key may change many times; only its last change
matters to the table (the writer turns it into an equality delete plus, for
an upsert, the final row image). "Last" is Kafka order: the greatest
``(partition, offset, topic)``. A key's records share a partition when
producers key by it, so this is its log order; the topic only breaks ties
between topics, to keep replays deterministic.

The reduction is one Spark aggregation, ``max_by(struct(row), struct(order))``
grouped by the key columns: Spark aggregates partially before the shuffle
and finishes with a sort-based aggregate that spills, so no process ever
holds every key in memory, and the driver sees none of them.
"""

from __future__ import annotations

from typing import Any, Sequence

from ingest.decode_batch import OFFSET_COLUMN, PARTITION_COLUMN
from ingest.frame import TOPIC_COLUMN

KAFKA_ORDER = (PARTITION_COLUMN, OFFSET_COLUMN, TOPIC_COLUMN)
_LATEST = "_floe_latest"


def quoted(name: str) -> str:
    """A top-level column name as a Spark column reference."""
    return "`" + name.replace("`", "``") + "`"


def key_column(path: str) -> str:
    """A dotted key path as a Spark reference (each level quoted)."""
    return ".".join(quoted(part) for part in path.split("."))


def reduce_to_latest(rows: Any, key_paths: Sequence[str]) -> Any:
    """``rows`` (a DataFrame of decoded rows, dead letters dropped) with only each key's last change."""
    from pyspark.sql import functions as F

    if not key_paths:
        raise ValueError("upsert reduction needs key columns")
    columns = list(rows.columns)
    keys = [F.col(key_column(p)).alias(f"_floe_key{i}") for i, p in enumerate(key_paths)]
    image = F.struct(*[F.col(quoted(c)) for c in columns])
    order = F.struct(*[F.col(quoted(c)) for c in KAFKA_ORDER])
    latest = rows.groupBy(*keys).agg(F.max_by(image, order).alias(_LATEST))
    return latest.select(*[F.col(f"{_LATEST}.{quoted(c)}").alias(c) for c in columns])
