"""Iceberg schema <-> Arrow schema, with Iceberg field ids on every Arrow field.

Parquet readers and writers find columns by the ``PARQUET:field_id`` metadata
that pyarrow maps to the Parquet schema's field ids (spec Appendix A: "Column
IDs are required"). Types follow Appendix A:

* timestamp/timestamptz -> ``timestamp("us")`` / ``timestamp("us", tz="UTC")``;
  time -> ``time64("us")``; date -> ``date32``.
* uuid -> the canonical ``arrow.uuid`` extension type, which pyarrow writes as
  ``fixed_len_byte_array(16)`` annotated ``UUID`` as Java does.
* string -> ``string`` and binary -> ``binary`` (32-bit offsets): that is what
  pyarrow's Parquet reader returns, so writing and reading need no cast, and
  one record batch never approaches the 2 GiB offset limit.

:func:`cast_to_schema` conforms incoming Arrow data (matched by name) to a
table schema; it accepts only lossless conversions, which are Iceberg's type
promotions plus representation changes such as ``large_string`` -> ``string``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from table.errors import SchemaError, ValidationError
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
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

FIELD_ID_KEY = b"PARQUET:field_id"
"""Arrow field-metadata key that pyarrow maps to the Parquet field id."""

ArrowData: TypeAlias = pa.RecordBatch | pa.Table

_TO_ARROW: dict[type, pa.DataType] = {
    BooleanType: pa.bool_(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
    DateType: pa.date32(),
    TimeType: pa.time64("us"),
    TimestampType: pa.timestamp("us"),
    TimestamptzType: pa.timestamp("us", tz="UTC"),
    StringType: pa.string(),
    UUIDType: pa.uuid(),
    BinaryType: pa.binary(),
}


# --------------------------------------------------------------------------
# Iceberg -> Arrow
# --------------------------------------------------------------------------


def schema_to_arrow(schema: Schema) -> pa.Schema:
    """The Arrow schema of ``schema``; every field (nested too) carries its id."""
    return pa.schema([field_to_arrow(f) for f in schema.as_struct().fields])


def field_to_arrow(field: NestedField) -> pa.Field:
    """One Iceberg field as an Arrow field with ``PARQUET:field_id`` metadata."""
    return pa.field(
        field.name,
        type_to_arrow(field.field_type),
        nullable=field.optional,
        metadata={FIELD_ID_KEY: str(field.field_id).encode()},
    )


def type_to_arrow(iceberg_type: IcebergType) -> pa.DataType:
    """The Arrow type that stores ``iceberg_type`` (see the module docstring)."""
    if isinstance(iceberg_type, StructType):
        return pa.struct([field_to_arrow(f) for f in iceberg_type.fields])
    if isinstance(iceberg_type, ListType):
        return pa.list_(field_to_arrow(iceberg_type.element_field))
    if isinstance(iceberg_type, MapType):
        return pa.map_(field_to_arrow(iceberg_type.key_field), field_to_arrow(iceberg_type.value_field))
    if isinstance(iceberg_type, DecimalType):
        return pa.decimal128(iceberg_type.precision, iceberg_type.scale)
    if isinstance(iceberg_type, FixedType):
        return pa.binary(iceberg_type.length)
    arrow_type = _TO_ARROW.get(type(iceberg_type))
    if arrow_type is None:
        raise SchemaError(f"no Arrow representation for Iceberg type {iceberg_type}")
    return arrow_type


# --------------------------------------------------------------------------
# Arrow -> Iceberg
# --------------------------------------------------------------------------


def arrow_to_schema(arrow_schema: pa.Schema, schema_id: int = 0) -> Schema:
    """The Iceberg schema of an Arrow schema whose fields all carry field ids.

    Meant for files written by Iceberg writers (Java, pyiceberg, Floe). Parquet
    ``UUID`` columns come back as ``uuid`` only when read with pyarrow's
    ``arrow_extensions_enabled`` (the default of ``pq.ParquetFile``).
    """
    fields = [_field_from_arrow(f, f.name) for f in arrow_schema]
    return Schema(*fields, schema_id=schema_id)


def field_id_of(field: pa.Field, path: str) -> int:
    """The Iceberg field id stored in ``field``'s metadata; ``path`` names it in errors."""
    raw = (field.metadata or {}).get(FIELD_ID_KEY)
    if raw is None:
        raise SchemaError(f"column {path!r} has no field id ({FIELD_ID_KEY.decode()} metadata)")
    try:
        return int(raw)
    except ValueError:
        raise SchemaError(f"column {path!r} has a non-integer field id {raw!r}") from None


def _field_from_arrow(field: pa.Field, path: str) -> NestedField:
    return NestedField(
        field_id_of(field, path),
        field.name,
        _type_from_arrow(field.type, path),
        required=not field.nullable,
    )


def _type_from_arrow(arrow_type: pa.DataType, path: str) -> IcebergType:
    if pa.types.is_struct(arrow_type):
        return StructType(*(_field_from_arrow(f, f"{path}.{f.name}") for f in arrow_type))
    if pa.types.is_map(arrow_type):
        key = _field_from_arrow(arrow_type.key_field, f"{path}.key")
        value = _field_from_arrow(arrow_type.item_field, f"{path}.value")
        return MapType(key.field_id, key.field_type, value.field_id, value.field_type, value.required)
    if _is_list(arrow_type):
        element = _field_from_arrow(arrow_type.value_field, f"{path}.element")
        return ListType(element.field_id, element.field_type, element.required)
    primitive = primitive_from_arrow(arrow_type)
    if primitive is None:
        raise SchemaError(f"column {path!r} has Arrow type {arrow_type}, which Iceberg cannot store")
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "ns":
        raise SchemaError(f"column {path!r} has nanosecond timestamps, which Iceberg v2 cannot store")
    return primitive


def _is_list(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
        or pa.types.is_list_view(arrow_type)
        or pa.types.is_large_list_view(arrow_type)
    )


def primitive_from_arrow(arrow_type: pa.DataType) -> PrimitiveType | None:
    """The Iceberg primitive an Arrow type holds losslessly, or None.

    Narrow integers map to ``int`` (``uint32`` to ``long``); timestamps of
    any unit map to ``timestamp``/``timestamptz`` by the presence of a zone.
    """
    t = arrow_type
    if pa.types.is_dictionary(t):
        return primitive_from_arrow(t.value_type)
    if isinstance(t, pa.UuidType):
        return UUIDType()
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_integer(t):
        return _integer_from_arrow(t)
    if pa.types.is_float32(t):
        return FloatType()
    if pa.types.is_float64(t):
        return DoubleType()
    if pa.types.is_decimal(t):
        return DecimalType(t.precision, t.scale) if t.precision <= DecimalType.MAX_PRECISION else None
    if pa.types.is_date(t):
        return DateType()
    if pa.types.is_time(t):
        return TimeType() if t.unit != "ns" else None
    if pa.types.is_timestamp(t):
        return TimestamptzType() if t.tz is not None else TimestampType()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return StringType()
    if pa.types.is_fixed_size_binary(t):
        return FixedType(t.byte_width)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return BinaryType()
    return None


def _integer_from_arrow(t: pa.DataType) -> PrimitiveType | None:
    bits = t.bit_width + (0 if pa.types.is_signed_integer(t) else 1)
    if bits <= 32:
        return IntegerType()
    if bits <= 64:
        return LongType()
    return None


# --------------------------------------------------------------------------
# Conforming incoming data
# --------------------------------------------------------------------------


def cast_to_schema(data: ArrowData, schema: Schema) -> ArrowData:
    """``data`` (a batch or a table) conformed to ``schema``.

    Columns are matched by name (nested struct fields too), cast losslessly to
    the Arrow types of :func:`schema_to_arrow`, and labelled with field ids.
    Missing optional columns become all-null. Raises :class:`SchemaError`
    naming the column for an unknown, missing or incompatible column and
    :class:`ValidationError` when a required column holds nulls.
    """
    target = schema_to_arrow(schema)
    if isinstance(data, pa.Table):
        sources = data.to_batches() or [_empty_batch(data.schema)]
        batches = [_conform_batch(b, schema, target) for b in sources]
        return pa.Table.from_batches(batches, schema=target)
    return _conform_batch(data, schema, target)


def _empty_batch(arrow_schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in arrow_schema], schema=arrow_schema)


def _conform_batch(batch: pa.RecordBatch, schema: Schema, target: pa.Schema) -> pa.RecordBatch:
    struct = schema.as_struct()
    _reject_unknown(batch.schema.names, struct, "")
    columns = []
    for field in struct.fields:
        index = batch.schema.get_field_index(field.name)
        source = batch.column(index) if index >= 0 else None
        column = _conform_field(source, batch.num_rows, field, field.name)
        _check_required(column, field, field.name, parent_valid=None)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _reject_unknown(names: list[str], struct: StructType, prefix: str) -> None:
    if len(set(names)) != len(names):
        raise SchemaError(f"duplicate column names in incoming data: {names}")
    unknown = [n for n in names if struct.field_by_name(n) is None]
    if unknown:
        paths = [prefix + n for n in unknown]
        raise SchemaError(f"incoming columns {paths} are not in the table schema")


def _conform_field(source: pa.Array | None, length: int, field: NestedField, path: str) -> pa.Array:
    target_type = type_to_arrow(field.field_type)
    if source is None:
        if field.required:
            raise SchemaError(f"required column {path!r} is missing from the incoming data")
        return pa.nulls(length, target_type)
    return _conform_array(source, field.field_type, target_type, path)


def _conform_array(array: pa.Array, iceberg_type: IcebergType, target: pa.DataType, path: str) -> pa.Array:
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), target)
    converter = _NESTED_CONVERTERS.get(type(iceberg_type), _conform_primitive)
    return converter(array, iceberg_type, target, path)


def _conform_struct(array: pa.Array, struct: StructType, target: pa.DataType, path: str) -> pa.Array:
    if not pa.types.is_struct(array.type):
        raise SchemaError(f"column {path!r} is a struct in the table but {array.type} in the data")
    _reject_unknown([f.name for f in array.type], struct, path + ".")
    children = []
    for field in struct.fields:
        index = array.type.get_field_index(field.name)
        child = array.field(index) if index >= 0 else None
        child_path = f"{path}.{field.name}"
        conformed = _conform_field(child, len(array), field, child_path)
        _check_required(conformed, field, child_path, parent_valid=array.is_valid())
        children.append(conformed)
    return pa.StructArray.from_arrays(children, fields=list(target), mask=null_mask(array))


def _conform_list(array: pa.Array, list_type: ListType, target: pa.DataType, path: str) -> pa.Array:
    if not _is_list(array.type):
        raise SchemaError(f"column {path!r} is a list in the table but {array.type} in the data")
    if not pa.types.is_list(array.type):
        array = array.cast(pa.list_(array.type.value_field))
    element_path = f"{path}.element"
    offsets, (values,) = rebased(array, array.values)
    values = _conform_array(values, list_type.element_type, target.value_type, element_path)
    rebuilt = pa.ListArray.from_arrays(offsets, values, type=target, mask=null_mask(array))
    _check_required(rebuilt.flatten(), list_type.element_field, element_path, parent_valid=None)
    return rebuilt


def _conform_map(array: pa.Array, map_type: MapType, target: pa.DataType, path: str) -> pa.Array:
    if not pa.types.is_map(array.type):
        raise SchemaError(f"column {path!r} is a map in the table but {array.type} in the data")
    offsets, (keys, items) = rebased(array, array.keys, array.items)
    keys = _conform_array(keys, map_type.key_type, target.key_type, f"{path}.key")
    items = _conform_array(items, map_type.value_type, target.item_type, f"{path}.value")
    rebuilt = pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=null_mask(array))
    entries = pa.ListArray.from_arrays(
        rebuilt.offsets,
        pa.StructArray.from_arrays([rebuilt.keys, rebuilt.items], names=["key", "value"]),
        mask=null_mask(rebuilt),
    ).flatten()
    _check_required(entries.field(0), map_type.key_field, f"{path}.key", parent_valid=None)
    _check_required(entries.field(1), map_type.value_field, f"{path}.value", parent_valid=None)
    return rebuilt


def rebased(array: pa.Array, *children: pa.Array) -> tuple[pa.Array, list[pa.Array]]:
    """Zero-based offsets of a (possibly sliced) list/map and the children they span.

    pyarrow rebuilds a list with a null mask only from offsets that start a
    fresh buffer, and only the spanned part of a child needs converting.
    """
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return rebased, [child.slice(start, end - start) for child in children]


def _conform_primitive(array: pa.Array, iceberg_type: IcebergType, target: pa.DataType, path: str) -> pa.Array:
    if pa.types.is_timestamp(array.type):
        _check_timezone(array.type, iceberg_type, path)
    source = primitive_from_arrow(array.type)
    if source is None or not can_promote(source, iceberg_type):
        raise SchemaError(f"column {path!r}: cannot write Arrow type {array.type} to Iceberg type {iceberg_type}")
    if array.type == target:
        return array
    try:
        return pc.cast(array, target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValidationError(f"column {path!r}: cannot cast {array.type} to {target}: {exc}") from exc


def can_promote(source: PrimitiveType, target: IcebergType) -> bool:
    """Whether values of ``source`` can be written losslessly as ``target``."""
    if source == target:
        return True
    if isinstance(source, IntegerType):
        return isinstance(target, LongType)
    if isinstance(source, FloatType):
        return isinstance(target, DoubleType)
    if isinstance(source, DecimalType) and isinstance(target, DecimalType):
        # Lossless: no fewer fractional digits and no fewer integer digits.
        integer_digits = target.precision - target.scale >= source.precision - source.scale
        return target.scale >= source.scale and integer_digits
    return source == FixedType(16) and isinstance(target, UUIDType)


def _check_timezone(arrow_type: pa.DataType, iceberg_type: IcebergType, path: str) -> None:
    # A zoned timestamp is an instant, whatever its zone; a naive one is not.
    if isinstance(iceberg_type, TimestamptzType) and arrow_type.tz is None:
        raise SchemaError(f"column {path!r} is timestamptz but the data has timestamps without a zone")
    if isinstance(iceberg_type, TimestampType) and arrow_type.tz is not None:
        raise SchemaError(f"column {path!r} is timestamp without zone but the data has zone {arrow_type.tz}")


def _check_required(array: pa.Array, field: NestedField, path: str, parent_valid: pa.Array | None) -> None:
    """Fail when a required field is null where its parent is present."""
    if not field.required or array.null_count == 0:
        return
    nulls = array.null_count
    if parent_valid is not None:
        nulls = pc.sum(pc.and_(array.is_null(), parent_valid)).as_py() or 0
    if nulls:
        raise ValidationError(f"column {path!r} is required but has {nulls} null value(s)")


def null_mask(array: pa.Array) -> pa.Array | None:
    """The validity of ``array`` as a mask for ``from_arrays``; None when nothing is null."""
    return array.is_null() if array.null_count else None


def arrow_value(value: Any) -> Any:
    """A Python value as ``pa.scalar`` takes it (uuids as their 16 bytes)."""
    return value.bytes if isinstance(value, uuid.UUID) else value


_Converter = Callable[[pa.Array, IcebergType, pa.DataType, str], pa.Array]
_NESTED_CONVERTERS: dict[type, _Converter] = {
    StructType: _conform_struct,  # type: ignore[dict-item]  # each converter takes its own nested type
    ListType: _conform_list,  # type: ignore[dict-item]  # each converter takes its own nested type
    MapType: _conform_map,  # type: ignore[dict-item]  # each converter takes its own nested type
}
