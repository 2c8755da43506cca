"""Records an operator chose to skip: ``topic/partition@offset``, and taking them out of a Kafka batch.

A record that can never land (a poison record under ``bad_records: fail``)
stops its table's query, and a restart replays the same batch. Moving the
starting offsets past it would drop the good records of the failed batch
too, so the operator names the record instead (``floe ingest --skip
orders/0@50``, or ``tables[].skip_records``). The decode tasks take exactly
the named records out of their Kafka rows, before decoding, whatever the
records hold; the batch commits every other record, and its snapshot summary
lists the ones it skipped (:data:`SKIPPED_RECORDS`). A named record that is
not in a batch changes nothing, so an old entry is harmless.

The notation is the one Floe's own messages use for a record's place
(``bad record at orders/0@50``). Pure: parsing, and an Arrow filter that runs
only when the list is not empty.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

SKIPPED_RECORDS = "floe.kafka.skipped-records"
"""The snapshot summary key listing the records a batch skipped: ``topic/partition@offset,...``."""

NOTATION = "TOPIC/PARTITION@OFFSET"
EXAMPLE = "orders/0@50"
_REF = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)/(?P<partition>\d+)@(?P<offset>\d+)$")


class RecordRef(NamedTuple):
    """One Kafka record's place; a plain tuple, so a decode spec holding some pickles and hashes."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


class RecordRefError(ValueError):
    """Text that is not ``topic/partition@offset``; the message says what was expected and what came."""

    def __init__(self, text: object) -> None:
        self.text = text
        super().__init__(f"expected {NOTATION} (e.g. {EXAMPLE}), got {text!r}")


def parse_record_ref(text: object) -> RecordRef:
    """``orders/0@50`` -> ``RecordRef('orders', 0, 50)``; RecordRefError for anything else.

    A topic name is what Kafka allows (letters, digits, ``.``, ``_``, ``-``);
    partition and offset are non-negative integers.
    """
    match = _REF.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise RecordRefError(text)
    return RecordRef(match["topic"], int(match["partition"]), int(match["offset"]))


def record_refs(refs: Iterable[str | Sequence[object]]) -> tuple[RecordRef, ...]:
    """Refs, their text, or ``(topic, partition, offset)`` triples (as JSON gives them back): sorted, without
    repeats. RecordRefError for text that is not a ref."""
    return tuple(sorted({_ref(ref) for ref in refs}))


def _ref(ref: str | Sequence[object]) -> RecordRef:
    if isinstance(ref, str):
        return parse_record_ref(ref)
    topic, partition, offset = ref
    return RecordRef(str(topic), int(partition), int(offset))  # type: ignore[call-overload]  # bad parts raise here, as the error to report


def format_refs(refs: Iterable[tuple[str, int, int]]) -> str:
    """``orders/0@50,orders/0@51``: the summary value and the log's wording."""
    return ",".join(str(RecordRef(*ref)) for ref in refs)


def split_skipped(batch: pa.RecordBatch, skip: tuple[RecordRef, ...]) -> tuple[pa.RecordBatch, tuple[RecordRef, ...]]:
    """``batch`` (Kafka rows: ``topic``, ``partition``, ``offset``) without the records of ``skip``, and the
    records it took out. An empty ``skip`` returns the batch as it is, untouched; so does one whose offsets
    are all outside the batch's offset range (a kept entry the table has passed), after one min/max."""
    if not skip or batch.num_rows == 0:
        return batch, ()
    topics, partitions, offsets = batch.column("topic"), batch.column("partition"), batch.column("offset")
    bounds = pc.min_max(offsets).as_py()
    candidates = tuple(ref for ref in skip if bounds["min"] <= ref.offset <= bounds["max"])
    if not candidates:
        return batch, ()
    mask = None
    for (topic, partition), wanted in _by_partition(candidates):
        hit = pc.and_(
            pc.and_(pc.equal(topics, topic), pc.equal(partitions, partition)), pc.is_in(offsets, value_set=wanted)
        )
        mask = hit if mask is None else pc.or_(mask, hit)
    assert mask is not None  # there was a candidate
    if not pc.any(mask).as_py():
        return batch, ()
    taken = batch.filter(mask)
    refs = record_refs(
        zip(
            taken.column("topic").to_pylist(), taken.column("partition").to_pylist(), taken.column("offset").to_pylist()
        )
    )
    return batch.filter(pc.invert(mask)), refs


@functools.lru_cache(maxsize=32)
def _by_partition(skip: tuple[RecordRef, ...]) -> tuple[tuple[tuple[str, int], pa.Array], ...]:
    """The skip list per (topic, partition), offsets as an Arrow array: built once per executor process."""
    grouped: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in skip:
        grouped.setdefault((topic, partition), []).append(offset)
    return tuple((key, pa.array(offsets, pa.int64())) for key, offsets in grouped.items())


SKIPPED = "floe.skipped"
"""The error class of an aggregate row for one record the skip list took out (:mod:`ingest.skips`): no
exception's name, so no bad record is ever taken for one."""
