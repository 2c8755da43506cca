"""Change semantics of Kafka records: what each one does to the table.

In **append** mode every record is an insert; a tombstone (null value) has no
row to append and is rejected.

In **upsert** mode a record replaces (``ChangeKind.UPSERT``) or deletes
(``ChangeKind.DELETE``) the row with its key, the table's identifier fields:

* With an :class:`OpField`, the value's op field decides: Debezium's ``c``,
  ``r`` (snapshot read) and ``u`` upsert, ``d`` deletes; other spellings can be
  configured. A missing or unknown op is an error naming the op field (so
  Debezium's row-less truncate ``t`` and message ``m`` events become dead
  letters). With
  ``envelope=True`` the row is the value's ``after`` image, or ``before`` for
  deletes, as in Debezium's change-event envelope; an envelope that Kafka
  Connect's JSON converter wrapped (``schemas.enable=true``:
  ``{"schema": ..., "payload": <envelope>}``) is unwrapped first, like keys.
* Without one, every value upserts.
* A tombstone (null value with a key) deletes. Its key comes from the Kafka
  key, read as a JSON object (key fields by name) or as a bare JSON scalar or
  string when the table has a single key field.

A delete carries only its key fields (the writer turns it into an equality
delete); the key comes from the row image when complete, else from the Kafka
key. Whether an upsert's key is complete is checked after mapping
(:func:`missing_keys`), because Kafka-metadata columns may supply it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from typing import Any, Literal, NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tasks.mapping import describe, lookup
from ingest.tasks.record_errors import ChangeError, RecordError

Mode = Literal["append", "upsert"]
KeyFormat = Literal["json", "string", "confluent"]
OpValue: TypeAlias = str | int


class ChangeKind(IntEnum):
    """What a change record does to its key: the ``_floe_op`` codes."""

    UPSERT = 0
    DELETE = 1


@dataclass(frozen=True)
class OpField:
    """Where a record's operation is, and which values mean what.

    ``name`` is a dotted path into the value. Inserts and updates both upsert;
    they are kept apart only so that configurations read naturally.
    """

    name: str = "op"
    inserts: tuple[OpValue, ...] = ("c", "r")
    updates: tuple[OpValue, ...] = ("u",)
    deletes: tuple[OpValue, ...] = ("d",)
    envelope: bool = False

    def __post_init__(self) -> None:
        for attr in ("inserts", "updates", "deletes"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        seen = list(self.inserts) + list(self.updates) + list(self.deletes)
        if len(set(seen)) != len(seen):
            raise ValueError(f"op field {self.name!r}: a value is listed for two operations: {seen}")

    def op_of(self, value: OpValue) -> ChangeKind | None:
        if value in self.deletes:
            return ChangeKind.DELETE
        if value in self.inserts or value in self.updates:
            return ChangeKind.UPSERT
        return None


AFTER = "after"
BEFORE = "before"


@dataclass(frozen=True)
class ChangeSpec:
    """How records become changes: mode, op field, key fields and Kafka-key format."""

    mode: Mode = "append"
    op_field: OpField | None = None
    key_fields: tuple[str, ...] = ()
    key_format: KeyFormat = "json"
    key_decoder: Callable[[bytes], Any] | None = field(default=None, compare=False)
    """Reads a ``confluent`` key (schema-registry framing): the value format's registry decoder."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_fields", tuple(self.key_fields))
        if self.mode not in ("append", "upsert"):
            raise ValueError(f"mode must be 'append' or 'upsert', got {self.mode!r}")
        if self.key_format not in ("json", "string", "confluent"):
            raise ValueError(f"key_format must be 'json', 'string' or 'confluent', got {self.key_format!r}")
        if self.key_format == "confluent" and self.key_decoder is None:
            raise ValueError("a 'confluent' Kafka key needs the registry's decoder")
        if self.mode == "append" and self.op_field is not None:
            raise ValueError("an op field needs upsert mode: append mode cannot delete")
        if self.mode == "upsert" and not self.key_fields:
            raise ValueError("upsert mode needs key fields (the table's identifier fields)")
        if self.key_format == "string" and len(self.key_fields) > 1:
            raise ValueError("a string Kafka key can fill one key field, not several")


class Change(NamedTuple):
    """What one record does: ``op`` with ``row``; a delete's row holds only its key.

    A named tuple rather than a frozen dataclass: one is built per record, and
    tuples build several times faster.
    """

    op: ChangeKind
    row: dict[str, Any]

    @property
    def partial(self) -> bool:
        return self.op is ChangeKind.DELETE


def classify(value: Any, key: bytes | None, spec: ChangeSpec) -> Change:
    """The change of a record with decoded ``value`` (None: tombstone) and raw Kafka ``key``."""
    if spec.mode == "append":
        if value is None:
            raise ChangeError("a tombstone (null value) cannot be appended")
        return Change(ChangeKind.UPSERT, value)
    if value is None:
        if key is None:
            raise ChangeError("a tombstone (null value) without a Kafka key deletes nothing")
        return Change(ChangeKind.DELETE, key_row(key, spec))
    if spec.op_field is None:
        return Change(ChangeKind.UPSERT, value)
    if spec.op_field.envelope:
        value = _unwrap_connect(value)
    op = _op(value, spec.op_field)
    image = _image(value, spec.op_field, op)
    if op is ChangeKind.UPSERT:
        if image is None:
            raise ChangeError("the row image is null", AFTER)
        return Change(op, image)
    return Change(op, _delete_row(image, key, spec))


Classifier = Callable[[Any, bytes | None], Change]
"""``classify`` bound to one :class:`ChangeSpec`: ``(decoded value, raw Kafka key) -> Change``."""


def classifier(spec: ChangeSpec) -> Classifier:
    """``classify`` for ``spec``, with the common record answered before the general walk.

    Nearly every record of a topic is a plain upsert: a value, and under an op
    field that sits at the top of the value, an insert or update op. That
    record is answered here with two dict lookups, a microsecond less than
    ``classify``'s path walk (a sixth of an upsert's decode). Every other record
    (tombstones, deletes, envelopes, nested op fields, unknown ops) goes to
    ``classify``, which alone words errors. Op values are str or int (never
    bool), which compare in a dict exactly as in the op field's tuples.
    """
    op_field = spec.op_field
    if spec.mode == "append" or op_field is None:
        return lambda value, key: Change(ChangeKind.UPSERT, value) if value is not None else classify(value, key, spec)
    if op_field.envelope or "." in op_field.name:
        return lambda value, key: classify(value, key, spec)
    name, upserts = op_field.name, frozenset(op_field.inserts + op_field.updates)

    def plain_upsert_first(value: Any, key: bytes | None) -> Change:
        if type(value) is dict:
            raw = value.get(name)
            if (type(raw) is str or type(raw) is int) and raw in upserts:
                return Change(ChangeKind.UPSERT, value)
        return classify(value, key, spec)

    return plain_upsert_first


def _op(value: dict[str, Any], op_field: OpField) -> ChangeKind:
    raw = lookup(value, op_field.name)
    if raw is None:
        raise ChangeError("the operation is missing", op_field.name)
    op = op_field.op_of(raw) if isinstance(raw, (str, int)) and not isinstance(raw, bool) else None
    if op is None:
        known = ", ".join(str(v) for v in op_field.inserts + op_field.updates + op_field.deletes)
        raise ChangeError(f"unknown operation {describe(raw)}; expected one of {known}", op_field.name)
    return op


def _image(value: dict[str, Any], op_field: OpField, op: ChangeKind) -> dict[str, Any] | None:
    if not op_field.envelope:
        return value
    name = BEFORE if op is ChangeKind.DELETE else AFTER
    image = value.get(name)
    if image is not None and not isinstance(image, dict):
        raise ChangeError(f"the row image must be an object, got {describe(image)}", name)
    return image


def _delete_row(image: dict[str, Any] | None, key: bytes | None, spec: ChangeSpec) -> dict[str, Any]:
    """The key of a deleted row: from its image when complete, else from the Kafka key."""
    if image is not None:
        values = {path: lookup(image, path) for path in spec.key_fields}
        if None not in values.values():
            return _nest(values)
    if key is not None:
        return key_row(key, spec)
    missing = next(p for p in spec.key_fields if image is None or lookup(image, p) is None)
    raise ChangeError("key field is missing from the deleted row and there is no Kafka key", missing)


def key_row(key: bytes, spec: ChangeSpec) -> dict[str, Any]:
    """The key fields carried by a Kafka key, as a (nested) row."""
    if spec.key_format == "string":
        try:
            return _nest({spec.key_fields[0]: key.decode("utf-8")})
        except UnicodeDecodeError:
            raise ChangeError("the Kafka key is not UTF-8 text") from None
    if spec.key_decoder is not None:
        try:
            framed = spec.key_decoder(key)
        except RecordError as exc:
            raise ChangeError(f"the Kafka key cannot be read: {exc.reason}") from None
        if not isinstance(framed, dict):
            raise ChangeError(f"the Kafka key is {describe(framed)}, not a record with the key fields")
        return _nest(_key_fields_of(framed, spec.key_fields))
    try:
        parsed = parse_json_key(key)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ChangeError(f"the Kafka key is not JSON: {exc}") from None
    if isinstance(parsed, dict):
        return _nest(_key_fields_of(parsed, spec.key_fields))
    if len(spec.key_fields) != 1 or isinstance(parsed, list) or parsed is None:
        raise ChangeError(f"the Kafka key is {describe(parsed)}, not an object with the key fields")
    return _nest({spec.key_fields[0]: parsed})


def parse_json_key(key: bytes) -> Any:
    """A Kafka key read as JSON, the one reading for key columns and deletes alike.

    Decimals stay exact (a key field may be a decimal key column), and Kafka
    Connect's ``{"schema": ..., "payload": {...}}`` wrapper is removed. Raises
    ValueError for invalid JSON or UTF-8.
    """
    return _unwrap_connect(json.loads(key, parse_float=Decimal))


def _unwrap_connect(obj: Any) -> Any:
    """Kafka Connect's JSON with schemas wraps keys and values: ``{"schema": ..., "payload": ...}``.

    Values are unwrapped only when they are change-event envelopes: a plain
    row may well have exactly the columns ``schema`` and ``payload``.
    """
    if isinstance(obj, dict) and set(obj) == {"schema", "payload"} and isinstance(obj["payload"], dict):
        return obj["payload"]
    return obj


def _key_fields_of(key: dict[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    values = {}
    for path in paths:
        value = lookup(key, path)
        if value is None:
            raise ChangeError("key field is missing from the Kafka key", path)
        values[path] = value
    return values


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``."""
    row: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = row
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return row


def missing_keys(rows: pa.RecordBatch, key_fields: Sequence[str], among: Sequence[int]) -> dict[int, ChangeError]:
    """Rows (of the positions ``among``) whose mapped key is incomplete, with the first missing field."""
    errors: dict[int, ChangeError] = {}
    if not among:
        return errors
    candidates = pa.array(among, pa.int64())
    for path in key_fields:
        nulls = _null_positions(rows, path, candidates)
        for position in nulls:
            errors.setdefault(position, ChangeError("key field is missing", path))
    return errors


def _null_positions(rows: pa.RecordBatch, path: str, candidates: pa.Array) -> list[int]:
    first, *rest = path.split(".")
    column = rows.column(first)
    is_null = column.is_null()
    for name in rest:
        column = pc.struct_field(column, name)
        is_null = pc.or_(is_null, column.is_null())
    return pc.filter(candidates, pc.take(is_null, candidates)).to_pylist()
