"""Fold a writer schema's columns into a table schema, by Iceberg's evolution rules. Pure.

A table fed by a stream takes every writer schema it has seen: columns match by name at every depth, and

* a field the table lacks is added, optional (rows written before have no value for it);
* a type the writer widens (int to long, float to double, a decimal's precision) is widened;
* a field the writer makes optional, or no longer has, becomes optional and is written as null;
* a type the writer narrows (long in the table, int in the writer) changes nothing: the table's type holds it.

Anything else (another type, a map's key type, a key column gone or optional) refuses the writer schema
with a :class:`WriterSchemaRefused` naming the field, both types and the schema id. Folding several writer
schemas in turn gives one schema that takes them all, whatever their order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ingest.driver.table_diff import ABSENT, Difference, Kind, evolve_schema, type_text
from table.errors import SchemaError
from table.schema import Schema, assign_fresh_ids
from table.schema_evolution import is_promotion
from table.types import IcebergType, ListType, MapType, NestedField, StructType


class WriterSchemaRefused(ValueError):
    """A writer schema the table cannot take without a change Iceberg does not allow."""

    def __init__(self, schema_id: int, column: str, in_table: str, in_writer: str, reason: str) -> None:
        self.schema_id, self.column, self.in_table, self.in_writer, self.reason = (
            schema_id,
            column,
            in_table,
            in_writer,
            reason,
        )
        what = f"writer schema id {schema_id}" if schema_id >= 0 else "the Avro reader schema"
        super().__init__(f"{what} refused: {self.detail}")

    @property
    def detail(self) -> str:
        """The refusal without the schema's name: the field, both types, and why."""
        return f"column {self.column!r} is {self.in_table} in the table and {self.in_writer} in the writer schema: {self.reason}"

    def __reduce__(self) -> tuple:
        return type(self), (self.schema_id, self.column, self.in_table, self.in_writer, self.reason)


@dataclass(frozen=True)
class Folded:
    """The table schema after one writer schema, with what changed (empty: nothing)."""

    schema: Schema
    last_column_id: int
    changes: tuple[Difference, ...]

    def summary(self) -> str:
        """``add column b.c (long); widen column n from int to long``, or ``no change``."""
        return "; ".join(c.summary() for c in self.changes) or "no change"


def first_schema(writer: StructType, key: Sequence[str], schema_id: int) -> Folded:
    """The schema of a table created from ``writer``, ids as at table creation; ``key`` columns its identifiers."""
    plain = Schema(*writer.fields)
    ids = []
    for column in key:
        field = _find(plain, column)
        if field is None or not field.required:
            state = "absent" if field is None else "optional"
            raise WriterSchemaRefused(
                schema_id, column, "the key", state, "a key column must be a required field of every writer schema"
            )
        ids.append(field.field_id)
    fresh = assign_fresh_ids(Schema(*writer.fields, identifier_field_ids=ids))
    return Folded(fresh, fresh.highest_field_id, ())


def fold(table: Schema, last_column_id: int, writer: StructType, schema_id: int) -> Folded:
    """``table`` evolved to take ``writer`` too; raises :class:`WriterSchemaRefused`."""
    keys = {table.find_column_name(i) for i in table.identifier_field_ids}
    changes = list(_struct(table.as_struct(), writer, (), schema_id, keys))
    if not changes:
        return Folded(table, last_column_id, ())
    schema, last = evolve_schema(table, last_column_id, changes)
    return Folded(schema, last, tuple(changes))


def _struct(
    found: StructType, writer: StructType, parent: tuple[str, ...], schema_id: int, keys: set[str]
) -> Iterator[Difference]:
    by_name = {f.name: f for f in writer.fields}
    for field in found.fields:
        path = (*parent, field.name)
        theirs = by_name.get(field.name)
        if theirs is None:
            yield from _gone(field, path, schema_id, keys)
        else:
            yield from _field(field, theirs, path, schema_id, keys)
    table_names = {f.name for f in found.fields}
    for field in writer.fields:
        if field.name not in table_names:
            path = (*parent, field.name)
            text = type_text(field.field_type)
            yield Difference(
                Kind.ADD_COLUMN, _subject(path), ABSENT, text, path=path, new_type=field.field_type, doc=field.doc
            )


def _gone(field: NestedField, path: tuple[str, ...], schema_id: int, keys: set[str]) -> Iterator[Difference]:
    column = ".".join(path)
    if column in keys:
        raise WriterSchemaRefused(schema_id, column, "the key", "absent", "every writer schema must carry the key")
    if field.required:
        yield Difference(Kind.MAKE_OPTIONAL, _subject(path), "required", "absent", path=path)


def _field(
    found: NestedField, theirs: NestedField, path: tuple[str, ...], schema_id: int, keys: set[str]
) -> Iterator[Difference]:
    if found.required and not theirs.required:
        column = ".".join(path)
        if column in keys:
            raise WriterSchemaRefused(schema_id, column, "required (a key)", "optional", "a key column stays required")
        yield Difference(Kind.MAKE_OPTIONAL, _subject(path), "required", "optional", path=path)
    yield from _types(found.field_type, theirs.field_type, path, schema_id, keys)


def _types(
    found: IcebergType, theirs: IcebergType, path: tuple[str, ...], schema_id: int, keys: set[str]
) -> Iterator[Difference]:
    if isinstance(found, StructType) and isinstance(theirs, StructType):
        yield from _struct(found, theirs, path, schema_id, keys)
    elif isinstance(found, ListType) and isinstance(theirs, ListType):
        yield from _field(found.element_field, theirs.element_field, (*path, "element"), schema_id, keys)
    elif isinstance(found, MapType) and isinstance(theirs, MapType):
        if type_text(found.key_type) != type_text(theirs.key_type):
            raise _refused(schema_id, (*path, "key"), found.key_type, theirs.key_type, "a map's key type is fixed")
        yield from _field(found.value_field, theirs.value_field, (*path, "value"), schema_id, keys)
    elif type_text(found) == type_text(theirs) or is_promotion(theirs, found):
        return
    elif is_promotion(found, theirs):
        yield Difference(Kind.WIDEN_TYPE, _subject(path), str(found), str(theirs), path=path, new_type=theirs)
    else:
        reason = "Iceberg promotes only int to long, float to double and decimal(P,S) to decimal(P',S) with P' > P"
        raise _refused(schema_id, path, found, theirs, reason)


def _refused(
    schema_id: int, path: tuple[str, ...], found: IcebergType, theirs: IcebergType, reason: str
) -> WriterSchemaRefused:
    return WriterSchemaRefused(schema_id, ".".join(path), type_text(found), type_text(theirs), reason)


def _find(schema: Schema, column: str) -> NestedField | None:
    try:
        return schema.find_field(column)
    except SchemaError:
        return None


def _subject(path: tuple[str, ...]) -> str:
    return f"column {'.'.join(path)!r}"
