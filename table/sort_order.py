"""Sort orders (spec "Sorting", Appendix C "Sort Orders").

A sort order tells writers how to sort rows within a file and lets readers
know how a file was sorted. Order id 0 is reserved for the unsorted order, so
a sorted order never has id 0 and the unsorted order never has fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from table.errors import ROOT_FIELD, JsonFieldError, TableError, ValidationError
from table.schema import Schema
from table.transforms import IdentityTransform, Transform, parse_transform


class SortDirection(Enum):
    ASC = "asc"
    DESC = "desc"


class NullOrder(Enum):
    NULLS_FIRST = "nulls-first"
    NULLS_LAST = "nulls-last"


class SortOrderJsonError(JsonFieldError, ValidationError):
    """A sort order JSON object is invalid at ``field``, a dotted path inside it."""

    subject = "sort order"


@dataclass(frozen=True)
class SortField:
    """Sort by ``transform(source column)``; nulls default as in Iceberg Java (first when ascending)."""

    source_id: int
    transform: Transform = field(default_factory=IdentityTransform)
    direction: SortDirection = SortDirection.ASC
    null_order: NullOrder | None = None

    def __post_init__(self) -> None:
        if self.null_order is None:
            default = NullOrder.NULLS_FIRST if self.direction is SortDirection.ASC else NullOrder.NULLS_LAST
            object.__setattr__(self, "null_order", default)

    def to_json(self) -> dict[str, Any]:
        assert self.null_order is not None  # set in __post_init__
        return {
            "transform": str(self.transform),
            "source-id": self.source_id,
            "direction": self.direction.value,
            "null-order": self.null_order.value,
        }

    def __str__(self) -> str:
        assert self.null_order is not None
        return f"{self.transform}({self.source_id}) {self.direction.value} {self.null_order.value}"


@dataclass(frozen=True)
class SortOrder:
    """An ordered list of sort fields; the first field sorts first."""

    order_id: int = 0
    fields: tuple[SortField, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        if self.order_id == 0 and self.fields:
            raise ValidationError("sort order id 0 is reserved for the unsorted order, which has no fields")
        if self.order_id != 0 and not self.fields:
            raise ValidationError(f"sort order {self.order_id} has no fields; the unsorted order must have id 0")
        if self.order_id < 0:
            raise ValidationError(f"sort order id must not be negative, got {self.order_id}")

    @property
    def is_unsorted(self) -> bool:
        return not self.fields

    def check_compatible(self, schema: Schema) -> None:
        """Raise :class:`ValidationError` unless every field sorts a primitive column its transform accepts."""
        for sort_field in self.fields:
            try:
                source = schema.find_field(sort_field.source_id)
            except TableError as e:
                raise ValidationError(f"sort order {self.order_id}: {e}") from e
            name = schema.find_column_name(sort_field.source_id)
            if not source.field_type.is_primitive:
                raise ValidationError(
                    f"sort order {self.order_id}: cannot sort by {name!r} of non-primitive type {source.field_type}"
                )
            if not sort_field.transform.can_transform(source.field_type):
                raise ValidationError(
                    f"sort order {self.order_id}: transform {sort_field.transform} "
                    f"cannot apply to {name!r} of type {source.field_type}"
                )

    def to_json(self) -> dict[str, Any]:
        return {"order-id": self.order_id, "fields": [f.to_json() for f in self.fields]}

    def __str__(self) -> str:
        return f"sort order {self.order_id} [" + ", ".join(str(f) for f in self.fields) + "]"


UNSORTED_SORT_ORDER = SortOrder(0, ())


def sort_order_from_json(obj: Any) -> SortOrder:
    """Parse an Appendix C sort order; :class:`SortOrderJsonError` names the bad field."""
    if not isinstance(obj, dict):
        raise SortOrderJsonError(ROOT_FIELD, f"must be a JSON object, got {obj!r}")
    order_id = obj.get("order-id")
    if not isinstance(order_id, int) or isinstance(order_id, bool):
        raise SortOrderJsonError("order-id", f"must be an integer, got {order_id!r}")
    items = obj.get("fields")
    if not isinstance(items, list):
        raise SortOrderJsonError("fields", f"must be a list, got {items!r}")
    fields = tuple(_sort_field_from_json(item, f"fields[{i}]") for i, item in enumerate(items))
    try:
        return SortOrder(order_id, fields)
    except ValidationError as e:
        raise SortOrderJsonError("order-id", str(e)) from e


def _sort_field_from_json(obj: Any, at: str) -> SortField:
    if not isinstance(obj, dict):
        raise SortOrderJsonError(at, f"must be a JSON object, got {obj!r}")
    source_id = obj.get("source-id")
    if not isinstance(source_id, int) or isinstance(source_id, bool):
        raise SortOrderJsonError(f"{at}.source-id", f"must be an integer, got {source_id!r}")
    return SortField(
        source_id,
        _transform_from_json(obj.get("transform"), f"{at}.transform"),
        _enum_from_json(SortDirection, obj.get("direction"), f"{at}.direction"),
        _enum_from_json(NullOrder, obj.get("null-order"), f"{at}.null-order"),
    )


def _transform_from_json(text: Any, at: str) -> Transform:
    if not isinstance(text, str):
        raise SortOrderJsonError(at, f"must be a transform string, got {text!r}")
    try:
        return parse_transform(text)
    except TableError as e:
        raise SortOrderJsonError(at, str(e)) from e


def _enum_from_json(kind: type[Enum], text: Any, at: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise SortOrderJsonError(at, f"must be one of {allowed}, got {text!r}") from None
