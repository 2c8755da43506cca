"""The executor-side entry point: one Arrow batch of Kafka rows -> table rows + dead letters.

``decode_records(batch, spec)`` runs, per Spark micro-batch partition, inside
``mapInArrow``: it decodes every value (``ingest.tasks.decoding``), works out each
record's change (``ingest.tasks.changes``), maps values and Kafka metadata onto the
table's columns (``ingest.tasks.mapping``) and sets every failed record aside as a
dead letter (``ingest.tasks.dead_letters``). Every input row ends up in exactly one
of the two outputs. Only faults that are not the record's (an unreachable
schema registry, a batch without the Kafka columns) raise.

:class:`DecodeSpec` holds only strings, numbers and tuples, so it pickles small
and hashes; the decoders and Arrow schemas it implies are built once per
executor process (an LRU cache keyed by the spec).

The cost is per record: the parse (orjson for JSON, see
``ingest.tasks.decoding.json_decoder``; fastavro for Avro), the change
classification and a dict lookup per field. Mapping onto the table is
column-wise (``ingest.tasks.mapping``). The figures are in docs/performance.md.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from ingest.skips import RecordRef, RecordRefError, record_refs, split_skipped
from ingest.tasks.changes import (
    Change,
    ChangeKind,
    ChangeSpec,
    Classifier,
    KeyFormat,
    Mode,
    OpField,
    classifier,
    missing_keys,
)
from ingest.tasks.dead_letters import build_dead_letters
from ingest.tasks.decoding import ConfluentDecoder, ConfluentFormat, Decoder, Format, JsonFormat, decoder_for
from ingest.tasks.kafka_columns import (
    HEADER_PREFIX,
    KEY,
    KEY_FIELD_PREFIX,
    check_kafka_source,
    kafka_column,
    utc_micros,
)
from ingest.tasks.mapping import EpochUnit, MappingOptions, map_rows
from ingest.tasks.record_errors import ChangeError, DecodeError, RecordError
from ingest.tasks.routing import RouteSpec, route_records
from table.arrow_schema import schema_to_arrow
from table.errors import SchemaError
from table.schema import Schema, schema_from_json

OP_COLUMN = "_floe_op"
PARTITION_COLUMN = "_floe_partition"
OFFSET_COLUMN = "_floe_offset"
KAFKA_TIMESTAMP_COLUMN = "_floe_kafka_ts"
INTERNAL_FIELDS = (
    pa.field(OP_COLUMN, pa.int8(), nullable=False),
    pa.field(PARTITION_COLUMN, pa.int32(), nullable=False),
    pa.field(OFFSET_COLUMN, pa.int64(), nullable=False),
    pa.field(KAFKA_TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False),
)
"""Floe's columns after the table's: the change (``ChangeKind``), and the Kafka position
and time the writer orders by and the commit records offsets and freshness from."""

_KAFKA_COLUMNS = ("value", "topic", "partition", "offset", "timestamp")


@dataclass(frozen=True)
class DecodeSpec:
    """Everything an executor needs to decode a topic's batches for one table.

    ``schema`` is the table schema as Iceberg JSON text (a ``Schema`` is
    accepted and converted). ``metadata_columns`` maps table columns to Kafka
    metadata sources (see ``ingest.tasks.kafka_columns.check_kafka_source``). ``key_fields``
    default to the schema's identifier fields. ``epoch_unit`` is the unit of
    numeric timestamps and times in values. Invalid combinations raise
    ValueError here, on the driver, not later on an executor.
    """

    schema: str | Schema  # stored as JSON text
    format: Format = field(default_factory=JsonFormat)
    metadata_columns: tuple[tuple[str, str], ...] | Mapping[str, str] = ()  # stored as a tuple
    mode: Mode = "append"
    op_field: OpField | None = None
    key_fields: tuple[str, ...] = ()
    key_format: KeyFormat = "json"
    epoch_unit: EpochUnit = "ms"
    skip_records: tuple[RecordRef, ...] = ()  # taken out before decoding (ingest.skips); text refs accepted
    route: RouteSpec | None = None  # which records of a shared topic are this table's (ingest.tasks.routing)

    def __post_init__(self) -> None:
        if isinstance(self.schema, Schema):
            object.__setattr__(self, "schema", json.dumps(self.schema.to_json(), sort_keys=True))
        columns = self.metadata_columns
        pairs = columns.items() if isinstance(columns, Mapping) else columns
        object.__setattr__(self, "metadata_columns", tuple((str(c), str(s)) for c, s in pairs))
        object.__setattr__(self, "key_fields", tuple(self.key_fields))
        try:
            object.__setattr__(self, "skip_records", record_refs(self.skip_records))
        except RecordRefError as exc:
            raise ValueError(f"skip_records: {exc}") from None
        _plan(self)  # validates

    @property
    def metadata_pairs(self) -> tuple[tuple[str, str], ...]:
        """``metadata_columns`` as ``__post_init__`` stores them: (column, Kafka field) pairs."""
        return cast(tuple[tuple[str, str], ...], self.metadata_columns)

    def table_schema(self) -> Schema:
        return _plan(self).schema


@dataclass(frozen=True)
class DecodedRecords:
    """The outcome of one batch: ``len(rows) + len(dead_letters) + len(skipped) + routed_away == len(input)``.

    ``skipped``: the input records the spec's ``skip_records`` named, taken
    out before decoding (neither rows nor dead letters). ``routed_away``: how
    many records the spec's route left to other tables; they count in the
    sum too.

    ``rows`` follows the table's Arrow schema (field ids included) plus
    :data:`INTERNAL_FIELDS`, in input order. A delete row (``_floe_op == 1``)
    carries its key columns (and any Kafka-metadata columns); its other
    columns are null even when required, so a writer must read deletes
    through the key columns alone.
    """

    rows: pa.RecordBatch
    dead_letters: pa.RecordBatch
    skipped: tuple[RecordRef, ...] = ()
    routed_away: int = 0


@dataclass(frozen=True)
class _Plan:
    schema: Schema
    rows_schema: pa.Schema
    decoder: Decoder
    changes: ChangeSpec
    options: MappingOptions
    metadata: tuple[tuple[str, str], ...]
    classify: Classifier
    route: RouteSpec | None


@functools.lru_cache(maxsize=32)
def _plan(spec: DecodeSpec) -> _Plan:
    try:
        schema = schema_from_json(json.loads(spec.schema))  # type: ignore[arg-type]  # __post_init__ stores the schema as JSON text
    except (ValueError, SchemaError) as exc:
        raise ValueError(f"the table schema is not valid Iceberg schema JSON: {exc}") from exc
    clashes = [f.name for f in schema.fields if f.name in {f.name for f in INTERNAL_FIELDS}]
    if clashes:
        raise ValueError(f"table columns {clashes} clash with Floe's internal columns")
    for column, source in spec.metadata_pairs:
        check_kafka_source(source, column, schema)
    changes = ChangeSpec(spec.mode, spec.op_field, _key_fields(spec, schema), spec.key_format, _key_decoder(spec))
    for path in changes.key_fields:
        _check_key_field(schema, path)
    rows_schema = pa.schema(list(schema_to_arrow(schema)) + list(INTERNAL_FIELDS))
    decoder = decoder_for(spec.format, schema)
    return _Plan(
        schema,
        rows_schema,
        decoder,
        changes,
        MappingOptions(spec.epoch_unit),
        spec.metadata_pairs,
        classifier(changes),
        spec.route,
    )


def _check_key_field(schema: Schema, path: str) -> None:
    try:
        column = schema.find_field(path)
    except SchemaError:
        raise ValueError(f"key field {path!r} is not a column of the table") from None
    if not column.field_type.is_primitive:
        raise ValueError(f"key field {path!r} must be a primitive column")


def _key_fields(spec: DecodeSpec, schema: Schema) -> tuple[str, ...]:
    if spec.key_fields:
        return spec.key_fields
    if spec.mode != "upsert":
        return ()
    return tuple(schema.find_column_name(i) for i in schema.identifier_field_ids)


# ---------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------


def decode_records(batch: pa.RecordBatch, spec: DecodeSpec) -> DecodedRecords:
    """Decode and map one Arrow batch of Spark Kafka-source rows, less the records ``spec`` skips."""
    batch, skipped = split_skipped(batch, spec.skip_records)  # the batch itself when nothing is to be skipped
    with _cyclic_gc_paused():
        decoded = _decode_batch(batch, _plan(spec))
    return replace(decoded, skipped=skipped) if skipped else decoded


def _key_decoder(spec: DecodeSpec) -> Callable[[bytes], Any] | None:
    """The reader of schema-registry framed Kafka keys: the value's registry, any of its schema ids."""
    if spec.key_format != "confluent":
        return None
    if not isinstance(spec.format, ConfluentFormat):
        raise ValueError(
            "a 'confluent' Kafka key needs a 'confluent' value format: the key's schemas are in its registry"
        )
    keys = replace(spec.format, reader_schema=None, subject=None, schema_ids=(), refused_ids=())
    return ConfluentDecoder(keys).decode


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one batch.

    Decoding allocates a few containers per record, all acyclic (refcounting
    frees them), yet each allocation burst makes the collector rescan every
    live one: about a third of the batch time. The previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode_batch(batch: pa.RecordBatch, plan: _Plan) -> DecodedRecords:
    _check_columns(batch, plan)
    failures: dict[int, RecordError] = {}
    values = batch.column("value").to_pylist()
    decoded = _decode_values(plan.decoder, values, failures)
    routed_away = 0
    if plan.route is not None:
        before = batch.num_rows
        batch, decoded, failures = _routed(batch, decoded, plan.route, failures)
        routed_away = before - batch.num_rows
    keys = batch.column(KEY).to_pylist() if _needs_keys(batch, plan) else [None] * batch.num_rows
    changes = _classify(decoded, keys, plan.classify, failures)
    columns = _metadata_columns(batch, plan, failures)
    alive = _positions_without(failures, batch.num_rows)
    # A failed record's change is None, and failed records are not alive.
    alive_changes = cast(list[Change], changes if len(alive) == len(changes) else [changes[i] for i in alive])
    deletes = [change.op is ChangeKind.DELETE for change in alive_changes]
    mapped = map_rows(
        [change.row for change in alive_changes],
        plan.schema,
        plan.options,
        partial=deletes,
        columns={name: _take(values_, alive) for name, values_ in columns.items()},
    )
    _merge(failures, alive, mapped.errors)
    if plan.changes.mode == "upsert":
        upserts = [p for p, delete in enumerate(deletes) if not delete and alive[p] not in failures]
        _merge(failures, alive, missing_keys(mapped.batch, plan.changes.key_fields, upserts))
    kept = [p for p, i in enumerate(alive) if i not in failures] if failures else alive
    rows = _rows(batch, mapped.batch, [alive[p] for p in kept], kept, [deletes[p] for p in kept], plan)
    return DecodedRecords(rows, build_dead_letters(batch, failures), routed_away=routed_away)


def _routed(
    batch: pa.RecordBatch, decoded: list[Any], route: RouteSpec, failures: dict[int, RecordError]
) -> tuple[pa.RecordBatch, list[Any], dict[int, RecordError]]:
    """The batch, its decoded values and their failures, less the records the route leaves to other tables."""
    kept = route_records(batch.column("topic").to_pylist(), decoded, route, failures)
    if len(kept) == batch.num_rows:
        return batch, decoded, failures
    position = {index: p for p, index in enumerate(kept)}
    return (
        batch.take(pa.array(kept, pa.int64())),
        [decoded[i] for i in kept],
        {position[i]: error for i, error in failures.items()},
    )


def _positions_without(failures: Mapping[int, RecordError], count: int) -> list[int]:
    """The positions ``0..count-1`` of records without a failure, in order."""
    if not failures:
        return list(range(count))
    return [i for i in range(count) if i not in failures]


def _check_columns(batch: pa.RecordBatch, plan: _Plan) -> None:
    needed = list(_KAFKA_COLUMNS)
    sources = [source for _, source in plan.metadata]
    if plan.changes.mode == "upsert" or any(s == KEY or s.startswith(KEY_FIELD_PREFIX) for s in sources):
        needed.append(KEY)
    if any(s.startswith(HEADER_PREFIX) for s in sources):
        needed.append("headers")  # Spark's Kafka source needs includeHeaders=true
    missing = [name for name in needed if batch.schema.get_field_index(name) < 0]
    if missing:
        raise ValueError(f"the Kafka batch lacks columns {missing}; it has {batch.schema.names}")


def _needs_keys(batch: pa.RecordBatch, plan: _Plan) -> bool:
    return plan.changes.mode == "upsert" and batch.schema.get_field_index(KEY) >= 0


def _decode_values(decoder: Decoder, values: list[bytes | None], failures: dict[int, RecordError]) -> list[Any]:
    decode = decoder.decode
    decoded: list[Any] = [None] * len(values)
    for i, payload in enumerate(values):
        if payload is not None:
            try:
                decoded[i] = decode(payload)
            except DecodeError as exc:
                failures[i] = exc
    return decoded


def _classify(
    decoded: list[Any], keys: list[bytes | None], classify: Classifier, failures: dict[int, RecordError]
) -> list[Change | None]:
    changes: list[Change | None] = [None] * len(decoded)
    for i, (value, key) in enumerate(zip(decoded, keys)):
        if i not in failures:
            try:
                changes[i] = classify(value, key)
            except ChangeError as exc:
                failures[i] = exc
    return changes


def _metadata_columns(
    batch: pa.RecordBatch, plan: _Plan, failures: dict[int, RecordError]
) -> dict[str, pa.Array | list[Any]]:
    columns: dict[str, pa.Array | list[Any]] = {}
    for column, source in plan.metadata:
        values, errors = kafka_column(batch, source, plan.schema.find_field(column))
        for i, error in errors.items():
            failures.setdefault(i, error)
        columns[column] = values
    return columns


def _take(values: pa.Array | list[Any], indices: Sequence[int]) -> pa.Array | list[Any]:
    if isinstance(values, pa.Array):
        return values.take(pa.array(indices, pa.int64()))
    return [values[i] for i in indices]


def _merge(failures: dict[int, RecordError], alive: Sequence[int], errors: Mapping[int, RecordError]) -> None:
    """Add errors keyed by position in ``alive``; an earlier error of a record stays."""
    for position, error in errors.items():
        failures.setdefault(alive[position], error)


def _rows(
    batch: pa.RecordBatch,
    mapped: pa.RecordBatch,
    indices: list[int],
    positions: list[int],
    deletes: list[bool],
    plan: _Plan,
) -> pa.RecordBatch:
    """The kept mapped rows with Floe's internal columns; ``deletes`` flags each kept row's change."""
    table_rows = mapped if len(positions) == mapped.num_rows else mapped.take(pa.array(positions, pa.int64()))
    source = batch if len(indices) == batch.num_rows else batch.take(pa.array(indices, pa.int64()))
    internal = [
        _op_codes(deletes),
        source.column("partition").cast(pa.int32()),
        source.column("offset").cast(pa.int64()),
        utc_micros(source.column("timestamp")),
    ]
    return pa.RecordBatch.from_arrays(list(table_rows.columns) + internal, schema=plan.rows_schema)


def _op_codes(deletes: list[bool]) -> pa.Array:
    """The ``_floe_op`` column (``ChangeKind`` codes) from each row's delete flag, column-wise."""
    return pc.if_else(
        pa.array(deletes, pa.bool_()),
        pa.scalar(int(ChangeKind.DELETE), pa.int8()),
        pa.scalar(int(ChangeKind.UPSERT), pa.int8()),
    )
