"""One table's share of a shared query's offset ranges: its topics, each partition from its own floor.

A shared query (:mod:`ingest.driver.shared_batch`) reads every topic its tables need in one batch. A
table takes the ranges of the topics it reads (listed, or matched by its pattern), and of each
partition only the offsets at or past its *floor*: the table's committed offset, the next one it has
not landed. The table's own commits are then the truth of what it holds, whatever the checkpoint
replays: a record below a table's floor is never landed twice. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

Floors = tuple[tuple[str, int, int], ...]
"""(topic, partition, next offset to land), sorted: hashable, and small to ship to a task."""


@dataclass(frozen=True)
class TableRanges:
    """The topics one table reads, listed or by ``pattern``, and its floors (see the module)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    floors: Floors = field(default=())

    def reads(self, topic: str) -> bool:
        """Whether the table reads ``topic``."""
        if topic in self._listed:
            return True
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None

    def floor(self, topic: str, partition: int) -> int:
        """The first offset of ``topic``/``partition`` the table still needs (0: it holds none)."""
        return self._floors.get((topic, partition), 0)

    def with_floors(self, committed: Mapping[str, Mapping[int, int]]) -> TableRanges:
        """These topics, from the table's ``committed`` offsets (topic -> partition -> next offset) on."""
        floors = tuple(sorted((t, p, o) for t, parts in committed.items() if self.reads(t) for p, o in parts.items()))
        return replace(self, floors=floors)

    def only_mine(self, offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, int]]:
        """``offsets`` (topic -> partition -> offset) of the topics this table reads."""
        return {t: dict(parts) for t, parts in offsets.items() if self.reads(t)}

    def clamp(self, ranges: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Range rows (:data:`~ingest.kafka_source.consume.RANGE_COLUMNS`) cut to this table: the rows of
        its topics, each starting at the table's floor at the earliest, and none left empty."""
        for batch in ranges:
            rows = [r for r in batch.to_pylist() if self.reads(r["topic"])]
            for row in rows:
                row["start_offset"] = max(row["start_offset"], self.floor(row["topic"], row["partition"]))
            kept = [r for r in rows if r["start_offset"] < r["until_offset"]]
            if kept:
                yield pa.RecordBatch.from_pylist(kept, schema=batch.schema)

    def records_from_floor(self, records: pa.RecordBatch) -> pa.RecordBatch:
        """Kafka rows of one range (one topic and partition) without those below the table's floor."""
        if records.num_rows == 0:
            return records
        topic = records.column("topic")[0].as_py()
        partition = records.column("partition")[0].as_py()
        floor = self.floor(topic, partition)
        if floor == 0 or pc.min(records.column("offset")).as_py() >= floor:
            return records
        return records.filter(pc.greater_equal(records.column("offset"), floor))

    @cached_property
    def _listed(self) -> frozenset[str]:
        return frozenset(self.topics)

    @cached_property
    def _floors(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.floors}
