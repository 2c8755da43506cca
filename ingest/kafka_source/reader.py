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
``secret`` or ``token`` when it prints a plan). Floe adds ``maxPartitions``
(at most that many tasks per batch, each reading several whole ranges:
:func:`~ingest.kafka_source.offsets.tasks_of`) and ``endingOffsets``,
the end of an ``availableNow`` run: Spark would ask a
Python source for its latest offset once and read it all in one batch, so
Floe runs such a query on a back-to-back trigger, holds the latest offsets
to these, and stops the query once a batch has reached them
(:class:`ingest.driver.stream.IngestQuery`), keeping the rate limits.

Spark 4.1's Python streaming API has no admission control: ``latestOffset``
is not told where the batch starts. The planner therefore keeps that itself:
the initial offsets, then the end of every batch it plans. On a restart Spark
tells it where the offset log ends (``setLatestSeenOffset`` plans the empty
batch from there to there), and a replayed batch is planned again before the
next one. An end before its start is refused, never read twice
(:func:`~ingest.kafka_source.offsets.plan_ranges`).

While Kafka does not answer (a broker stopped, restarting or frozen), the
planner plans no batch: ``latestOffset`` answers the current start, so Spark
just waits for the next trigger, and Kafka is tried again after a jittered
backoff (:mod:`~ingest.kafka_source.outage`), not on every trigger. One line
says so when the outage begins and once a minute while it lasts; batches go
on from where they stopped when Kafka answers again. Only where no start is
known yet (a new checkpoint) does the planner wait for Kafka in place.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from ingest.kafka_source.client_log import worker_logging
from ingest.kafka_source.consume import RANGE_COLUMNS
from ingest.kafka_source.offsets import (
    Limits,
    Marks,
    OffsetRange,
    Offsets,
    admit,
    capped,
    high_offsets,
    parse_offsets,
    plan_ranges,
    starting_offsets_now,
    tasks_of,
)
from ingest.kafka_source.outage import Outage, in_words, is_outage, kafka_error
from ingest.kafka_source.watermarks import TopicWatermarks
from runtime.python_worker import skip_unchanged_archive_rereads

log = logging.getLogger("floe.ingest")

SOURCE_NAME = "floe-kafka"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


class RangePartition(InputPartition):
    """One task's offset ranges, read in order."""

    def __init__(self, value: tuple[OffsetRange, ...]) -> None:
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
        self._start: Offsets | None = None
        self._initial_offsets: Offsets | None = None
        ending = parse_offsets(self._options.get("endingoffsets", "latest"), "endingOffsets")
        self._ending: Offsets | None = ending if isinstance(ending, dict) else None
        if self._ending is not None:  # the end of an availableNow run: nothing is held back
            self._limits = Limits(self._limits.max_offsets)
        self._last_batch = float("-inf")  # as Spark's source: the first batch is not held back
        self._kafka: TopicWatermarks | None = None
        self._outage = Outage()

    def initialOffset(self) -> dict:
        self._start = self._initial(self._marks_waiting())
        return self._start

    def latestOffset(self) -> dict:
        marks = self._marks_if_reachable()
        if marks is None and self._start is not None:  # Kafka does not answer: no batch this trigger
            return {t: dict(parts) for t, parts in self._start.items()}
        if marks is None:
            marks = self._marks_waiting()
        if self._start is None:  # a new checkpoint (Spark may ask for the latest offset first)
            self._start = self._initial(marks)
        latest = high_offsets(marks) if self._ending is None else capped(high_offsets(marks), self._ending)
        end = admit(self._start, latest, self._limits, time.monotonic() - self._last_batch)
        if end != self._start:
            self._last_batch = time.monotonic()
        return end

    def _initial(self, marks: Marks) -> Offsets:
        """The initial offsets, resolved once: Spark may ask for them after it planned batch 0 from them.
        (Floe pins ``startingOffsets`` to concrete offsets, kept in the checkpoint, so a replayed batch 0
        in a new process starts where the first one did.)"""
        if self._initial_offsets is None:
            self._initial_offsets = starting_offsets_now(self._options.get("startingoffsets", "latest"), marks)
        return {t: dict(parts) for t, parts in self._initial_offsets.items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        self._start = {t: dict(parts) for t, parts in end.items()}
        ranges = plan_ranges(
            start, end, _positive(self._options, "maxrecordsperpartition"), _positive(self._options, "minpartitions")
        )
        return [RangePartition(task) for task in tasks_of(ranges, _positive(self._options, "maxpartitions"))]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        skip_unchanged_archive_rereads()  # this runs in a Python worker of its own, before the map's
        ranges: tuple[OffsetRange, ...] = partition.value
        for r in ranges:
            yield (r.topic, r.partition, r.start, r.until)

    def commit(self, end: dict) -> None:
        """Nothing: the offsets that matter are in the checkpoint and the table."""

    def stop(self) -> None:
        if self._kafka is not None:
            self._kafka.close()

    def _marks_if_reachable(self) -> Marks | None:
        """The watermarks now; None while Kafka does not answer (and until its next try is due)."""
        if not self._outage.may_try(time.monotonic()):
            return None
        try:
            marks = self._watermarks().watermarks()
        except Exception as exc:
            error = kafka_error(exc)
            if error is None or not is_outage(error):
                raise
            now = time.monotonic()
            if self._outage.failed(now, random.random()):
                worker_logging()
                log.warning(
                    "kafka %s is unreachable: %s; Floe's source plans no batch until it answers "
                    "(unreachable for %.0fs; next try in %.0fs)",
                    self._bootstrap(),
                    in_words(error),
                    self._outage.down_for_s(now),
                    self._outage.wait_s(now),
                )
            return None
        self._outage.answered(time.monotonic())
        return marks

    def _marks_waiting(self) -> Marks:
        """The watermarks, waiting for Kafka as long as it does not answer: where no start is known."""
        while True:
            marks = self._marks_if_reachable()
            if marks is not None:
                return marks
            time.sleep(self._outage.wait_s(time.monotonic()))

    def _watermarks(self) -> TopicWatermarks:
        if self._kafka is None:
            client = {k[len("kafka.") :]: v for k, v in self._options.items() if k.startswith("kafka.")}
            topics = tuple(t for t in self._options.get("subscribe", "").split(",") if t)
            self._kafka = TopicWatermarks(client, topics, self._options.get("subscribepattern"), name="floe-source")
        return self._kafka

    def _bootstrap(self) -> str:
        return self._options.get("kafka.bootstrap.servers", "?")


def source_limits(options: Mapping[str, str]) -> Limits:
    """Admission control from the (lower-case) options."""
    delay = options.get("maxtriggerdelay")
    return Limits(
        _positive(options, "maxoffsetspertrigger"),
        _positive(options, "minoffsetspertrigger"),
        15 * 60.0 if delay is None else duration_s(delay),
    )


def duration_s(text: str) -> float:
    """A Spark duration such as ``15m`` or ``900000ms``, in seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"maxTriggerDelay: expected a duration like '15m', got {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) <= 0:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)
