"""The Kafka rows of one micro-batch, from either source, as the Arrow maps of the batch see them.

With Spark's Kafka source the batch's DataFrame holds the records, and an
Arrow map runs over it. With Floe's source (:mod:`ingest.kafka_source.reader`)
it holds offset ranges, and the map's tasks consume them first
(:func:`~ingest.kafka_source.consume.consume_ranges`): the same function then
decodes, writes or dead-letters the records in the task that read them, and
they never pass through the JVM. Either way the function sees the same
columns (:data:`~ingest.kafka_source.consume.KAFKA_ROW_SCHEMA`).

In a shared query (one query, many tables) a table's rows are its share of
the batch (:class:`~ingest.kafka_source.table_ranges.TableRanges`): the tasks
cut the ranges to its topics and floors before they consume them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pyarrow as pa

from ingest.arrow_udf import ArrowMapFunction, map_in_arrow
from ingest.kafka_source.consume import ConsumeSettings, consume_ranges
from ingest.kafka_source.table_ranges import TableRanges


@dataclass(frozen=True)
class KafkaRows:
    """A batch's DataFrame and how its tasks get records from it (``consume`` None: Spark's source);
    ``ranges``: the table's share of a shared query's batch (Floe's source only)."""

    df: Any
    consume: ConsumeSettings | None = None
    ranges: TableRanges | None = None

    def __post_init__(self) -> None:
        if self.ranges is not None and self.consume is None:
            raise ValueError("a table's share of a batch is cut from Floe's source's ranges; Spark's source has none")

    def map(self, func: ArrowMapFunction, schema: Any | str, headers: bool) -> Any:
        """``mapInArrow(func)`` over the batch's records (with the ``headers`` column only when asked for:
        it is the slowest to ship and to build)."""
        if self.consume is None:
            return map_in_arrow(self.df if headers else self.df.drop("headers"), func, schema)
        settings = replace(self.consume, with_headers=headers)
        return map_in_arrow(self.df, partial(_consumed, func=func, settings=settings, share=self.ranges), schema)


def _consumed(
    ranges: Iterator[pa.RecordBatch],
    func: ArrowMapFunction,
    settings: ConsumeSettings,
    share: TableRanges | None = None,
) -> Iterator[pa.RecordBatch]:
    """The task's ranges (cut to ``share`` when given) consumed, then handed to ``func`` as Kafka rows."""
    return func(consume_ranges(ranges if share is None else share.clamp(ranges), settings))
