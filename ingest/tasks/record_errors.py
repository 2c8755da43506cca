"""Why a record cannot land: the per-record errors, and the ``fail`` policy's error.

A bad record must neither fail its micro-batch nor vanish. Every per-record
failure is a :class:`RecordError` naming the field (a dotted path, when there
is one) and the reason; it becomes a dead letter (:mod:`ingest.tasks.dead_letters`),
whose ``floe.error.class`` header carries the class name. Under the ``fail``
policy the decode task raises :class:`BadRecordError` at the first one.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


class RecordError(Exception):
    """One Kafka record cannot be landed; it goes to the dead letters.

    ``field`` is the dotted path of the offending field, or None when the
    problem is the record as a whole (undecodable bytes, a tombstone without a
    key). ``reason`` says what is wrong, in words an operator can act on.
    """

    def __init__(self, reason: str, field: str | None = None) -> None:
        self.reason = reason
        self.field = field
        super().__init__(f"field {field!r}: {reason}" if field else reason)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep ``field`` apart from ``reason`` when the error crosses processes.
        return (type(self), (self.reason, self.field))


class DecodeError(RecordError):
    """The value's bytes are not a message of the configured format."""


class FieldError(RecordError):
    """A value does not fit its table column (wrong type, out of range, missing)."""


class ChangeError(RecordError):
    """The record's change semantics are unusable: unknown op, missing key."""


class BadRecordError(RuntimeError):
    """A record could not be landed and the table's policy is ``fail``.

    Carries the first bad record of the failing task's batch, in offset
    order; nothing of the micro-batch was committed.
    """

    def __init__(
        self,
        table: str,
        topic: str,
        partition: int,
        offset: int,
        error_class: str,
        message: str,
        field: str | None,
        count: int,
    ) -> None:
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

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (
                self.table,
                self.topic,
                self.partition,
                self.offset,
                self.error_class,
                self.error_message,
                self.field,
                self.count,
            ),
        )

    @classmethod
    def first_of(cls, table: str, dead_letters: pa.RecordBatch) -> BadRecordError:
        """The error for the first row of a dead-letter batch (``build_dead_letters`` order)."""
        first = dead_letters.slice(0, 1).to_pylist()[0]
        return cls(
            table,
            first["source_topic"],
            first["source_partition"],
            first["source_offset"],
            first["error_class"],
            first["error_message"],
            first["error_field"],
            dead_letters.num_rows,
        )
