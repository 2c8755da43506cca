"""Executor side of the dead letters: produce them before the table commit.

:func:`send_dead_letters` is a ``mapInArrow`` body over a batch's dead
letters (key, value, headers with Floe's ``floe.*`` entries). Each task opens
one :class:`~ingest.dead_letters.DeadLetterSink` and returns only how many
records Kafka acknowledged; the sink raises when any was not, which fails
the task, then the batch, before anything is committed. A replayed batch
produces its dead letters again: they are delivered at least once.

:class:`BadRecordError` is what the ``fail`` policy raises on the driver.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Iterator, Optional

import pyarrow as pa

from ingest.dead_letters import HEADER_TYPE, DeadLetterSink
from ingest.decode_batch import DecodeSpec, decode_batch

SENT_DDL = "sent long"


@dataclass(frozen=True)
class DeadLetterTarget:
    """The dead-letter topic and librdkafka producer settings (may hold secrets)."""

    topic: str
    producer_config: tuple[tuple[str, str], ...]


def send_dead_letters(batches: Iterator[pa.RecordBatch], target: DeadLetterTarget) -> Iterator[pa.RecordBatch]:
    """Produce every dead letter of this task; yields one row: the number acknowledged."""
    sink: Optional[DeadLetterSink] = None
    sent = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if sink is None:
            sink = DeadLetterSink(dict(target.producer_config), target.topic)
        sent += sink.send(dead_letter_batch(batch))
    if sink is not None:
        sink.close()
    yield pa.RecordBatch.from_arrays([pa.array([sent], pa.int64())], names=["sent"])


def dead_letter_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``key``, ``value`` and ``headers`` (originals first, then the pickled ones) to produce."""
    built = [pickle.loads(h) for h in batch.column("floe_headers").to_pylist()]
    if batch.schema.get_field_index("original") >= 0:
        originals = [[(h["key"], h["value"]) for h in row or []] for row in batch.column("original").to_pylist()]
    else:
        originals = [[] for _ in built]
    headers = [[{"key": k, "value": v} for k, v in o + b] for o, b in zip(originals, built)]
    return pa.RecordBatch.from_arrays(
        [batch.column("key"), batch.column("value"), pa.array(headers, HEADER_TYPE)], names=["key", "value", "headers"]
    )


def decode_and_send(batches: Iterator[pa.RecordBatch], decode: DecodeSpec,
                    target: DeadLetterTarget) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over Kafka rows (headers included): decode, produce only the dead letters.

    The direct path's second pass (:mod:`ingest.direct`), run only for a batch
    that has bad records; yields one row: the number acknowledged.
    """
    sink: Optional[DeadLetterSink] = None
    sent = 0
    for batch in batches:
        dead = decode_batch(batch, decode).dead_letters
        if dead.num_rows:
            if sink is None:
                sink = DeadLetterSink(dict(target.producer_config), target.topic)
            sent += sink.send(dead)
    if sink is not None:
        sink.close()
    yield pa.RecordBatch.from_arrays([pa.array([sent], pa.int64())], names=["sent"])


class BadRecordError(RuntimeError):
    """A record could not be landed and the table's policy is ``fail``.

    Carries the first bad record's position and error (in offset order);
    nothing of the batch was committed.
    """

    def __init__(self, table: str, topic: str, partition: int, offset: int, error_class: str,
                 message: str, field: Optional[str], count: int) -> None:
        self.table = table
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.error_class = error_class
        self.error_message = message
        self.field = field
        self.count = count
        super().__init__(
            f"table {table}: bad record at {topic}/{partition}@{offset}: {error_class}: {message} "
            f"({count} bad record(s) in the batch; bad_records policy is 'fail')"
        )
