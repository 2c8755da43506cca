"""Floe's Kafka source for Spark Structured Streaming (``format("floe-kafka")``).

A Python data source (``pyspark.sql.datasource``) that plans micro-batches
the way Spark's Kafka source does, and reads nothing itself: each batch is
one row per offset range (:data:`~ingest.kafka_source.consume.RANGE_COLUMNS`),
and the Arrow maps of the batch consume those ranges in their own Python
tasks (:mod:`ingest.kafka_source.rows`). Spark still keeps the offsets in its
checkpoint, schedules the tasks and retries them; a retried task reads
exactly its range again.

Options, named as Spark's Kafka source names them (Spark hands them over in
lower case): ``subscribe`` or ``subscribePattern``, ``startingOffsets``,
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``,
``minPartitions``, ``maxRecordsPerPartition``, and ``kafka.<name>`` for the
librdkafka settings (Spark redacts those whose names hold ``password``,
``secret`` or ``token`` when it prints a plan). Floe adds ``resumeOffsets``:
where the checkpoint's last batch ended (:func:`resume_offsets`), and
``endingOffsets``, the end of an ``availableNow`` run: Spark would ask a
Python source for its latest offset once and read it all in one batch, so
Floe runs such a query on a back-to-back trigger, holds the latest offsets
to these, and stops the query once a batch has reached them
(:class:`ingest.stream.IngestQuery`), keeping the rate limits.

Spark 4.1's Python streaming API has no admission control: ``latestOffset``
is not told where the batch starts. The planner therefore keeps that itself:
the initial offsets, then the end of every batch it plans (a replayed batch
is planned again before the next one), and on restart ``resumeOffsets``.
Floe sets that from the checkpoint, and drops the rate limits when the
checkpoint's offset log cannot be read (a limit from a wrong start could end
a batch before it begins: :func:`~ingest.kafka_source.offsets.plan_ranges`
refuses that rather than read anything twice).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, Iterator, Mapping, Optional, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from ingest.kafka_source.consume import RANGE_COLUMNS
from ingest.kafka_source.offsets import (
    Limits,
    OffsetRange,
    Offsets,
    admit,
    capped,
    parse_offsets,
    plan_ranges,
    resolve_start,
)
from ingest.kafka_source.watermarks import TopicWatermarks

log = logging.getLogger("floe.ingest")

SOURCE_NAME = "floe-kafka"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


class RangePartition(InputPartition):
    """One task's offset range."""

    def __init__(self, value: OffsetRange) -> None:
        super().__init__(value)


class FloeKafkaSource(DataSource):
    """``spark.readStream.format("floe-kafka")``: micro-batches of offset ranges."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RANGE_COLUMNS

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaRangeReader(dict(self.options))


class KafkaRangeReader(DataSourceStreamReader):
    """Plans batches from the watermarks; runs in Spark's planner process on the driver."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = {k.lower(): v for k, v in options.items()}
        self._limits = source_limits(self._options)
        self._start: Optional[Offsets] = None
        resume = self._options.get("resumeoffsets")
        if resume:
            parsed = parse_offsets(resume, "resumeOffsets")
            self._start = parsed if isinstance(parsed, dict) else None
        ending = parse_offsets(self._options.get("endingoffsets", "latest"), "endingOffsets")
        self._ending: Optional[Offsets] = ending if isinstance(ending, dict) else None
        self._last_batch = time.monotonic()
        self._kafka: Optional[TopicWatermarks] = None

    def initialOffset(self) -> dict:
        self._start = self._initial(self._marks())
        return self._start

    def latestOffset(self) -> dict:
        marks = self._marks()
        if self._start is None:  # a new checkpoint (Spark may ask for the latest offset first)
            self._start = self._initial(marks)
        latest = _side(marks, 1) if self._ending is None else capped(_side(marks, 1), self._ending)
        end = admit(self._start, latest, self._limits, time.monotonic() - self._last_batch)
        if end != self._start:
            self._last_batch = time.monotonic()
        return end

    def _initial(self, marks: dict[str, dict[int, tuple[int, int]]]) -> Offsets:
        wanted = parse_offsets(self._options.get("startingoffsets", "latest"), "startingOffsets")
        return resolve_start(wanted, _side(marks, 0), _side(marks, 1))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._start = {t: dict(parts) for t, parts in end.items()}
        ranges = plan_ranges(start, end, _positive(self._options, "maxrecordsperpartition"),
                             _positive(self._options, "minpartitions"))
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        r: OffsetRange = partition.value
        yield (r.topic, r.partition, r.start, r.until)

    def commit(self, end: dict) -> None:
        """Nothing: the offsets that matter are in the checkpoint and the table."""

    def stop(self) -> None:
        if self._kafka is not None:
            self._kafka.close()

    def _marks(self) -> dict[str, dict[int, tuple[int, int]]]:
        if self._kafka is None:
            client = {k[len("kafka."):]: v for k, v in self._options.items() if k.startswith("kafka.")}
            topics = tuple(t for t in self._options.get("subscribe", "").split(",") if t)
            self._kafka = TopicWatermarks(client, topics, self._options.get("subscribepattern"), name="floe-source")
        return self._kafka.watermarks()


def source_limits(options: Mapping[str, str]) -> Limits:
    """Admission control from the (lower-case) options."""
    delay = options.get("maxtriggerdelay")
    return Limits(_positive(options, "maxoffsetspertrigger"), _positive(options, "minoffsetspertrigger"),
                  15 * 60.0 if delay is None else duration_s(delay))


def duration_s(text: str) -> float:
    """A Spark duration such as ``15m`` or ``900000ms``, in seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"maxTriggerDelay: expected a duration like '15m', got {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def resume_offsets(offset_log_entry: str) -> Optional[Offsets]:
    """The source offsets of one entry of the checkpoint's offset log (``offsets/<batch>``): Spark writes
    a version line, the batch's metadata, then one line per source (Floe's query has one)."""
    lines = offset_log_entry.splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        return None
    try:
        value = json.loads(lines[2])
    except ValueError:
        return None
    parsed = parse_offsets(json.dumps(value), "the checkpoint's offset log") if isinstance(value, dict) else None
    return parsed if isinstance(parsed, dict) else None


def _side(marks: Mapping[str, Mapping[int, tuple[int, int]]], index: int) -> Offsets:
    return {t: {str(p): lh[index] for p, lh in parts.items()} for t, parts in marks.items()}


def _positive(options: Mapping[str, str], name: str) -> Optional[int]:
    value = options.get(name)
    return None if value is None else int(value)
