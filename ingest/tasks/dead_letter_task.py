"""The dead-letter task: the executor pass that produces a batch's dead letters before its commit.

Decode tasks only count bad records (:mod:`ingest.tasks.frame`). When a batch has
some and the policy is ``dead-letter``, :func:`decode_and_send` runs as a
second ``mapInArrow`` pass over the batch's Kafka rows, with their headers:
it decodes again (deterministically: the same records fail the same way) and
produces only the dead letters, original key, value and headers plus Floe's
``floe.*`` reason headers (:func:`ingest.tasks.dead_letters.build_dead_letters`).
Each task opens one :class:`~ingest.tasks.dead_letters.DeadLetterSink` and returns
only how many records Kafka acknowledged; the sink raises when any was not,
which fails the task, then the batch, before anything is committed. A
replayed batch produces its dead letters again: they are delivered at least
once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from ingest.tasks.dead_letters import DeadLetterSink
from ingest.tasks.decode_records import DecodeSpec, decode_records

SENT_DDL = "sent long"


@dataclass(frozen=True)
class DeadLetterTarget:
    """The dead-letter topic and librdkafka producer settings.

    The settings may hold secrets (``sasl.password``), so the repr leaves them
    out: a target shows up in tracebacks and debug logs.
    """

    topic: str
    producer_config: tuple[tuple[str, str], ...] = field(repr=False)


def decode_and_send(
    batches: Iterator[pa.RecordBatch], decode: DecodeSpec, target: DeadLetterTarget
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over Kafka rows (headers included): decode, produce only the dead letters.

    Yields one row: the number of dead letters Kafka acknowledged.
    """
    sink: DeadLetterSink | None = None
    sent = 0
    for batch in batches:
        dead = decode_records(batch, decode).dead_letters
        if dead.num_rows:
            if sink is None:
                sink = DeadLetterSink(dict(target.producer_config), target.topic)
            sent += sink.send(dead)
    if sink is not None:
        sink.close()
    yield pa.RecordBatch.from_arrays([pa.array([sent], pa.int64())], names=["sent"])
