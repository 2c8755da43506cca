"""Reads planned offset ranges from Kafka inside a Spark task, as Spark's Kafka rows.

:func:`consume_ranges` is the front of every Arrow map that the Python source
feeds (:mod:`ingest.kafka_source.rows`): it turns the batch's range rows
(:data:`RANGE_COLUMNS`) into Arrow batches with the columns of Spark's Kafka
source (:data:`KAFKA_ROW_SCHEMA`), so the decode, write and dead-letter code
runs unchanged, in the same Python task, and the records never enter the JVM.

A range is read exactly, ``[start, until)``, however often Spark retries the
task. Under ``isolation.level=read_committed`` (librdkafka's default) records
of aborted transactions and transaction markers leave gaps in the offsets, so
the end is found by offset, or by the partition's end-of-file event at or past
``until``, never by counting. Offsets below the low watermark (deleted by
retention) are :class:`DataLossError` under ``failOnDataLoss``, else skipped
with a warning, as Spark's source does.

A range that gets no record for a while asks Kafka whether it answers. While
it does not (a broker stopped, restarting or frozen), the task waits,
librdkafka reconnecting with its own jittered backoff, and tries again after
a jittered backoff of its own (:mod:`~ingest.kafka_source.outage`), with one
line when the wait begins and once a minute while it lasts. Only silence
from a Kafka that answers counts towards the stall limit
(:class:`KafkaReadStalled`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.kafka_source.client_log import LibrdkafkaLog, worker_logging
from ingest.kafka_source.offsets import EARLIEST, OffsetRange
from ingest.kafka_source.outage import (
    Backoff,
    Outage,
    in_words,
    is_outage,
    is_refusal,
    kafka_error,
    principal_of,
    refusal_in_words,
)

log = logging.getLogger("floe.ingest")

RANGE_COLUMNS = "topic string, partition int, start_offset long, until_offset long"
"""What the Python source's micro-batch holds: one row per planned range, no record."""

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
KAFKA_ROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", "UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(_HEADER)),
    ]
)
"""The columns of Spark's Kafka source, in the Arrow types its rows reach a Python task with."""

_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}  # librdkafka's NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME -> Kafka's ids


class DataLossError(RuntimeError):
    """Offsets a batch must read are gone (retention deleted them) and ``failOnDataLoss`` is on."""


class KafkaReadStalled(RuntimeError):
    """A range's records did not arrive within the poll timeout, while Kafka answered."""


class KafkaReadRefusedError(PermissionError):
    """Kafka refused this task's read (an ACL, or its credentials): futile to wait, the batch fails."""


def _refused(error: Any, topic: str, partition: int, settings: ConsumeSettings) -> KafkaReadRefusedError:
    return KafkaReadRefusedError(
        f"kafka refused {principal_of(dict(settings.client))} reading {topic}/{partition}: {refusal_in_words(error)}"
    )


@dataclass(frozen=True)
class ConsumeSettings:
    """How a task reads: librdkafka settings (may hold secrets: kept out of ``repr``) and the source options."""

    client: tuple[tuple[str, str], ...] = field(repr=False)
    fail_on_data_loss: bool = True
    with_headers: bool = True
    rows_per_batch: int = 10_000
    poll_timeout_s: float = 120.0
    probe_after_s: float = 10.0  # no record for this long: does Kafka answer? (and the backoff's first step)

    def consumer_config(self) -> dict[str, Any]:
        """A consumer that is assigned ranges: no group membership, no commits, errors instead of resets.

        Three fetch settings differ from librdkafka's defaults (a configured value wins):

        * ``fetch.queue.backoff.ms`` 10 (default 1000): a reused consumer's new range often waited
          1 s for its first record, two empty polls, because the fetcher backed off as if the queue
          were still full of the previous range's prefetched records. Measured in a bench run: 40%
          of the ranges, 1 s each.
        * ``fetch.wait.max.ms`` 10 (default 500): a range that ends at the high watermark leaves a
          fetch waiting at the log end, which should not hold the connection when the next range
          starts. A precaution: not measured on its own (it did not remove the 1 s wait above).
        * ``max.partition.fetch.bytes`` 16 MiB (default 1 MiB): a task reads whole ranges, and bigger
          fetches read them a fifth faster here.
        """
        return {
            "max.partition.fetch.bytes": 16 << 20,
            "fetch.wait.max.ms": 10,
            "fetch.queue.backoff.ms": 10,
            **dict(self.client),
            "group.id": f"floe-source-{uuid.uuid4().hex}",
            # librdkafka's own lines as Floe's, served by consume() rather than printed raw by librdkafka's
            # threads, each kind once a minute (they repeat at every reconnect, and queue while the consumer
            # idles in the pool); errors only: an outage is reported by the task itself, in words
            "logger": LibrdkafkaLog(),
            "log_level": 3,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }


def consume_ranges(
    batches: Iterator[pa.RecordBatch], settings: ConsumeSettings, pool: ConsumerPool | None = None
) -> Iterator[pa.RecordBatch]:
    """Every record of the ranges in ``batches`` (:data:`RANGE_COLUMNS` rows), as Kafka-row batches
    (read by a consumer of ``pool``: by default the worker's own)."""
    with (pool or _CONSUMERS).borrowed(settings) as consumer:
        for batch in batches:
            for row in batch.to_pylist():
                wanted = OffsetRange(row["topic"], row["partition"], row["start_offset"], row["until_offset"])
                yield from _RangeRead(consumer, wanted, settings).batches()


class ConsumerPool:
    """Consumers kept by a Python worker between its tasks, one per client configuration.

    Spark reuses a Python worker for task after task, and a new consumer costs a connection and a
    metadata round trip: a large share of a small batch (Spark's own source caches its consumers
    likewise). A task borrows the consumer, so none is shared by two tasks at once; one whose task
    failed is closed, not returned.
    """

    def __init__(self) -> None:
        self._idle: dict[tuple[tuple[str, str], ...], Any] = {}
        self._lock = threading.Lock()

    @contextmanager
    def borrowed(self, settings: ConsumeSettings) -> Iterator[Any]:
        from confluent_kafka import Consumer

        with self._lock:
            consumer = self._idle.pop(settings.client, None)
        if consumer is None:
            consumer = Consumer(settings.consumer_config())
        try:
            yield consumer
        except BaseException:
            consumer.close()
            raise
        with self._lock:
            spare = self._idle.setdefault(settings.client, consumer)
        if spare is not consumer:
            consumer.close()

    def close_idle(self) -> None:
        """Close the consumers kept between tasks (a worker that is done with a broker)."""
        with self._lock:
            idle, self._idle = list(self._idle.values()), {}
        for consumer in idle:
            consumer.close()


_CONSUMERS = ConsumerPool()


def ranges_batch(ranges: list[OffsetRange]) -> pa.RecordBatch:
    """Range rows (:data:`RANGE_COLUMNS`) as one Arrow batch: what a test or a benchmark feeds in."""
    return pa.record_batch(
        {
            "topic": pa.array([r.topic for r in ranges], pa.string()),
            "partition": pa.array([r.partition for r in ranges], pa.int32()),
            "start_offset": pa.array([r.start for r in ranges], pa.int64()),
            "until_offset": pa.array([r.until for r in ranges], pa.int64()),
        }
    )


def consume_many(
    ranges: Sequence[OffsetRange], settings: ConsumeSettings, pool: ConsumerPool | None = None
) -> Iterator[pa.RecordBatch]:
    """Every record of ``ranges``, read by one consumer assigned to all of them at once: a task of many
    small ranges (a shared query's, one per table's partition) waits for one round of fetches, not for
    one per range, which costs a range about a second. Each batch holds one range's records, in offset
    order; a range whose offsets are gone (retention) is read on its own afterwards, as
    :func:`consume_ranges` reads it."""
    wanted = [r for r in ranges if r.until > max(r.start, 0)]
    if len(wanted) <= 1:
        yield from consume_ranges(iter([ranges_batch(wanted)]) if wanted else iter([]), settings, pool)
        return
    with (pool or _CONSUMERS).borrowed(settings) as consumer:
        read = _ManyRanges(consumer, wanted, settings)
        yield from read.batches()
        for left in read.lost:
            yield from _RangeRead(consumer, left, settings).batches()


class _ManyRanges:
    """Several ranges read together by one assigned consumer (see :func:`consume_many`)."""

    def __init__(self, consumer: Any, ranges: list[OffsetRange], settings: ConsumeSettings) -> None:
        self.consumer = consumer
        self.settings = settings
        self.open = {(r.topic, r.partition): _Reading(r, max(r.start, 0)) for r in ranges}
        self.lost: list[OffsetRange] = []  # ranges whose start retention passed: read on their own after

    def batches(self) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self.consumer.assign(
            [
                TopicPartition(
                    r.range.topic, r.range.partition, OFFSET_BEGINNING if r.range.start == EARLIEST else r.position
                )
                for r in self.open.values()
            ]
        )
        quiet = _Silence(self.consumer, next(iter(self.open.values())).range, self.settings)
        try:
            while self.open:
                messages = self.consumer.consume(num_messages=self.settings.rows_per_batch, timeout=0.5)
                if self._take(messages):
                    quiet.heard()
                else:
                    first = next(iter(self.open.values()))
                    quiet.check(first.position)
                yield from self._ready()
        finally:
            self.consumer.unassign()

    def _take(self, messages: list[Any]) -> bool:
        """File ``messages`` under their ranges; whether any range moved."""
        from confluent_kafka import KafkaError, KafkaException

        moved = False
        for message in messages:
            reading = self.open.get((message.topic(), message.partition()))
            if reading is None:
                continue  # a range done, or left from an earlier assignment of this consumer
            error = message.error()
            if error is None:
                moved = reading.take(message) or moved
            elif error.code() == KafkaError._PARTITION_EOF:
                moved = reading.at_end(message.offset()) or moved
            elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                reading.lost = True
            elif is_refusal(error):
                raise _refused(error, message.topic(), message.partition(), self.settings)
            elif error.fatal():
                raise KafkaException(error)
            else:  # a broker reconnecting and the like: librdkafka retries; the stall deadline bounds it
                log.debug("kafka: %s", error)
        return moved

    def _ready(self) -> Iterator[pa.RecordBatch]:
        """The batches of ranges done or holding a batch's worth; done ranges are dropped (records still
        fetched for them are skipped), lost ones kept to be read on their own."""
        for key, reading in list(self.open.items()):
            done = reading.position >= reading.range.until or reading.lost
            if reading.pending and (done or len(reading.pending) >= self.settings.rows_per_batch):
                yield kafka_rows(reading.pending, self.settings.with_headers)
                reading.pending = []
            if done:
                del self.open[key]
                if reading.lost:
                    self.lost.append(OffsetRange(*key, reading.position, reading.range.until))


class _Reading:
    """Where one range of a :class:`_ManyRanges` read stands, and its records not yet handed on."""

    def __init__(self, wanted: OffsetRange, position: int) -> None:
        self.range = wanted
        self.position = position
        self.pending: list[Any] = []
        self.lost = False

    def take(self, message: Any) -> bool:
        offset = message.offset()
        if offset < self.position:
            return False
        if offset < self.range.until:
            self.pending.append(message)
        self.position = offset + 1
        return True

    def at_end(self, offset: int) -> bool:
        """The partition's end reached at ``offset``: what the range still wanted there were markers."""
        moved = offset > self.position
        self.position = max(self.position, offset)
        return moved


class _RangeRead:
    """One range read by one assigned consumer."""

    def __init__(self, consumer: Any, wanted: OffsetRange, settings: ConsumeSettings) -> None:
        self.consumer = consumer
        self.wanted = wanted
        self.settings = settings

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The range's records. Its start is not checked first (a watermark request costs a round trip per
        task): a start below the low watermark comes back as an offset error, handled then."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        start = self.wanted.start
        self.consumer.assign(
            [TopicPartition(self.wanted.topic, self.wanted.partition, OFFSET_BEGINNING if start == EARLIEST else start)]
        )
        try:
            yield from self._read_from(max(start, 0))
        finally:
            self.consumer.unassign()

    def _lost(self, start: int, low: int) -> None:
        w = self.wanted
        what = (
            f"{w.topic}/{w.partition}: offsets {start}..{min(low, w.until) - 1} were deleted (retention) "
            f"before they were read"
        )
        if self.settings.fail_on_data_loss:
            raise DataLossError(f"{what}; set kafka.fail_on_data_loss: false to skip them")
        log.warning("%s; skipped (fail_on_data_loss is false)", what)

    def _read_from(self, position: int) -> Iterator[pa.RecordBatch]:
        until, pending = self.wanted.until, []
        quiet = _Silence(self.consumer, self.wanted, self.settings)
        while position < until:
            # never ask for more than the range still holds: librdkafka waits out the timeout for a batch
            # it cannot fill (only aborted transactions and markers make the range hold fewer)
            wanted = min(self.settings.rows_per_batch, until - position)
            messages = self.consumer.consume(num_messages=wanted, timeout=0.5)
            records, moved_to = self._records(messages, position) if messages else ([], position)
            if moved_to > position:  # error events (a connection lost...) are not progress
                quiet.heard()
            else:
                quiet.check(position)
            position = moved_to
            pending.extend(records)
            if len(pending) >= self.settings.rows_per_batch or (pending and position >= until):
                yield kafka_rows(pending, self.settings.with_headers)
                pending = []

    def _records(self, messages: list[Any], position: int) -> tuple[list[Any], int]:
        """The records among ``messages`` that belong to the range, and the position after them.

        Records come in offset order, so without events only the last offset is looked at; events (the
        partition's end, an offset gone) take the slow path.
        """
        until, first = self.wanted.until, messages[0]
        mine = (
            first.error() is None
            and first.offset() >= position
            and first.partition() == self.wanted.partition
            and first.topic() == self.wanted.topic
        )
        if mine and all(m.error() is None for m in messages):
            last = messages[-1].offset()
            records = messages if last < until else [m for m in messages if m.offset() < until]
            return records, max(position, last + 1)
        from confluent_kafka import KafkaError, KafkaException

        records = []
        for message in messages:
            error = message.error()
            if error is None:
                if (
                    message.partition() != self.wanted.partition
                    or message.topic() != self.wanted.topic
                    or message.offset() < position
                ):
                    continue  # left from an earlier assignment of this consumer
                if message.offset() < until:
                    records.append(message)
                position = max(position, message.offset() + 1)
            elif error.code() == KafkaError._PARTITION_EOF:
                position = max(position, message.offset())
            elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                position = self._restart_after_loss(position)
            elif is_refusal(error):
                raise _refused(error, self.wanted.topic, self.wanted.partition, self.settings)
            elif error.fatal():
                raise KafkaException(error)
            else:  # a broker reconnecting and the like: librdkafka retries; the stall deadline bounds it
                log.debug("kafka: %s", error)
        return records, position

    def _restart_after_loss(self, position: int) -> int:
        """Retention passed the reader mid-range: fail, or go on at the new low watermark."""
        from confluent_kafka import KafkaException, TopicPartition

        partition = TopicPartition(self.wanted.topic, self.wanted.partition)
        try:
            low, _ = self.consumer.get_watermark_offsets(partition, timeout=self.settings.probe_after_s)
        except KafkaException as exc:
            error = kafka_error(exc)
            if error is None or not is_outage(error):
                raise
            # Kafka went away meanwhile: read on from the same offset, and look again if it is still out of range
            self.consumer.assign([TopicPartition(self.wanted.topic, self.wanted.partition, position)])
            return position
        if low <= position:
            raise KafkaReadStalled(
                f"{self.wanted.topic}/{self.wanted.partition}: offset {position} is out of "
                f"range, yet the low watermark is {low}"
            )
        self._lost(position, low)
        self.consumer.assign([TopicPartition(self.wanted.topic, self.wanted.partition, low)])
        return low


class _Silence:
    """How long a range read has heard nothing, told apart: an outage (Kafka does not answer) is waited
    out; silence from a Kafka that answers counts towards the stall limit."""

    def __init__(self, consumer: Any, wanted: OffsetRange, settings: ConsumeSettings) -> None:
        self._consumer = consumer
        self._wanted = wanted
        self._settings = settings
        self._outage = Outage(Backoff(settings.probe_after_s, 30.0))
        self.heard()

    def heard(self) -> None:
        """A record (or an event) arrived: the read is not silent."""
        now = time.monotonic()
        self._silent_since = now  # silence while Kafka answered, the stall's measure
        self._next_probe = now + self._settings.probe_after_s
        self._outage.answered(now)

    def check(self, position: int) -> None:
        """Nothing arrived: ask Kafka, when due, whether it answers; :class:`KafkaReadStalled` when it
        answers and the range has been silent past the poll timeout."""
        if time.monotonic() < self._next_probe:
            return
        error = self._unanswered()
        now = time.monotonic()
        if error is None:
            if self._outage.answered(now) is not None:
                self._silent_since = now  # back from an outage: the stall limit starts now
            if now - self._silent_since > self._settings.poll_timeout_s:
                w = self._wanted
                raise KafkaReadStalled(
                    f"{w.topic}/{w.partition}: no record for {self._settings.poll_timeout_s:.0f}s "
                    f"at offset {position}, reading up to {w.until}, while Kafka answered"
                )
            self._next_probe = now + self._settings.probe_after_s
            return
        self._silent_since = now  # an outage is not a stall
        if self._outage.failed(now, random.random()):
            worker_logging()
            log.warning(
                "kafka %s is unreachable: %s; the task reading %s/%d at offset %d (up to %d) waits for it "
                "(unreachable for %.0fs)",
                self._bootstrap(),
                in_words(error),
                self._wanted.topic,
                self._wanted.partition,
                position,
                self._wanted.until,
                self._outage.down_for_s(now),
            )
        self._next_probe = now + self._outage.wait_s(now)

    def _unanswered(self) -> Any | None:
        """The error of a metadata request for the range's topic; None when Kafka answered it."""
        from confluent_kafka import KafkaException

        try:
            self._consumer.list_topics(self._wanted.topic, timeout=self._settings.probe_after_s)
        except KafkaException as exc:
            error = kafka_error(exc)
            if error is None or not is_outage(error):
                raise
            return error
        return None

    def _bootstrap(self) -> str:
        return dict(self._settings.client).get("bootstrap.servers", "?")


def kafka_rows(messages: list[Any], with_headers: bool) -> pa.RecordBatch:
    """confluent-kafka messages of one partition as one batch of :data:`KAFKA_ROW_SCHEMA`.

    Without ``headers`` unless wanted: they cost the most to build, and only a header column reads
    them. The topic and partition are one value repeated, and the offsets a run unless transaction
    markers left gaps, so only key, value and timestamp are read message by message.
    """
    first, count = messages[0], len(messages)
    stamps = [m.timestamp() for m in messages]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.repeat(pa.scalar(first.topic(), pa.string()), count),
        pa.repeat(pa.scalar(first.partition(), pa.int32()), count),
        _offsets(messages),
        pa.array([ms * 1000 if kind else None for kind, ms in stamps], pa.int64()).cast(pa.timestamp("us", "UTC")),
        pa.array([_TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps], pa.int32()),
    ]
    if not with_headers:
        return pa.RecordBatch.from_arrays(columns, schema=_ROWS_WITHOUT_HEADERS)
    columns.append(pa.array([_headers(m.headers()) for m in messages], pa.list_(_HEADER)))
    return pa.RecordBatch.from_arrays(columns, schema=KAFKA_ROW_SCHEMA)


_ROWS_WITHOUT_HEADERS = KAFKA_ROW_SCHEMA.remove(KAFKA_ROW_SCHEMA.get_field_index("headers"))


def _offsets(messages: list[Any]) -> pa.Array:
    first, last = messages[0].offset(), messages[-1].offset()
    if last - first + 1 == len(messages):
        return pa.array(np.arange(first, last + 1, dtype=np.int64))
    return pa.array([m.offset() for m in messages], pa.int64())


def _headers(pairs: Any) -> list[Mapping[str, Any]]:
    return [{"key": k, "value": v} for k, v in pairs] if pairs else []
