"""Executor side of the dead letters: produce them before the table commit.

Decode tasks only count bad records (:mod:`ingest.frame`). When a batch has
some and the policy is ``dead-letter``, :func:`decode_and_send` runs as a
second ``mapInArrow`` pass over the batch's Kafka rows, with their headers:
it decodes again (deterministically: the same records fail the same way) and
produces only the dead letters, original key, value and headers plus Floe's
``floe.*`` reason headers (:func:`ingest.dead_letters.build_dead_letters`).
Each task opens one :class:`~ingest.dead_letters.DeadLetterSink` and returns
only how many records Kafka acknowledged; the sink raises when any was not,
which fails the task, then the batch, before anything is committed. A
replayed batch produces its dead letters again: they are delivered at least
once.

:class:`BadRecordError` is what the ``fail`` policy raises, in the decode task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import pyarrow as pa

from ingest.dead_letters import DeadLetterSink
from ingest.decode_batch import DecodeSpec, decode_batch

SENT_DDL = "sent long"


@dataclass(frozen=True)
class DeadLetterTarget:
    """The dead-letter topic and librdkafka producer settings (may hold secrets)."""

    topic: str
    producer_config: tuple[tuple[str, str], ...]


def decode_and_send(batches: Iterator[pa.RecordBatch], decode: DecodeSpec,
                    target: DeadLetterTarget) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over Kafka rows (headers included): decode, produce only the dead letters.

    Yields one row: the number of dead letters Kafka acknowledged.
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

    Carries the first bad record of the failing task's batch, in offset
    order; nothing of the micro-batch was committed.
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
            f"({count} bad record(s) in this Arrow batch; bad_records policy is 'fail')"
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.table, self.topic, self.partition, self.offset, self.error_class,
                             self.error_message, self.field, self.count))

    @classmethod
    def first_of(cls, table: str, dead_letters: pa.RecordBatch) -> BadRecordError:
        """The error for the first row of a dead-letter batch (``build_dead_letters`` order)."""
        first = dead_letters.slice(0, 1).to_pylist()[0]
        return cls(table, first["source_topic"], first["source_partition"], first["source_offset"],
                   first["error_class"], first["error_message"], first["error_field"], dead_letters.num_rows)
