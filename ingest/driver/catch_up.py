"""Ranges that reach back past a batch's own start: for tables whose committed offsets are behind it.

A table that waited for its commit interval (:mod:`ingest.driver.commit_clock`)
has records below the batch's start: the batches it sat out. When it is due,
the batch reads each partition from the lowest floor of the tables landing it
(:func:`catch_up_ranges`, pure), as a DataFrame of range rows of its own
(:func:`ranges_frame`), which the tasks consume like the source's. Every table
still takes only its share from its own floor on
(:class:`~ingest.kafka_source.table_ranges.TableRanges`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ingest.kafka_source.consume import RANGE_COLUMNS
from ingest.kafka_source.offsets import OffsetRange, tasks_of
from ingest.kafka_source.table_ranges import TableRanges

PerPartition = Mapping[str, Mapping[int, int]]


def catch_up_ranges(starts: PerPartition, ends: PerPartition, tables: Iterable[TableRanges]) -> list[OffsetRange]:
    """The batch's partitions, each ``[lowest floor of the tables reading it, planned end)``, where some
    floor is below the planned start; empty when none is (the batch's own ranges then do). Pure."""
    reach: dict[tuple[str, int], int] = {}
    for table in tables:
        for topic, partition, floor in table.floors:
            key = (topic, partition)
            reach[key] = min(floor, reach.get(key, floor))
    behind = any(
        reach.get((t, p), end) < starts.get(t, {}).get(p, end) for t, parts in ends.items() for p, end in parts.items()
    )
    if not behind:
        return []
    ranges = []
    for topic, parts in sorted(ends.items()):
        for partition, end in sorted(parts.items()):
            start = min(starts.get(topic, {}).get(partition, end), reach.get((topic, partition), end))
            if start < end:
                ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


def ranges_frame(spark: Any, ranges: list[OffsetRange], max_tasks: int | None) -> Any:
    """``ranges`` as the rows of a DataFrame (:data:`RANGE_COLUMNS`) built from local data (no Python worker
    runs for it), in the order the source would pack them into tasks
    (:func:`~ingest.kafka_source.offsets.tasks_of`): Spark slices local rows into contiguous partitions."""
    rows = [(r.topic, r.partition, r.start, r.until) for task in tasks_of(ranges, max_tasks) for r in task]
    return spark.createDataFrame(rows, RANGE_COLUMNS)
