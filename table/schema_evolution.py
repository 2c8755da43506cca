"""Schema evolution (spec "Schema Evolution"): type promotions and :class:`SchemaUpdate`.

Kept apart from :mod:`table.schema` because evolving is a different job from
looking up and serializing a schema: it tracks pending changes by field id
against a base schema and validates them only when they are applied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

from table import conversions
from table.errors import SchemaError, TableError
from table.schema import MAX_FIELD_ID, Schema, fresh_type
from table.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)


def is_promotion(old: IcebergType, new: IcebergType) -> bool:
    """Spec "Schema Evolution": int→long, float→double, decimal(P,S)→decimal(P',S) with P' > P."""
    if isinstance(old, IntegerType):
        return isinstance(new, LongType)
    if isinstance(old, FloatType):
        return isinstance(new, DoubleType)
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision > old.precision
    return False


_ROOT = -1  # parent id of top-level fields in SchemaUpdate's bookkeeping


@dataclass(frozen=True)
class _Move:
    field_id: int
    where: str  # "first", "before" or "after"
    reference_id: int | None = None


class SchemaUpdate:
    """Accumulates schema changes and applies them at once, like Iceberg Java's ``UpdateSchema``.

    Names refer to the base schema (or to columns added by this update).
    Every method returns ``self`` so changes chain; :meth:`apply` validates
    the result and returns it with the new last column id.
    """

    def __init__(self, schema: Schema, last_column_id: int, case_sensitive: bool = True) -> None:
        if last_column_id < schema.highest_field_id:
            raise SchemaError(
                f"last column id {last_column_id} is below the schema's highest field id {schema.highest_field_id}"
            )
        self._base = schema
        self._last_column_id = last_column_id
        self._case_sensitive = case_sensitive
        self._deletes: set[int] = set()
        self._updates: dict[int, NestedField] = {}
        self._adds: dict[int, list[NestedField]] = {}
        self._added_names: dict[str, int] = {}
        self._added_parent: dict[int, int] = {}
        self._moves: dict[int, list[_Move]] = {}
        self._identifier_names: tuple[str, ...] | None = None

    # -- adding ---------------------------------------------------------------

    def add_column(
        self,
        path: str | tuple[str, ...],
        field_type: IcebergType,
        required: bool = False,
        doc: str | None = None,
        default: Any = None,
    ) -> SchemaUpdate:
        """Add a column; a tuple path adds inside a struct (or a list's/map's struct).

        A string is one top-level name and must not contain a dot, so a name
        with dots is never mistaken for a path. ``default`` becomes both the
        initial and the write default; a required column needs one, because
        rows written before it existed have no value.
        """
        if isinstance(path, str):
            if "." in path:
                raise SchemaError(f"cannot add column {path!r}: the name is ambiguous, pass a tuple path")
            path = (path,)
        if not path:
            raise SchemaError("cannot add a column with an empty path")
        *parents, name = path
        full_name = ".".join(path)
        parent_id = self._struct_parent(parents, full_name) if parents else _ROOT
        self._check_name_free(parent_id, parents, name, full_name)
        if required and default is None:
            raise SchemaError(f"cannot add required column {full_name!r} without a default value")
        field_id = self._new_id()
        new_field = NestedField(
            field_id,
            name,
            fresh_type(field_type, self._new_id),
            required,
            doc,
            initial_default=default,
            write_default=default,
        )
        self._check_default(new_field, full_name)
        self._adds.setdefault(parent_id, []).append(new_field)
        self._added_names[full_name] = field_id
        self._added_parent[field_id] = parent_id
        return self

    def _struct_parent(self, parents: list[str], full_name: str) -> int:
        """Id under which fields of the struct named by ``parents`` are added."""
        parent_name = ".".join(parents)
        parent = self._find_base(parent_name, f"cannot add column {full_name!r}")
        parent_type = parent.field_type
        owner = parent.field_id
        if isinstance(parent_type, ListType):
            owner, parent_type = parent_type.element_id, parent_type.element_type
        elif isinstance(parent_type, MapType):
            owner, parent_type = parent_type.value_id, parent_type.value_type
        if not isinstance(parent_type, StructType):
            raise SchemaError(f"cannot add column {full_name!r}: parent {parent_name!r} is not a struct")
        if parent.field_id in self._deletes or owner in self._deletes:
            raise SchemaError(f"cannot add column {full_name!r}: parent {parent_name!r} is being deleted")
        return owner

    def _check_name_free(self, parent_id: int, parents: list[str], name: str, full_name: str) -> None:
        if full_name in self._added_names:
            raise SchemaError(f"cannot add column {full_name!r}: it is already being added")
        siblings = (
            self._base.as_struct().fields
            if parent_id == _ROOT
            else cast(StructType, self._base.find_type(parent_id)).fields
        )
        for sibling in siblings:
            current = self._updates.get(sibling.field_id, sibling)
            if current.name == name and sibling.field_id not in self._deletes:
                raise SchemaError(f"cannot add column {full_name!r}: a column with that name exists")

    def _check_default(self, field: NestedField, full_name: str) -> None:
        if field.initial_default is None:
            return
        try:
            conversions.to_json(field.field_type, field.initial_default)
        except (TableError, ValueError, TypeError, ArithmeticError) as e:
            raise SchemaError(
                f"cannot add column {full_name!r}: default {field.initial_default!r} is not a {field.field_type}: {e}"
            ) from e

    def _new_id(self) -> int:
        if self._last_column_id >= MAX_FIELD_ID:
            raise SchemaError(f"no field ids left: ids above {MAX_FIELD_ID} are reserved")
        self._last_column_id += 1
        return self._last_column_id

    # -- changing existing columns -------------------------------------------

    def delete_column(self, name: str) -> SchemaUpdate:
        field = self._find_base(name, f"cannot delete column {name!r}")
        if field.field_id in self._adds:
            raise SchemaError(f"cannot delete column {name!r}: columns are being added to it")
        if field.field_id in self._updates:
            raise SchemaError(f"cannot delete column {name!r}: it has pending updates")
        if any(field.field_id in (m.field_id, m.reference_id) for ms in self._moves.values() for m in ms):
            raise SchemaError(f"cannot delete column {name!r}: it has pending moves")
        self._reject_container_child(field.field_id, name, "delete")
        self._deletes.add(field.field_id)
        return self

    def rename_column(self, name: str, new_name: str) -> SchemaUpdate:
        field = self._find_for_update(name, "rename")
        self._reject_container_child(field.field_id, name, "rename")
        if not new_name:
            raise SchemaError(f"cannot rename column {name!r} to an empty name")
        self._updates[field.field_id] = replace(field, name=new_name)
        return self

    def update_column(self, name: str, new_type: IcebergType) -> SchemaUpdate:
        """Promote a primitive column's type (int→long, float→double, wider decimal)."""
        field = self._find_for_update(name, "update")
        if field.field_type == new_type:
            return self
        if not isinstance(field.field_type, PrimitiveType):
            raise SchemaError(f"cannot change type of column {name!r}: {field.field_type} is not a primitive")
        if not is_promotion(field.field_type, new_type):
            raise SchemaError(f"cannot change type of column {name!r} from {field.field_type} to {new_type}")
        self._updates[field.field_id] = replace(field, field_type=new_type)
        return self

    def make_optional(self, name: str) -> SchemaUpdate:
        field = self._find_for_update(name, "make optional")
        parent = self._base.parent_id(field.field_id)
        parent_type = None if parent is None else self._base.find_type(parent)
        if isinstance(parent_type, MapType) and parent_type.key_id == field.field_id:
            raise SchemaError(f"cannot make column {name!r} optional: map keys are always required")
        self._updates[field.field_id] = replace(field, required=False)
        return self

    def update_doc(self, name: str, doc: str | None) -> SchemaUpdate:
        field = self._find_for_update(name, "update the doc of")
        self._reject_container_child(field.field_id, name, "set the doc of")
        self._updates[field.field_id] = replace(field, doc=doc)
        return self

    def _find_base(self, name: str, action: str) -> NestedField:
        try:
            field = self._base.find_field(name, self._case_sensitive)
        except SchemaError as e:
            raise SchemaError(f"{action}: {e}") from e
        if field.field_id in self._deletes:
            raise SchemaError(f"{action}: column {name!r} is being deleted")
        return field

    def _find_for_update(self, name: str, verb: str) -> NestedField:
        field = self._find_base(name, f"cannot {verb} column {name!r}")
        return self._updates.get(field.field_id, field)

    def _reject_container_child(self, field_id: int, name: str, verb: str) -> None:
        """List elements and map keys/values can't be renamed or deleted alone."""
        parent = self._base.parent_id(field_id)
        if parent is not None and isinstance(self._base.find_type(parent), (ListType, MapType)):
            raise SchemaError(f"cannot {verb} column {name!r}: it is a list element or a map key or value")

    # -- reordering -----------------------------------------------------------

    def move_first(self, name: str) -> SchemaUpdate:
        field_id, parent = self._movable(name)
        self._moves.setdefault(parent, []).append(_Move(field_id, "first"))
        return self

    def move_before(self, name: str, before_name: str) -> SchemaUpdate:
        return self._move_relative(name, before_name, "before")

    def move_after(self, name: str, after_name: str) -> SchemaUpdate:
        return self._move_relative(name, after_name, "after")

    def _move_relative(self, name: str, reference: str, where: str) -> SchemaUpdate:
        field_id, parent = self._movable(name)
        reference_id, reference_parent = self._movable(reference)
        if field_id == reference_id:
            raise SchemaError(f"cannot move column {name!r} {where} itself")
        if parent != reference_parent:
            raise SchemaError(f"cannot move column {name!r} {where} {reference!r}: they are in different structs")
        self._moves.setdefault(parent, []).append(_Move(field_id, where, reference_id))
        return self

    def _movable(self, name: str) -> tuple[int, int]:
        """(field id, id of the struct owner) of a base or added column."""
        if name in self._added_names:
            field_id = self._added_names[name]
            return field_id, self._added_parent[field_id]
        field = self._find_base(name, f"cannot move column {name!r}")
        parent = self._base.parent_id(field.field_id)
        if parent is not None and not isinstance(self._base.find_type(parent), StructType):
            raise SchemaError(f"cannot move column {name!r}: only struct fields can be reordered")
        return field.field_id, _ROOT if parent is None else parent

    # -- identifier fields ----------------------------------------------------

    def set_identifier_fields(self, *names: str) -> SchemaUpdate:
        """Replace the identifier fields; names resolve against the updated schema."""
        self._identifier_names = names
        return self

    # -- result ---------------------------------------------------------------

    def apply(self, schema_id: int | None = None) -> tuple[Schema, int]:
        """The evolved schema (id ``schema_id``, else the base's) and the new last column id."""
        struct = self._apply_struct(self._base.as_struct(), _ROOT)
        identifier_ids = self._identifier_ids(struct)
        new_id = self._base.schema_id if schema_id is None else schema_id
        return Schema(*struct.fields, schema_id=new_id, identifier_field_ids=identifier_ids), self._last_column_id

    def _identifier_ids(self, struct: StructType) -> list[int]:
        if self._identifier_names is None:
            for field_id in self._base.identifier_field_ids:
                if field_id in self._deletes:
                    name = self._base.find_column_name(field_id)
                    raise SchemaError(
                        f"cannot delete identifier field {name!r}; set new identifier fields to delete it"
                    )
            return list(self._base.identifier_field_ids)
        lookup = Schema(*struct.fields)
        return [lookup.find_field(n, self._case_sensitive).field_id for n in self._identifier_names]

    def _apply_struct(self, struct: StructType, owner_id: int) -> StructType:
        fields = []
        for field in struct.fields:
            if field.field_id in self._deletes:
                continue
            current = self._updates.get(field.field_id, field)
            new_type = self._apply_type(current.field_type, field.field_id)
            fields.append(replace(current, field_type=new_type))
        fields.extend(self._adds.get(owner_id, []))
        return StructType(*_reorder(fields, self._moves.get(owner_id, [])))

    def _apply_type(self, t: IcebergType, owner_id: int) -> IcebergType:
        if isinstance(t, StructType):
            return self._apply_struct(t, owner_id)
        if isinstance(t, ListType):
            element = self._updates.get(t.element_id, t.element_field)
            return ListType(t.element_id, self._apply_type(element.field_type, t.element_id), element.required)
        if isinstance(t, MapType):
            key = self._updates.get(t.key_id, t.key_field)
            value = self._updates.get(t.value_id, t.value_field)
            return MapType(
                t.key_id,
                self._apply_type(key.field_type, t.key_id),
                t.value_id,
                self._apply_type(value.field_type, t.value_id),
                value.required,
            )
        return t


def _reorder(fields: list[NestedField], moves: list[_Move]) -> list[NestedField]:
    """``fields`` with the moves applied one after the other."""
    for move in moves:
        moved = next(f for f in fields if f.field_id == move.field_id)
        fields = [f for f in fields if f.field_id != move.field_id]
        if move.where == "first":
            index = 0
        else:
            index = next(i for i, f in enumerate(fields) if f.field_id == move.reference_id)
            index += 1 if move.where == "after" else 0
        fields.insert(index, moved)
    return fields
