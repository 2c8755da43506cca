"""Partition specs (spec "Partitioning", "Partition Evolution", Appendix C).

A spec is unbound: like its JSON, it names source columns by id only. Whatever
needs the source types (the partition struct, values, paths) takes the
schema. The schema is duck-typed: ``find_field(name_or_id)`` returning a
``NestedField`` (raising ``NotFoundError``/``SchemaError`` when missing) and,
for building specs, ``as_struct()``.
"""

from __future__ import annotations

import math
import string
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from table.errors import ROOT_FIELD, JsonFieldError, NotFoundError, SchemaError, TableError, ValidationError
from table.transforms import (
    BucketTransform,
    IdentityTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    parse_transform,
)
from table.types import (
    DateType,
    IcebergType,
    IntegerType,
    NestedField,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

PARTITION_FIELD_ID_START = 1000
"""First partition field id; ids below it belong to schema columns in v1 tables."""

TransformLike: TypeAlias = Transform | str
FieldRequest: TypeAlias = tuple[TransformLike, str] | tuple[TransformLike, str, str | None]
"""``(transform, source column name)`` or ``(transform, column, partition name)``."""


@dataclass(frozen=True)
class PartitionField:
    """One column of the partition tuple: ``transform(schema[source_id])``."""

    source_id: int
    field_id: int
    transform: Transform
    name: str

    def __post_init__(self) -> None:
        if isinstance(self.transform, str):
            object.__setattr__(self, "transform", parse_transform(self.transform))
        if not isinstance(self.transform, Transform):
            raise ValidationError(f"partition field {self.name!r}: not a transform: {self.transform!r}")
        if not self.name:
            raise ValidationError(f"partition field {self.field_id} has an empty name")

    def to_json(self) -> dict[str, Any]:
        return {
            "source-id": self.source_id,
            "field-id": self.field_id,
            "name": self.name,
            "transform": str(self.transform),
        }


@dataclass(frozen=True)
class PartitionSpec:
    """An ordered list of partition fields, identified by ``spec_id``."""

    spec_id: int
    fields: tuple[PartitionField, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        _check_unique(self.spec_id, [f.field_id for f in self.fields], "field id")
        _check_unique(self.spec_id, [f.name for f in self.fields], "name")

    @property
    def is_unpartitioned(self) -> bool:
        """True when no field produces a value (no fields, or only void ones)."""
        return all(isinstance(f.transform, VoidTransform) for f in self.fields)

    @property
    def last_assigned_field_id(self) -> int:
        """Highest field id in this spec (999 when it has none)."""
        return max((f.field_id for f in self.fields), default=PARTITION_FIELD_ID_START - 1)

    def fields_by_source_id(self, source_id: int) -> list[PartitionField]:
        return [f for f in self.fields if f.source_id == source_id]

    def partition_type(self, schema: Any) -> StructType:
        """The partition tuple's struct: field ids, names, result types, all optional."""
        return StructType(
            *(NestedField(f.field_id, f.name, _result_type(schema, f), required=False) for f in self.fields)
        )

    def compatible_with(self, other: PartitionSpec) -> bool:
        """Same sources, transforms and names in the same order; ids are ignored."""
        return [(f.source_id, f.transform, f.name) for f in self.fields] == [
            (f.source_id, f.transform, f.name) for f in other.fields
        ]

    def partition_function(self, schema: Any) -> Callable[[Mapping[int, Any]], tuple[Any, ...]]:
        """A fast ``record -> partition tuple`` for records keyed by source field id.

        Void fields need no value: their source column may have been dropped.
        """
        bound = [(f, _bind(schema, f)) for f in self.fields]

        def partition_of(record: Mapping[int, Any]) -> tuple[Any, ...]:
            return tuple(
                None if isinstance(f.transform, VoidTransform) else fn(_source_value(record, f)) for f, fn in bound
            )

        return partition_of

    def partition_values(self, record: Mapping[int, Any], schema: Any) -> tuple[Any, ...]:
        """The partition tuple of one record (a mapping from source field id to value)."""
        return self.partition_function(schema)(record)

    def partition_path(self, values: Sequence[Any], schema: Any) -> str:
        """``name=value/...`` as Java's ``PartitionSpec.partitionToPath`` writes it."""
        if len(values) != len(self.fields):
            raise ValidationError(
                f"partition spec {self.spec_id} has {len(self.fields)} fields, got {len(values)} values"
            )
        parts = []
        for f, value in zip(self.fields, values):
            text = f.transform.to_human_string(_source_type(schema, f), value)
            parts.append(f"{url_encode(f.name)}={url_encode(text)}")
        return "/".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"spec-id": self.spec_id, "fields": [f.to_json() for f in self.fields]}


def _check_unique(spec_id: int, keys: list[Any], what: str) -> None:
    duplicates = sorted({repr(k) for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValidationError(f"partition spec {spec_id} repeats {what} {', '.join(duplicates)}")


def _source_value(record: Mapping[int, Any], field: PartitionField) -> Any:
    try:
        return record[field.source_id]
    except KeyError:
        raise ValidationError(
            f"record has no value for source field {field.source_id} of partition field {field.name!r}"
        ) from None


UNPARTITIONED_SPEC = PartitionSpec(0, ())


# ------------------------------------------------------------ schema access


def _lookup(schema: Any, key: int | str) -> NestedField | None:
    """The schema field for a name or id, or None when the schema has none."""
    try:
        return schema.find_field(key)
    except (NotFoundError, SchemaError):
        return None


def _source_type(schema: Any, field: PartitionField) -> IcebergType:
    source = _lookup(schema, field.source_id)
    if source is not None:
        return source.field_type
    if isinstance(field.transform, VoidTransform):
        return IntegerType()  # a void field may outlive its dropped source column
    raise SchemaError(f"partition field {field.name!r}: source field {field.source_id} is not in the schema")


def _result_type(schema: Any, field: PartitionField) -> IcebergType:
    try:
        return field.transform.result_type(_source_type(schema, field))
    except SchemaError as exc:
        raise SchemaError(f"partition field {field.name!r}: {exc}") from exc


def _bind(schema: Any, field: PartitionField) -> Callable[[Any], Any]:
    try:
        return field.transform.bind(_source_type(schema, field))
    except SchemaError as exc:
        raise SchemaError(f"partition field {field.name!r}: {exc}") from exc


def _struct_reachable_ids(struct: StructType) -> set[int]:
    """Ids of fields reachable through structs only (partition sources must be)."""
    ids: set[int] = set()
    for f in struct.fields:
        ids.add(f.field_id)
        if isinstance(f.field_type, StructType):
            ids |= _struct_reachable_ids(f.field_type)
    return ids


# --------------------------------------------------------------- path escaping

_URL_SAFE = frozenset(string.ascii_letters + string.digits + ".-*_")


def url_encode(text: str) -> str:
    """``java.net.URLEncoder.encode(text, "UTF-8")``: space is '+', others %XX."""
    out = []
    for ch in text:
        if ch in _URL_SAFE:
            out.append(ch)
        elif ch == " ":
            out.append("+")
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
    return "".join(out)


# ------------------------------------------------------------------------ JSON


class PartitionSpecJsonError(JsonFieldError, ValidationError):
    """A partition spec JSON object is invalid at ``field``, a dotted path inside it."""

    subject = "partition spec"


def _json_int(obj: Mapping[str, Any], key: str, at: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PartitionSpecJsonError(f"{at}{key}", f"expected an int, got {value!r}")
    return value


def _field_from_json(obj: Any, index: int) -> PartitionField:
    at = f"fields[{index}]"
    if not isinstance(obj, Mapping):
        raise PartitionSpecJsonError(at, f"expected an object, got {obj!r}")
    name, transform = obj.get("name"), obj.get("transform")
    if not isinstance(name, str) or not name:
        raise PartitionSpecJsonError(f"{at}.name", f"expected a string, got {name!r}")
    try:
        parsed = parse_transform(str(transform))
    except TableError as exc:
        raise PartitionSpecJsonError(f"{at}.transform", str(exc)) from exc
    # v1 specs may omit field ids; Java then numbered fields from 1000 in order.
    field_id = _json_int(obj, "field-id", f"{at}.") if "field-id" in obj else PARTITION_FIELD_ID_START + index
    return PartitionField(_json_int(obj, "source-id", f"{at}."), field_id, parsed, name)


def partition_spec_from_json(obj: Any) -> PartitionSpec:
    """Parse Appendix C's spec object (or the deprecated bare field list, spec id 0).

    Errors are :class:`PartitionSpecJsonError` naming the field at fault.
    """
    if isinstance(obj, list):
        obj = {"spec-id": 0, "fields": obj}
    if not isinstance(obj, Mapping):
        raise PartitionSpecJsonError(ROOT_FIELD, f"expected an object, got {obj!r}")
    fields = obj.get("fields")
    if not isinstance(fields, list):
        raise PartitionSpecJsonError("fields", f"expected a list, got {fields!r}")
    spec_id = _json_int(obj, "spec-id", "")
    parsed = tuple(_field_from_json(f, i) for i, f in enumerate(fields))
    try:
        return PartitionSpec(spec_id, parsed)
    except ValidationError as exc:
        raise PartitionSpecJsonError("fields", str(exc)) from exc


# -------------------------------------------------------------------- building


@dataclass(frozen=True)
class _Request:
    transform: Transform
    column: str
    source: NestedField
    name: str | None


def _resolve(schema: Any, reachable: set[int], request: FieldRequest) -> _Request:
    if not isinstance(request, tuple) or len(request) not in (2, 3):
        raise SchemaError(f"partition field must be (transform, column[, name]), got {request!r}")
    transform = request[0] if isinstance(request[0], Transform) else parse_transform(request[0])
    column, name = request[1], request[2] if len(request) == 3 else None
    source = _lookup(schema, column)
    if source is None:
        raise SchemaError(f"partition source column {column!r} is not in the schema")
    if not isinstance(transform, VoidTransform):
        if source.field_id not in reachable:
            raise SchemaError(f"partition source column {column!r} is inside a list or map")
        if not source.field_type.is_primitive:
            raise SchemaError(f"partition source column {column!r} is not a primitive type")
        transform.check(source.field_type)
    return _Request(transform, column, source, name)


def _default_name(request: _Request, evolving: bool) -> str:
    """Java's names: ``PartitionSpec.Builder`` when building, ``PartitionNameGenerator``
    (which adds bucket count and width) when evolving."""
    t, column = request.transform, request.column
    if isinstance(t, IdentityTransform):
        return column
    if isinstance(t, VoidTransform):
        return f"{column}_null"
    if isinstance(t, BucketTransform):
        return f"{column}_bucket_{t.num_buckets}" if evolving else f"{column}_bucket"
    if isinstance(t, TruncateTransform):
        return f"{column}_trunc_{t.width}" if evolving else f"{column}_trunc"
    return f"{column}_{t}"


def _check_name(schema: Any, field: PartitionField, seen: set[str]) -> None:
    if field.name in seen:
        raise SchemaError(f"partition name {field.name!r} is used more than once")
    seen.add(field.name)
    column = _lookup(schema, field.name)
    same_column = isinstance(field.transform, (IdentityTransform, VoidTransform)) and (
        column is not None and column.field_id == field.source_id
    )
    if column is not None and not same_column:
        raise SchemaError(
            f"partition name {field.name!r} conflicts with a schema column "
            "(only an identity or void partition of that column may share its name)"
        )


def _check_redundant(field: PartitionField, seen: dict[tuple[int, str], PartitionField]) -> None:
    key = (field.source_id, field.transform.dedup_name)
    if key in seen:
        raise SchemaError(
            f"partition field {field.name!r} ({field.transform}) is redundant with "
            f"{seen[key].name!r} ({seen[key].transform}) on source field {field.source_id}"
        )
    seen[key] = field


def _validated(schema: Any, spec_id: int, fields: list[PartitionField]) -> PartitionSpec:
    names: set[str] = set()
    keys: dict[tuple[int, str], PartitionField] = {}
    for field in fields:
        _check_name(schema, field, names)
        _check_redundant(field, keys)
    return PartitionSpec(spec_id, tuple(fields))


def _requests(schema: Any, fields: Iterable[FieldRequest]) -> list[_Request]:
    reachable = _struct_reachable_ids(schema.as_struct())
    return [_resolve(schema, reachable, r) for r in fields]


def build_partition_spec(
    schema: Any,
    fields: Iterable[FieldRequest],
    spec_id: int = 0,
    last_partition_id: int = PARTITION_FIELD_ID_START - 1,
) -> PartitionSpec:
    """A new spec over ``schema``; field ids are ``last_partition_id + 1, + 2, ...``.

    ``fields`` are ``(transform, column)`` or ``(transform, column, name)``;
    default names follow Iceberg Java (``ts_day``, ``id_bucket``, ``name_trunc``).
    """
    built = [
        PartitionField(r.source.field_id, last_partition_id + 1 + i, r.transform, r.name or _default_name(r, False))
        for i, r in enumerate(_requests(schema, fields))
    ]
    return _validated(schema, spec_id, built)


def _field_history(specs: Sequence[PartitionSpec], last_partition_id: int) -> dict[tuple[int, str], PartitionField]:
    """Each (source id, transform) pair of any spec, the newest spec winning."""
    highest = max((s.last_assigned_field_id for s in specs), default=PARTITION_FIELD_ID_START - 1)
    if highest > last_partition_id:
        raise ValidationError(f"last_partition_id {last_partition_id} is below existing partition field id {highest}")
    history: dict[tuple[int, str], PartitionField] = {}
    for spec in sorted(specs, key=lambda s: s.spec_id):
        history.update({(f.source_id, str(f.transform)): f for f in spec.fields})
    return history


def evolve_partition_spec(
    current_specs: Sequence[PartitionSpec],
    schema: Any,
    new_fields: Iterable[FieldRequest],
    last_partition_id: int,
) -> PartitionSpec:
    """The next spec of a v2 table, whose full field list is ``new_fields``.

    A (source, transform) pair that any existing spec already has keeps that
    field's id (and name, unless one is given), so manifests of every spec
    agree on what a partition field id means; other fields get ids after
    ``last_partition_id``. The spec id is one more than the highest existing.
    The table's new last-partition-id is
    ``max(last_partition_id, spec.last_assigned_field_id)``.
    """
    history = _field_history(current_specs, last_partition_id)
    next_id = last_partition_id
    fields = []
    for r in _requests(schema, new_fields):
        old = history.get((r.source.field_id, str(r.transform)))
        if old is not None:
            fields.append(PartitionField(old.source_id, old.field_id, old.transform, r.name or old.name))
            continue
        next_id += 1
        name = r.name or _default_name(r, True)
        fields.append(PartitionField(r.source.field_id, next_id, r.transform, name))
    spec_id = max((s.spec_id for s in current_specs), default=-1) + 1
    return _validated(schema, spec_id, fields)


# --------------------------------------------------------------------------
# Partition tuples as dictionary keys
# --------------------------------------------------------------------------

_NAN_KEY = object()


def partition_key(spec_id: int, partition: Sequence[Any]) -> tuple[int, tuple[Any, ...]]:
    """A dictionary key for a (spec, partition tuple) in which NaN equals NaN.

    ``float("nan") != float("nan")``, so a tuple holding NaN is never found
    again in a dict; a NaN partition value (identity of a float column) is a
    real partition, and every place that groups files by partition uses this.
    """
    values = tuple(_NAN_KEY if isinstance(v, float) and math.isnan(v) else v for v in partition)
    return (spec_id, values)


# --------------------------------------------------------------------------
# Routing rows to their partition (Arrow)
# --------------------------------------------------------------------------


def partition_columns(batch: pa.RecordBatch, schema: Any, spec: PartitionSpec) -> list[pa.Array]:
    """Every row's partition tuple, column-wise: ``transform(source column)`` per
    partition field, computed by Arrow kernels (extension types as their storage).

    The one routing function: the writers split rows by these values, and
    ingest turns them into the key it repartitions by. Source columns are
    found by name through structs, as ``schema`` names them.
    """
    struct = schema.as_struct()
    return [_transformed(batch, struct, f) for f in spec.fields]


def split_by_partition(
    batch: pa.RecordBatch, schema: Any, spec: PartitionSpec
) -> Iterator[tuple[tuple[Any, ...], pa.RecordBatch]]:
    """The rows of ``batch`` grouped by partition tuple, row order kept within a group.

    Tuples are in the shared Python representation (docs/table-api.md).
    """
    if not spec.fields:
        yield (), batch
        return
    if batch.num_rows == 0:
        return
    names = [f"p{i}" for i in range(len(spec.fields))]
    keys = dict(zip(names, partition_columns(batch, schema, spec)))
    keys["__row"] = pa.arange(0, batch.num_rows)
    # Single-threaded so each group's row list keeps the batch order.
    groups = pa.table(keys).group_by(names, use_threads=False).aggregate([("__row", "list")])
    result_types = [f.field_type for f in spec.partition_type(schema).fields]
    columns = [_python_values(groups.column(name), t) for name, t in zip(names, result_types)]
    rows = groups.column("__row_list")
    for g in range(groups.num_rows):
        yield tuple(c[g] for c in columns), batch.take(rows[g].values)


def _transformed(batch: pa.RecordBatch, struct: StructType, partition_field: PartitionField) -> pa.Array:
    source = _source_array(batch, struct, partition_field.source_id)
    if source is None:
        raise SchemaError(
            f"partition field {partition_field.name!r}: source field id {partition_field.source_id} "
            "is not a column reachable through structs"
        )
    values = partition_field.transform.apply_arrow(source)
    if isinstance(values, pa.ExtensionArray):  # e.g. arrow.uuid: group-by needs the storage
        values = values.storage
    return values


def _source_array(batch: pa.RecordBatch, struct: StructType, source_id: int) -> pa.Array | None:
    chain = _name_chain(struct, source_id)
    if chain is None:
        return None
    index = batch.schema.get_field_index(chain[0])
    if index < 0:
        raise SchemaError(f"partition source column {chain[0]!r} is not in the batch (columns: {batch.schema.names})")
    array = batch.column(index)
    for name in chain[1:]:
        array = pc.struct_field(array, name)  # a parent's null makes the child null
    return array


def _name_chain(struct: StructType, field_id: int) -> list[str] | None:
    for child in struct.fields:
        if child.field_id == field_id:
            return [child.name]
        if isinstance(child.field_type, StructType):
            rest = _name_chain(child.field_type, field_id)
            if rest is not None:
                return [child.name, *rest]
    return None


def _python_values(column: pa.ChunkedArray, result_type: IcebergType) -> list[Any]:
    """Partition values in the shared Python representation (docs/table-api.md)."""
    if isinstance(result_type, DateType):
        column = column.cast(pa.int32())
    elif isinstance(result_type, (TimeType, TimestampType, TimestamptzType)):
        column = column.cast(pa.int64())
    values = column.to_pylist()
    if isinstance(result_type, UUIDType):
        return [v if v is None or isinstance(v, uuid.UUID) else uuid.UUID(bytes=v) for v in values]
    return values
