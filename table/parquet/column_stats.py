"""Column metrics of a written Parquet file, as stored in a manifest's ``data_file``.

Everything but NaN counts comes from the Parquet footer, aggregated over row
groups per field id, the way Iceberg Java's ``ParquetUtil.footerMetrics`` does:

* ``column_sizes``: compressed size of each leaf column, summed.
* ``value_counts``: leaf values including nulls (for repeated fields, one per
  element, as Parquet counts them).
* ``null_value_counts``: from the footer statistics.
* ``nan_value_counts``: float/double fields only; Parquet statistics do not
  count NaNs, so the writer counts them in the Arrow data (:func:`count_nans`).
* ``lower_bounds``/``upper_bounds``: Appendix D bytes, only for primitive
  fields reached through structs alone (Java stores no bounds for list
  elements or map keys/values). Strings are truncated to 16 code points and
  binary/fixed to 16 bytes by default; a truncated upper bound is incremented
  so it still bounds the data, and dropped when no increment exists.

Bounds are dropped for a column whenever one row group lacks statistics that
it would need: a bound computed from part of the file would be wrong.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table import properties as props
from table.arrow_schema import field_id_of
from table.conversions import to_bytes, unscaled_to_decimal
from table.errors import MalformedFileError, SchemaError, ValidationError
from table.schema import Schema
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

DEFAULT_TRUNCATE_LENGTH = 16

_TRUNCATE = re.compile(r"^truncate\((\d+)\)$")


# --------------------------------------------------------------------------
# Metrics modes (table properties write.metadata.metrics.*)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricsMode:
    """How much to record for a column: none, counts, truncate(n) or full."""

    kind: str
    length: int | None = None

    @staticmethod
    def parse(text: str) -> MetricsMode:
        """Parse a mode as written in table properties ("truncate(16)", "full", ...)."""
        mode = text.strip().lower()
        if mode in ("none", "counts", "full"):
            return MetricsMode(mode)
        match = _TRUNCATE.match(mode)
        if match and int(match.group(1)) > 0:
            return MetricsMode("truncate", int(match.group(1)))
        raise ValidationError(f"invalid metrics mode {text!r}: expected none, counts, truncate(N>0) or full")

    @property
    def has_counts(self) -> bool:
        return self.kind != "none"

    @property
    def has_bounds(self) -> bool:
        return self.kind in ("truncate", "full")

    def __str__(self) -> str:
        return f"truncate({self.length})" if self.kind == "truncate" else self.kind


NONE = MetricsMode("none")
COUNTS = MetricsMode("counts")
FULL = MetricsMode("full")
DEFAULT_MODE = MetricsMode("truncate", DEFAULT_TRUNCATE_LENGTH)


@dataclass(frozen=True)
class MetricsConfig:
    """The metrics mode of every field id: ``overrides`` or else ``default``."""

    default: MetricsMode = DEFAULT_MODE
    overrides: Mapping[int, MetricsMode] = field(default_factory=dict)

    def mode(self, field_id: int) -> MetricsMode:
        return self.overrides.get(field_id, self.default)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], schema: Schema) -> MetricsConfig:
        """The config Iceberg Java derives from table properties (sort order aside).

        Without an explicit default, tables wider than the inferred-column limit
        keep metrics only for their first columns, to bound manifest size.
        """
        default, overrides = _default_modes(properties, schema)
        for key, value in properties.items():
            if key.startswith(props.METRICS_COLUMN_PREFIX):
                name = key[len(props.METRICS_COLUMN_PREFIX) :]
                overrides[_field_id_by_name(schema, name, key)] = _parse_property(key, value)
        return cls(default, overrides)


DEFAULT_METRICS = MetricsConfig()
"""Iceberg's default metrics modes, for writers given no table properties."""


def _default_modes(properties: Mapping[str, str], schema: Schema) -> tuple[MetricsMode, dict[int, MetricsMode]]:
    default = props.METRICS_DEFAULT.read(properties)
    if default is not None:
        return _parse_property(props.METRICS_DEFAULT.key, default), {}
    limit = props.METRICS_MAX_INFERRED_COLUMNS.read(properties)
    columns = schema.as_struct().fields
    if len(columns) <= limit:
        return DEFAULT_MODE, {}
    kept = {fid: DEFAULT_MODE for column in columns[:limit] for fid in _field_ids(column)}
    return NONE, kept


def _parse_property(key: str, value: str) -> MetricsMode:
    try:
        return MetricsMode.parse(value)
    except ValidationError as exc:
        raise ValidationError(f"table property {key}: {exc}") from None


def _field_id_by_name(schema: Schema, name: str, key: str) -> int:
    try:
        return schema.find_field(name).field_id
    except SchemaError:
        raise ValidationError(f"table property {key} names column {name!r}, which is not in the schema") from None


def _field_ids(nested: NestedField) -> Iterator[int]:
    yield nested.field_id
    for child in getattr(nested.field_type, "fields", ()):
        yield from _field_ids(child)


# --------------------------------------------------------------------------
# Truncation (Java's UnicodeUtil / BinaryUtil)
# --------------------------------------------------------------------------

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)

Truncatable: TypeAlias = str | bytes


def truncate_lower_bound(value: Truncatable, length: int) -> Truncatable:
    """A prefix of at most ``length`` code points (str) or bytes: still <= value."""
    return value[:length]


def truncate_upper_bound(value: Truncatable, length: int) -> Truncatable | None:
    """The shortest value of at most ``length`` units that is >= ``value``.

    The kept prefix has its last incrementable unit incremented (code points
    skip the surrogate range, bytes must be below 0xFF). None when no such
    value exists, e.g. ``b"\\xff" * (length + 1)``.
    """
    if len(value) <= length:
        return value
    if isinstance(value, str):
        return _increment_string(value[:length])
    return _increment_bytes(value[:length])


def _increment_string(prefix: str) -> str | None:
    for i in range(len(prefix) - 1, -1, -1):
        code_point = ord(prefix[i]) + 1
        if code_point in _SURROGATES:
            code_point = _SURROGATES.stop
        if code_point <= _MAX_CODE_POINT:
            return prefix[:i] + chr(code_point)
    return None


def _increment_bytes(prefix: bytes) -> bytes | None:
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] < 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    return None


# --------------------------------------------------------------------------
# NaN counting (while writing)
# --------------------------------------------------------------------------


def count_nans(data: pa.RecordBatch | pa.Table) -> dict[int, int]:
    """NaN count of every float/double field (nested too) of conformed Arrow data.

    Fields are keyed by their ``PARQUET:field_id``; values under a null parent
    are not counted. Every float field gets an entry, zero included, as Java's.
    """
    counts: dict[int, int] = {}
    for i, arrow_field in enumerate(data.schema):
        column = data.column(i)
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        for chunk in chunks or [pa.array([], arrow_field.type)]:
            _count_array_nans(chunk, arrow_field, arrow_field.name, counts)
    return counts


def _count_array_nans(array: pa.Array, arrow_field: pa.Field, path: str, counts: dict[int, int]) -> None:
    # Navigate the schema's field, not the array's type: arrays may lose nested field metadata.
    t = arrow_field.type
    if pa.types.is_floating(t):
        nan_count = (pc.sum(pc.is_nan(array)).as_py() or 0) if len(array) else 0
        fid = field_id_of(arrow_field, path)
        counts[fid] = counts.get(fid, 0) + nan_count
    elif pa.types.is_struct(t):
        for child_field, child in zip(t, array.flatten()):
            _count_array_nans(child, child_field, f"{path}.{child_field.name}", counts)
    elif pa.types.is_map(t):
        entries = _valid_map_entries(array)
        _count_array_nans(entries.field(0), t.key_field, f"{path}.key", counts)
        _count_array_nans(entries.field(1), t.item_field, f"{path}.value", counts)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _count_array_nans(array.flatten(), t.value_field, f"{path}.element", counts)


def _valid_map_entries(array: pa.MapArray) -> pa.StructArray:
    """The key/value entries of the non-null maps of ``array``."""
    entries = pa.StructArray.from_arrays([array.keys, array.items], names=["key", "value"])
    mask = array.is_null() if array.null_count else None
    return pa.ListArray.from_arrays(array.offsets, entries, mask=mask).flatten()


# --------------------------------------------------------------------------
# Footer metrics
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FileMetrics:
    """The metrics of one file, in the form of the manifest's ``data_file`` fields."""

    record_count: int
    column_sizes: dict[int, int]
    value_counts: dict[int, int]
    null_value_counts: dict[int, int]
    nan_value_counts: dict[int, int]
    lower_bounds: dict[int, bytes]
    upper_bounds: dict[int, bytes]
    split_offsets: list[int]


@dataclass(frozen=True)
class _Leaf:
    """One Parquet leaf column and the Iceberg field it stores."""

    index: int
    field: NestedField
    repeated: bool
    path: str
    time_unit: str | None


@dataclass
class _Range:
    """Running min/max of one column over row groups; ``valid`` is lost for good."""

    lower: Any = None
    upper: Any = None
    valid: bool = True

    def update(self, lower: Any, upper: Any) -> None:
        if self.lower is None or _order_key(lower) < _order_key(self.lower):
            self.lower = lower
        if self.upper is None or _order_key(upper) > _order_key(self.upper):
            self.upper = upper


def _order_key(value: Any) -> Any:
    # -0.0 sorts before +0.0 (IEEE 754 totalOrder, spec note on float bounds).
    if isinstance(value, float):
        return (value, math.copysign(1.0, value))
    return value


def collect_metrics(
    metadata: pq.FileMetaData,
    schema: Schema,
    *,
    path: str,
    nan_value_counts: Mapping[int, int] | None = None,
    config: MetricsConfig = DEFAULT_METRICS,
) -> FileMetrics:
    """The metrics of the Parquet file ``path`` whose footer is ``metadata``.

    ``schema`` gives the Iceberg type of each field id found in the file;
    ``nan_value_counts`` are the writer's counts (:func:`count_nans`), or None
    when unknown, in which case no NaN counts are reported.
    """
    leaves = _leaves(metadata, schema, path)
    sizes: dict[int, int] = {}
    values: dict[int, int] = {}
    nulls: dict[int, int] = {}
    ranges: dict[int, _Range] = {}
    missing: set[int] = set()
    for rg in range(metadata.num_row_groups):
        row_group = metadata.row_group(rg)
        for leaf in leaves:
            column = row_group.column(leaf.index)
            fid = leaf.field.field_id
            mode = config.mode(fid)
            sizes[fid] = sizes.get(fid, 0) + column.total_compressed_size
            if not mode.has_counts:
                continue
            values[fid] = values.get(fid, 0) + column.num_values
            stats = column.statistics if column.is_stats_set else None
            if stats is None or not stats.has_null_count:
                missing.add(fid)
                continue
            nulls[fid] = nulls.get(fid, 0) + stats.null_count
            if mode.has_bounds and not leaf.repeated:
                _update_range(ranges.setdefault(fid, _Range()), leaf, column, stats, path)
    for fid in missing:
        nulls.pop(fid, None)
        ranges.pop(fid, None)
    lower, upper = _serialize_bounds(leaves, ranges, config)
    return FileMetrics(
        record_count=metadata.num_rows,
        column_sizes=sizes,
        value_counts=values,
        null_value_counts=nulls,
        nan_value_counts=_nan_counts(leaves, nan_value_counts, config),
        lower_bounds=lower,
        upper_bounds=upper,
        split_offsets=split_offsets(metadata),
    )


def split_offsets(metadata: pq.FileMetaData) -> list[int]:
    """The row groups' starting offsets, ascending (Java's ``getStartingPos``)."""
    offsets = []
    for rg in range(metadata.num_row_groups):
        first = metadata.row_group(rg).column(0)
        start = first.data_page_offset
        if first.has_dictionary_page and first.dictionary_page_offset is not None:
            start = min(start, first.dictionary_page_offset)
        offsets.append(start)
    return sorted(offsets)


def _leaves(metadata: pq.FileMetaData, schema: Schema, path: str) -> list[_Leaf]:
    """The file's leaf columns in Parquet order, each with its Iceberg field."""
    arrow_schema = metadata.schema.to_arrow_schema()
    found: list[tuple[pa.Field, str, bool]] = []
    for arrow_field in arrow_schema:
        _collect_leaves(arrow_field, arrow_field.name, False, found)
    if len(found) != metadata.num_columns:
        raise MalformedFileError(
            path,
            None,
            f"schema has {len(found)} leaf fields but the file has {metadata.num_columns} columns",
        )
    return [_leaf(i, f, p, r, metadata, schema, path) for i, (f, p, r) in enumerate(found)]


def _collect_leaves(arrow_field: pa.Field, name: str, repeated: bool, out: list) -> None:
    t = arrow_field.type
    if pa.types.is_struct(t):
        for child in t:
            _collect_leaves(child, f"{name}.{child.name}", repeated, out)
    elif pa.types.is_map(t):
        _collect_leaves(t.key_field, f"{name}.key", True, out)
        _collect_leaves(t.item_field, f"{name}.value", True, out)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        _collect_leaves(t.value_field, f"{name}.element", True, out)
    else:
        out.append((arrow_field, name, repeated))


def _leaf(
    index: int,
    arrow_field: pa.Field,
    name: str,
    repeated: bool,
    metadata: pq.FileMetaData,
    schema: Schema,
    path: str,
) -> _Leaf:
    try:
        fid = field_id_of(arrow_field, name)
    except SchemaError as exc:
        raise MalformedFileError(path, name, str(exc)) from exc
    try:
        nested = schema.find_field(fid)
    except SchemaError:
        raise MalformedFileError(path, name, f"field id {fid} is not in the table schema") from None
    logical = json.loads(metadata.schema.column(index).logical_type.to_json())
    return _Leaf(index, nested, repeated, metadata.schema.column(index).path, logical.get("timeUnit"))


# --------------------------------------------------------------------------
# Decoding Parquet statistics into Python values (docs/table-api.md)
# --------------------------------------------------------------------------


_PHYSICAL: dict[type, tuple[str, ...]] = {
    BooleanType: ("BOOLEAN",),
    IntegerType: ("INT32",),
    LongType: ("INT32", "INT64"),
    FloatType: ("FLOAT",),
    DoubleType: ("FLOAT", "DOUBLE"),
    DateType: ("INT32",),
    TimeType: ("INT32", "INT64"),
    TimestampType: ("INT64", "INT96"),
    TimestamptzType: ("INT64", "INT96"),
    StringType: ("BYTE_ARRAY",),
    BinaryType: ("BYTE_ARRAY",),
    FixedType: ("FIXED_LEN_BYTE_ARRAY",),
    UUIDType: ("FIXED_LEN_BYTE_ARRAY",),
    DecimalType: ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY"),
}


def _update_range(acc: _Range, leaf: _Leaf, column: Any, stats: Any, path: str) -> None:
    """Fold one row group's min/max into ``acc``, or invalidate it."""
    iceberg_type = leaf.field.field_type
    physical = column.physical_type
    if physical not in _PHYSICAL.get(type(iceberg_type), ()):
        reason = f"physical type {physical} cannot store Iceberg type {iceberg_type}"
        raise MalformedFileError(path, leaf.path, reason)
    if not acc.valid:
        return
    if physical == "INT96":  # Java ignores INT96 statistics: they are unreliable
        acc.valid = False
        return
    if not stats.has_min_max:
        # Floats lack min/max when all values are NaN; any other type with
        # non-null values has statistics the writer dropped (e.g. too long).
        has_values = stats.null_count < column.num_values
        if has_values and not isinstance(iceberg_type, (FloatType, DoubleType)):
            acc.valid = False
        return
    lower = _decode(iceberg_type, stats.min_raw, leaf, path, upper=False)
    upper = _decode(iceberg_type, stats.max_raw, leaf, path, upper=True)
    if _is_nan(lower) or _is_nan(upper):
        acc.valid = False
        return
    acc.update(lower, upper)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _decode(iceberg_type: IcebergType, raw: Any, leaf: _Leaf, path: str, upper: bool) -> Any:
    try:
        if isinstance(iceberg_type, DecimalType):
            return _decimal(raw, iceberg_type.scale)
        if isinstance(iceberg_type, (TimeType, TimestampType, TimestamptzType)):
            return _to_micros(int(raw), leaf.time_unit, upper)
        if isinstance(iceberg_type, StringType):
            return bytes(raw).decode("utf-8")
        if isinstance(iceberg_type, UUIDType):
            return uuid.UUID(bytes=bytes(raw))
        if isinstance(iceberg_type, (BinaryType, FixedType)):
            return bytes(raw)
        return raw
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedFileError(path, leaf.path, f"invalid statistics value: {exc}") from exc


_MICROS_PER_UNIT: dict[str | None, tuple[int, int]] = {
    # unit -> (multiplier, divisor) converting to microseconds
    None: (1, 1),
    "microseconds": (1, 1),
    "milliseconds": (1000, 1),
    "nanoseconds": (1, 1000),
}


def _to_micros(value: int, unit: str | None, upper: bool) -> int:
    """Convert a time value to microseconds, rounding outward so it still bounds."""
    if unit not in _MICROS_PER_UNIT:
        raise ValueError(f"unknown time unit {unit!r}")
    multiplier, divisor = _MICROS_PER_UNIT[unit]
    scaled = value * multiplier
    return -((-scaled) // divisor) if upper else scaled // divisor


def _decimal(raw: Any, scale: int) -> Any:
    unscaled = raw if isinstance(raw, int) else int.from_bytes(bytes(raw), "big", signed=True)
    return unscaled_to_decimal(unscaled, scale)


def _serialize_bounds(
    leaves: list[_Leaf], ranges: dict[int, _Range], config: MetricsConfig
) -> tuple[dict[int, bytes], dict[int, bytes]]:
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    types = {leaf.field.field_id: leaf.field.field_type for leaf in leaves}
    for fid, acc in ranges.items():
        if not acc.valid or acc.lower is None:
            continue
        iceberg_type = types[fid]
        low, high = _truncated(iceberg_type, acc.lower, acc.upper, config.mode(fid))
        lower[fid] = _to_bytes(iceberg_type, low)
        if high is not None:
            upper[fid] = _to_bytes(iceberg_type, high)
    return lower, upper


def _to_bytes(iceberg_type: IcebergType, value: Any) -> bytes:
    # A truncated fixed bound is shorter than the type; Appendix D stores it as is.
    if isinstance(iceberg_type, FixedType):
        return bytes(value)
    return to_bytes(iceberg_type, value)


def _truncated(iceberg_type: IcebergType, low: Any, high: Any, mode: MetricsMode) -> tuple[Any, Any]:
    if mode.kind != "truncate" or not isinstance(iceberg_type, (StringType, BinaryType, FixedType)):
        return low, high
    assert mode.length is not None
    return truncate_lower_bound(low, mode.length), truncate_upper_bound(high, mode.length)


def _nan_counts(leaves: list[_Leaf], counted: Mapping[int, int] | None, config: MetricsConfig) -> dict[int, int]:
    if counted is None:
        return {}
    return {
        leaf.field.field_id: counted.get(leaf.field.field_id, 0)
        for leaf in leaves
        if isinstance(leaf.field.field_type, (FloatType, DoubleType)) and config.mode(leaf.field.field_id).has_counts
    }
