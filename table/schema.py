"""Iceberg schemas: lookup, projection, JSON (Appendix C) and fresh ids.

A schema is the table's top-level struct plus a schema id and the optional
identifier fields. Readers and writers resolve columns by id or by dotted name
many times, so every lookup is indexed once, when the schema is built. Names
follow Iceberg Java: nested struct fields are ``a.b``, list elements
``a.element``, map keys and values ``m.key`` / ``m.value``; a struct inside a
list or map value is also reachable by the short name that skips
``element``/``value`` (``points.x`` for ``points.element.x``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from table import conversions
from table.errors import ROOT_FIELD, JsonFieldError, SchemaError, TableError
from table.types import (
    DoubleType,
    FloatType,
    IcebergType,
    ListType,
    LongType,
    MapType,
    NestedField,
    NestedType,
    PrimitiveType,
    StringType,
    StructType,
    parse_primitive,
)

# Spec "Reserved Field IDs": table columns must not use ids above MAX_FIELD_ID.
MAX_FIELD_ID = 2147483447
FILE_COLUMN_ID = 2147483646  # _file: path of the file a row is stored in
POS_COLUMN_ID = 2147483645  # _pos: ordinal position of a row in its file
DELETED_COLUMN_ID = 2147483644  # _deleted: whether the row has been deleted
SPEC_ID_COLUMN_ID = 2147483643  # _spec_id: spec id of the row's file
PARTITION_COLUMN_ID = 2147483642  # _partition: the row's partition tuple
DELETE_FILE_PATH_ID = 2147483546  # file_path column of position delete files
DELETE_FILE_POS_ID = 2147483545  # pos column of position delete files
DELETE_FILE_ROW_ID = 2147483544  # row column of position delete files

DELETE_FILE_PATH = NestedField(DELETE_FILE_PATH_ID, "file_path", StringType(), required=True)
DELETE_FILE_POS = NestedField(DELETE_FILE_POS_ID, "pos", LongType(), required=True)
ROW_POSITION = NestedField(POS_COLUMN_ID, "_pos", LongType(), required=True)
"""The ``_pos`` metadata column: a row's position in the data file it was read from."""
ROW_ID = NestedField(2147483540, "_row_id", LongType(), required=False)
"""v3 row lineage: a row's unique id, inherited (``first_row_id + _pos``) unless the file stores it."""
LAST_UPDATED_SEQUENCE_NUMBER = NestedField(2147483539, "_last_updated_sequence_number", LongType(), required=False)
"""v3 row lineage: the sequence number that last changed the row, inherited from the file unless stored."""
LINEAGE_FIELDS = (ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER)

FieldRef: TypeAlias = str | int
"""A column named by its dotted name or by its field id."""


class SchemaJsonError(JsonFieldError, SchemaError):
    """A schema JSON object is invalid at ``field``, a dotted path inside it."""

    subject = "schema"


# --------------------------------------------------------------------------
# Index
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Index:
    """Every field of a schema, nested ones included, by id and by name."""

    by_id: dict[int, NestedField]
    name_of: dict[int, str]
    parent_of: dict[int, int]
    by_name: dict[str, int]
    by_lower_name: dict[str, int | None]  # None: two names differ only in case


def _hides_in_short_name(container: IcebergType, child: NestedField) -> bool:
    """Whether ``child`` is a struct list element / map value, skipped in short names."""
    if not isinstance(child.field_type, StructType):
        return False
    if isinstance(container, ListType):
        return True
    return isinstance(container, MapType) and child.field_id == container.value_id


def _build_index(struct: StructType) -> _Index:
    """Walk the struct once; duplicate ids or full names make the schema invalid."""
    by_id: dict[int, NestedField] = {}
    name_of: dict[int, str] = {}
    parent_of: dict[int, int] = {}
    by_name: dict[str, int] = {}
    short_names: dict[str, int] = {}

    def visit(t: IcebergType, parent: int | None, prefix: str, short_prefix: str) -> None:
        for child in t.fields if isinstance(t, NestedType) else ():
            name = prefix + child.name
            if child.field_id in by_id:
                raise SchemaError(f"field id {child.field_id} is used by both {name_of[child.field_id]!r} and {name!r}")
            if name in by_name:
                raise SchemaError(f"two fields are named {name!r} (ids {by_name[name]} and {child.field_id})")
            by_id[child.field_id] = child
            name_of[child.field_id] = name
            by_name[name] = child.field_id
            if parent is not None:
                parent_of[child.field_id] = parent
            short = short_prefix + child.name
            short_names.setdefault(short, child.field_id)
            child_short = short_prefix if _hides_in_short_name(t, child) else short + "."
            visit(child.field_type, child.field_id, name + ".", child_short)

    visit(struct, None, "", "")
    for short, field_id in short_names.items():
        by_name.setdefault(short, field_id)  # canonical names win over short ones
    by_lower: dict[str, int | None] = {}
    for name, field_id in by_name.items():
        lower = name.lower()
        by_lower[lower] = field_id if by_lower.get(lower, field_id) == field_id else None
    return _Index(by_id, name_of, parent_of, by_name, by_lower)


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------


class Schema:
    """An immutable table schema: top-level fields, schema id, identifier fields."""

    __slots__ = ("_identifier_field_ids", "_index", "_schema_id", "_struct")

    def __init__(
        self,
        *fields: NestedField,
        schema_id: int = 0,
        identifier_field_ids: Iterable[int] = (),
    ) -> None:
        self._struct = StructType(*fields)
        self._schema_id = schema_id
        self._index = _build_index(self._struct)
        self._identifier_field_ids = tuple(sorted(set(identifier_field_ids)))
        for field_id in self._identifier_field_ids:
            self._check_identifier(field_id)

    # -- plain attributes ---------------------------------------------------

    @property
    def schema_id(self) -> int:
        return self._schema_id

    @property
    def identifier_field_ids(self) -> tuple[int, ...]:
        """Ids of the fields that identify a row, ascending."""
        return self._identifier_field_ids

    @property
    def fields(self) -> tuple[NestedField, ...]:
        """The top-level fields, in order."""
        return self._struct.fields

    def as_struct(self) -> StructType:
        return self._struct

    @property
    def highest_field_id(self) -> int:
        """The largest field id anywhere in the schema (0 when it has no fields)."""
        return max(self._index.by_id, default=0)

    @property
    def field_ids(self) -> frozenset[int]:
        """Every field id of the schema, nested ones (list elements, map keys/values) included."""
        return frozenset(self._index.by_id)

    def with_schema_id(self, schema_id: int) -> Schema:
        return Schema(*self.fields, schema_id=schema_id, identifier_field_ids=self._identifier_field_ids)

    # -- lookup ---------------------------------------------------------------

    def find_field(self, name_or_id: FieldRef, case_sensitive: bool = True) -> NestedField:
        """The field with this id or dotted name; :class:`SchemaError` if there is none."""
        return self._index.by_id[self._resolve(name_or_id, case_sensitive)]

    def find_type(self, name_or_id: FieldRef, case_sensitive: bool = True) -> IcebergType:
        return self.find_field(name_or_id, case_sensitive).field_type

    def find_column_name(self, field_id: int) -> str:
        """The full dotted name of the field with this id."""
        if field_id not in self._index.name_of:
            raise SchemaError(f"schema {self._schema_id} has no field with id {field_id}")
        return self._index.name_of[field_id]

    def parent_id(self, field_id: int) -> int | None:
        """Id of the field that contains ``field_id``; None for top-level fields."""
        self.find_column_name(field_id)
        return self._index.parent_of.get(field_id)

    def identifier_field_names(self) -> frozenset[str]:
        return frozenset(self._index.name_of[i] for i in self._identifier_field_ids)

    def _resolve(self, name_or_id: FieldRef, case_sensitive: bool) -> int:
        if isinstance(name_or_id, int):
            if name_or_id not in self._index.by_id:
                raise SchemaError(f"schema {self._schema_id} has no field with id {name_or_id}")
            return name_or_id
        if case_sensitive:
            field_id = self._index.by_name.get(name_or_id)
        else:
            lower = name_or_id.lower()
            if lower in self._index.by_lower_name and self._index.by_lower_name[lower] is None:
                raise SchemaError(f"column name {name_or_id!r} is ambiguous when case is ignored")
            field_id = self._index.by_lower_name.get(lower)
        if field_id is None:
            raise SchemaError(f"schema {self._schema_id} has no column {name_or_id!r}")
        return field_id

    # -- projection -----------------------------------------------------------

    def project(self, field_ids: Iterable[int]) -> Schema:
        """The sub-schema of the given field ids, with the parents they need.

        Projection is by id (spec "Column Projection"); ids this schema does
        not have are ignored. A selected nested field keeps only its selected
        descendants, or its whole type when none of them is selected. Map keys
        are always kept whole.
        """
        selected = set(field_ids)
        kept = [f for f in (_prune_field(f, selected) for f in self.fields) if f is not None]
        result = StructType(*kept)
        kept_ids = set(_build_index(result).by_id)
        identifiers = [i for i in self._identifier_field_ids if i in kept_ids]
        return Schema(*kept, schema_id=self._schema_id, identifier_field_ids=identifiers)

    def select(self, *names: str, case_sensitive: bool = True) -> Schema:
        """The sub-schema of the named columns; a named struct comes whole."""
        ids = {self._resolve(name, case_sensitive) for name in names}
        outermost = {i for i in ids if not any(a in ids for a in self._ancestors(i))}
        return self.project(outermost)

    def _ancestors(self, field_id: int) -> Iterator[int]:
        parent = self._index.parent_of.get(field_id)
        while parent is not None:
            yield parent
            parent = self._index.parent_of.get(parent)

    # -- validation -----------------------------------------------------------

    def _check_identifier(self, field_id: int) -> None:
        """Spec "Identifier Field IDs": required, primitive, not float/double, not under optional/list/map."""
        field = self._index.by_id.get(field_id)
        if field is None:
            raise SchemaError(f"identifier field id {field_id} is not in the schema")
        name = self._index.name_of[field_id]
        if not isinstance(field.field_type, PrimitiveType):
            raise SchemaError(f"identifier field {name!r} must be a primitive, not {field.field_type}")
        if isinstance(field.field_type, (FloatType, DoubleType)):
            raise SchemaError(f"identifier field {name!r} must not be of type {field.field_type}")
        if field.optional:
            raise SchemaError(f"identifier field {name!r} must be required")
        for ancestor_id in self._ancestors(field_id):
            ancestor = self._index.by_id[ancestor_id]
            ancestor_name = self._index.name_of[ancestor_id]
            if not isinstance(ancestor.field_type, StructType):
                raise SchemaError(
                    f"identifier field {name!r} must not be nested in {ancestor_name!r} of type {ancestor.field_type}"
                )
            if ancestor.optional:
                raise SchemaError(f"identifier field {name!r} must not be nested in optional field {ancestor_name!r}")

    # -- JSON -----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The Appendix C JSON object of this schema."""
        obj: dict[str, Any] = {"type": "struct", "schema-id": self._schema_id}
        if self._identifier_field_ids:
            obj["identifier-field-ids"] = list(self._identifier_field_ids)
        obj["fields"] = [_field_to_json(f) for f in self.fields]
        return obj

    # -- value semantics ------------------------------------------------------

    def same_columns(self, other: Schema) -> bool:
        """Equal fields and identifier fields, whatever the schema ids."""
        return self._struct == other._struct and self._identifier_field_ids == other._identifier_field_ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and self.same_columns(other) and self._schema_id == other._schema_id

    def __hash__(self) -> int:
        return hash((self._struct, self._schema_id, self._identifier_field_ids))

    def __repr__(self) -> str:
        fields = ", ".join(repr(f) for f in self.fields)
        return f"Schema({fields}, schema_id={self._schema_id}, identifier_field_ids={list(self._identifier_field_ids)})"

    def __str__(self) -> str:
        lines = "".join(f"\n  {f}" for f in self.fields)
        return f"table schema {self._schema_id} {{{lines}\n}}"


def _prune_field(field: NestedField, selected: set[int]) -> NestedField | None:
    """``field`` cut down to the selected ids beneath it, or None if nothing is selected."""
    inner = _prune_type(field.field_type, selected)
    if inner is not None:
        return replace(field, field_type=inner)
    return field if field.field_id in selected else None


def _prune_type(t: IcebergType, selected: set[int]) -> IcebergType | None:
    """``t`` with only the selected descendants, or None when none is selected."""
    if isinstance(t, StructType):
        kept = [f for f in (_prune_field(f, selected) for f in t.fields) if f is not None]
        return StructType(*kept) if kept else None
    if isinstance(t, ListType):
        element = _prune_field(t.element_field, selected)
        return None if element is None else replace(t, element_type=element.field_type)
    if isinstance(t, MapType):
        value = _prune_field(t.value_field, selected)
        if value is None and t.key_id not in selected and _prune_type(t.key_type, selected) is None:
            return None
        return replace(t, value_type=value.field_type if value else t.value_type)
    return None


# --------------------------------------------------------------------------
# JSON (Appendix C)
# --------------------------------------------------------------------------


def type_to_json(t: IcebergType) -> str | dict[str, Any]:
    """The Appendix C JSON of a type: a string for primitives, an object otherwise."""
    if isinstance(t, StructType):
        return {"type": "struct", "fields": [_field_to_json(f) for f in t.fields]}
    if isinstance(t, ListType):
        return {
            "type": "list",
            "element-id": t.element_id,
            "element": type_to_json(t.element_type),
            "element-required": t.element_required,
        }
    if isinstance(t, MapType):
        return {
            "type": "map",
            "key-id": t.key_id,
            "key": type_to_json(t.key_type),
            "value-id": t.value_id,
            "value": type_to_json(t.value_type),
            "value-required": t.value_required,
        }
    return str(t)


def _field_to_json(field: NestedField) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": field.field_id,
        "name": field.name,
        "required": field.required,
        "type": type_to_json(field.field_type),
    }
    if field.doc is not None:
        obj["doc"] = field.doc
    if field.initial_default is not None:
        obj["initial-default"] = conversions.to_json(field.field_type, field.initial_default)
    if field.write_default is not None:
        obj["write-default"] = conversions.to_json(field.field_type, field.write_default)
    return obj


def schema_from_json(obj: Any) -> Schema:
    """Parse an Appendix C schema object; :class:`SchemaJsonError` names the bad field."""
    _expect(obj, dict, "", "a JSON object")
    if obj.get("type", "struct") != "struct":
        raise SchemaJsonError("type", f"a schema must be a struct, not {obj['type']!r}")
    schema_id = _get(obj, "schema-id", int, "", default=0)
    identifiers = _get(obj, "identifier-field-ids", list, "", default=[])
    for i, field_id in enumerate(identifiers):
        _expect(field_id, int, f"identifier-field-ids[{i}]", "an integer")
    fields = _fields_from_json(_get(obj, "fields", list, ""), "fields")
    try:
        return Schema(*fields, schema_id=schema_id, identifier_field_ids=identifiers)
    except SchemaJsonError:
        raise
    except SchemaError as e:
        raise SchemaJsonError("fields", str(e)) from e


def type_from_json(obj: Any, at: str = "type") -> IcebergType:
    """Parse the Appendix C JSON of a type found at JSON path ``at``."""
    if isinstance(obj, str):
        try:
            return parse_primitive(obj)
        except SchemaError as e:
            raise SchemaJsonError(at, str(e)) from e
    _expect(obj, dict, at, "a type name or a type object")
    kind = obj.get("type")
    if kind == "struct":
        return StructType(*_fields_from_json(_get(obj, "fields", list, at), f"{at}.fields"))
    if kind == "list":
        return ListType(
            _get(obj, "element-id", int, at),
            type_from_json(_get(obj, "element", (str, dict), at), f"{at}.element"),
            _get(obj, "element-required", bool, at),
        )
    if kind == "map":
        return MapType(
            _get(obj, "key-id", int, at),
            type_from_json(_get(obj, "key", (str, dict), at), f"{at}.key"),
            _get(obj, "value-id", int, at),
            type_from_json(_get(obj, "value", (str, dict), at), f"{at}.value"),
            _get(obj, "value-required", bool, at),
        )
    raise SchemaJsonError(f"{at}.type", f"unknown nested type {kind!r}")


def _fields_from_json(items: list[Any], at: str) -> list[NestedField]:
    return [_field_from_json(item, f"{at}[{i}]") for i, item in enumerate(items)]


def _field_from_json(obj: Any, at: str) -> NestedField:
    _expect(obj, dict, at, "a JSON object")
    name = _get(obj, "name", str, at)
    raw_type = _get(obj, "type", (str, dict), at)
    try:
        field_type = type_from_json(raw_type, f"{at}.type")
    except SchemaJsonError as e:
        raise SchemaJsonError(e.field, f"{e.reason} (column {name!r})") from e
    return NestedField(
        field_id=_get(obj, "id", int, at),
        name=name,
        field_type=field_type,
        required=_get(obj, "required", bool, at),
        doc=_get(obj, "doc", str, at, default=None),
        initial_default=_default_from_json(obj, "initial-default", field_type, at),
        write_default=_default_from_json(obj, "write-default", field_type, at),
    )


def _default_from_json(obj: dict[str, Any], key: str, field_type: IcebergType, at: str) -> Any:
    if obj.get(key) is None:
        return None
    try:
        return conversions.from_json(field_type, obj[key])
    except (TableError, ValueError, TypeError, ArithmeticError) as e:
        raise SchemaJsonError(f"{at}.{key}", f"invalid default for type {field_type}: {e}") from e


_MISSING = object()


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], at: str, default: Any = _MISSING) -> Any:
    """``obj[key]`` checked to be of ``kind``; missing keys (and nulls) take ``default`` or fail."""
    where = f"{at}.{key}" if at else key
    value = obj.get(key)
    if value is None:
        if default is _MISSING:
            raise SchemaJsonError(where, "is required but missing")
        return default
    _expect(value, kind, where, _describe(kind))
    return value


def _expect(value: Any, kind: type | tuple[type, ...], at: str, what: str) -> None:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    is_bool = isinstance(value, bool)
    if not isinstance(value, kinds) or (is_bool and bool not in kinds):
        raise SchemaJsonError(at or ROOT_FIELD, f"must be {what}, got {value!r}")


def _describe(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", bool: "a boolean", list: "a list", dict: "a JSON object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


# --------------------------------------------------------------------------
# Fresh ids
# --------------------------------------------------------------------------


def _counter(start: int = 1) -> Callable[[], int]:
    it = itertools.count(start)
    return lambda: next(it)


def assign_fresh_ids(schema: Schema, next_id: Callable[[], int] | None = None) -> Schema:
    """``schema`` renumbered with ids from ``next_id`` (default 1, 2, ...), as at table creation.

    The order is Iceberg Java's ``TypeUtil.assignFreshIds``: a struct's own
    fields are numbered first, then each field's nested type, depth first; a
    map's key and value ids come before their types. Identifier fields follow
    their columns.
    """
    next_id = next_id or _counter()
    id_map: dict[int, int] = {}
    fresh = _fresh_struct(schema.as_struct(), next_id, id_map)
    identifiers = [id_map[i] for i in schema.identifier_field_ids]
    return Schema(*fresh.fields, schema_id=schema.schema_id, identifier_field_ids=identifiers)


def fresh_type(t: IcebergType, next_id: Callable[[], int]) -> IcebergType:
    """``t`` with new ids for every nested field, in :func:`assign_fresh_ids` order."""
    return _fresh_type(t, next_id, {})


def _fresh_struct(struct: StructType, next_id: Callable[[], int], id_map: dict[int, int]) -> StructType:
    new_ids = [next_id() for _ in struct.fields]
    fields = []
    for new_id, field in zip(new_ids, struct.fields):
        id_map[field.field_id] = new_id
        fields.append(replace(field, field_id=new_id, field_type=_fresh_type(field.field_type, next_id, id_map)))
    return StructType(*fields)


def _fresh_type(t: IcebergType, next_id: Callable[[], int], id_map: dict[int, int]) -> IcebergType:
    if isinstance(t, StructType):
        return _fresh_struct(t, next_id, id_map)
    if isinstance(t, ListType):
        element_id = next_id()
        id_map[t.element_id] = element_id
        return ListType(element_id, _fresh_type(t.element_type, next_id, id_map), t.element_required)
    if isinstance(t, MapType):
        key_id, value_id = next_id(), next_id()
        id_map[t.key_id], id_map[t.value_id] = key_id, value_id
        key_type = _fresh_type(t.key_type, next_id, id_map)
        value_type = _fresh_type(t.value_type, next_id, id_map)
        return MapType(key_id, key_type, value_id, value_type, t.value_required)
    return t
