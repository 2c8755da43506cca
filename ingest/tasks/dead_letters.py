"""Dead letters: what is published about a record that cannot land, and publishing it.

:func:`build_dead_letters` turns the rejected records (each with its
:class:`~ingest.tasks.record_errors.RecordError`) into an Arrow batch that keeps the
original key, value and headers, so the record can be inspected and replayed,
and adds ``floe.*`` headers saying where it came from and why it was
rejected. :class:`DeadLetterSink` publishes such a batch to a Kafka topic and
raises unless every record was acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ingest.kafka_source.client_log import LibrdkafkaLog
from ingest.kafka_source.outage import principal_of
from ingest.tasks.record_errors import RecordError

# ---------------------------------------------------------------------------
# The dead-letter batch
# ---------------------------------------------------------------------------

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
"""Kafka headers as Spark's Kafka source and sink represent them."""

SOURCE_TOPIC = "floe.source.topic"
SOURCE_PARTITION = "floe.source.partition"
SOURCE_OFFSET = "floe.source.offset"
ERROR_CLASS = "floe.error.class"
ERROR_MESSAGE = "floe.error.message"
ERROR_FIELD = "floe.error.field"

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
        ("source_topic", pa.string()),
        ("source_partition", pa.int32()),
        ("source_offset", pa.int64()),
        ("error_class", pa.string()),
        ("error_message", pa.string()),
        ("error_field", pa.string()),
    ]
)
"""Key, value and headers are what is produced to the dead-letter topic (the
headers carry the ``floe.*`` entries too); the other columns repeat the
provenance and the error as plain columns for metrics and logs."""


def build_dead_letters(kafka: pa.RecordBatch, failures: Mapping[int, RecordError]) -> pa.RecordBatch:
    """The dead letters of ``kafka`` (Spark Kafka-source rows) for the failed row indices.

    Rows come out in offset order within the batch (ascending index). The
    batch needs ``value``, ``topic``, ``partition`` and ``offset``; ``key`` and
    ``headers`` are carried over when present.
    """
    indices = sorted(failures)
    if not indices:
        return empty_dead_letters()
    rows = kafka.take(pa.array(indices, pa.int64()))
    keys = _column(rows, "key")
    values = rows.column("value").to_pylist()
    headers = _column(rows, "headers")
    topics = rows.column("topic").to_pylist()
    partitions = rows.column("partition").to_pylist()
    offsets = rows.column("offset").to_pylist()
    errors = [failures[i] for i in indices]
    all_headers = [
        list(original or []) + _floe_headers(topic, partition, offset, error)
        for original, topic, partition, offset, error in zip(headers, topics, partitions, offsets, errors)
    ]
    columns = [
        keys,
        values,
        all_headers,
        topics,
        partitions,
        offsets,
        [type(e).__name__ for e in errors],
        [str(e) for e in errors],
        [e.field for e in errors],
    ]
    arrays = [pa.array(c, f.type) for c, f in zip(columns, DEAD_LETTER_SCHEMA)]
    return pa.RecordBatch.from_arrays(arrays, schema=DEAD_LETTER_SCHEMA)


def empty_dead_letters() -> pa.RecordBatch:
    """A dead-letter batch without rows."""
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in DEAD_LETTER_SCHEMA], schema=DEAD_LETTER_SCHEMA)


def _column(rows: pa.RecordBatch, name: str) -> list[Any]:
    if rows.schema.get_field_index(name) < 0:
        return [None] * rows.num_rows
    return rows.column(name).to_pylist()


def _floe_headers(topic: str, partition: int, offset: int, error: RecordError) -> list[dict[str, Any]]:
    pairs = [
        (SOURCE_TOPIC, topic),
        (SOURCE_PARTITION, str(partition)),
        (SOURCE_OFFSET, str(offset)),
        (ERROR_CLASS, type(error).__name__),
        (ERROR_MESSAGE, str(error)),
        (ERROR_FIELD, error.field),
    ]
    return [{"key": k, "value": None if v is None else v.encode("utf-8")} for k, v in pairs]


# ---------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------


class DeadLetterDeliveryError(RuntimeError):
    """Some dead letters were not acknowledged by Kafka; the batch must not commit."""


class DeadLetterSink:
    """Produces dead-letter batches to one topic, synchronously.

    :meth:`send` returns only when Kafka acknowledged every record, and raises
    :class:`DeadLetterDeliveryError` otherwise, so that the caller can fail the
    micro-batch before its offsets are committed: dead letters are delivered
    at least once (a retried batch may produce them again).
    """

    def __init__(self, producer_config: Mapping[str, Any], topic: str, flush_timeout: float = 30.0) -> None:
        from confluent_kafka import Producer  # imported here: executors that never dead-letter skip it

        # librdkafka's own lines go through Python logging: Floe's format, secrets masked
        self._producer = Producer({"acks": "all", "logger": LibrdkafkaLog(), **producer_config})
        self._topic = topic
        self._flush_timeout = flush_timeout
        self._principal = principal_of(producer_config)

    @property
    def topic(self) -> str:
        return self._topic

    def send(self, dead_letters: pa.RecordBatch) -> int:
        """Produce every row of ``dead_letters``; the number of records delivered."""
        failures: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        rows = dead_letters.select(["key", "value", "headers"]).to_pylist()
        for row in rows:
            headers = [(h["key"], h["value"]) for h in row["headers"] or []]
            self._produce(row["key"], row["value"], headers, on_delivery)
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise DeadLetterDeliveryError(
                f"{remaining} of {len(rows)} dead letters not acknowledged by topic "
                f"{self._topic!r} within {self._flush_timeout}s"
            )
        if failures:
            raise DeadLetterDeliveryError(
                f"{len(failures)} of {len(rows)} dead letters failed on topic {self._topic!r} "
                f"(written as {self._principal}): {failures[0]}"
            )
        return len(rows)

    def _produce(self, key: bytes | None, value: bytes | None, headers: list, callback: Any) -> None:
        while True:
            try:
                self._producer.produce(self._topic, value=value, key=key, headers=headers, on_delivery=callback)
                return
            except BufferError:
                self._producer.poll(0.5)  # the local queue is full: let deliveries drain

    def close(self) -> None:
        """Flush what is still queued; raises if it cannot be delivered."""
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise DeadLetterDeliveryError(f"{remaining} dead letters still queued for {self._topic!r}")
