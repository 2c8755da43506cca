"""The work a driver does while it records the classes for :mod:`runtime.class_archive`.

It touches what a Floe driver touches before and during its batches: the
session, a shuffle with generated code, and a streaming query over a Python data source (as Floe's own
Kafka source is) with a ``foreachBatch`` sink and an ``availableNow``
trigger. A class it misses is simply loaded from its jar, as without an
archive. Run only by ``runtime.class_archive``, with the dump options in
its environment.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from runtime.spark_session import build_spark_session

_ROWS = 1_000


class _CountingSource(DataSource):
    """A streaming source of ``_ROWS`` numbered rows, in two batches' worth of offsets."""

    @classmethod
    def name(cls) -> str:
        return "floe_class_archive_counter"

    def schema(self) -> str:
        return "id long, text string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _CountingReader()


class _CountingReader(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"next": 0}

    def latestOffset(self) -> dict:
        return {"next": _ROWS}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        middle = (start["next"] + end["next"]) // 2
        return [InputPartition((start["next"], middle)), InputPartition((middle, end["next"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        low, high = partition.value
        for number in range(low, high):
            yield number, str(number)


def run() -> None:
    session = build_spark_session("floe-class-archive")
    frame = session.range(0, 100_000).selectExpr("id", "id % 7 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().collect()
    session.dataSource.register(_CountingSource)
    seen: list[int] = []
    with tempfile.TemporaryDirectory(prefix="floe-class-archive-") as checkpoint:
        query = (
            session.readStream.format(_CountingSource.name())
            .load()
            .writeStream.foreachBatch(lambda batch, _: seen.append(len(batch.toArrow())))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    if sum(seen) != _ROWS:
        raise RuntimeError(f"the workload's stream gave {sum(seen)} rows, not {_ROWS}")
    session.stop()


if __name__ == "__main__":
    run()
