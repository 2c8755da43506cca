"""Tests for table.sort_order: model rules and Appendix C JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.errors import ValidationError
from table.schema import Schema
from table.sort_order import (
    UNSORTED_SORT_ORDER,
    NullOrder,
    SortDirection,
    SortField,
    SortOrder,
    SortOrderJsonError,
    sort_order_from_json,
)
from table.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform, parse_transform
from table.types import ListType, LongType, NestedField, StringType, TimestampType

SPEC_EXAMPLE = {
    "order-id": 1,
    "fields": [
        {"transform": "identity", "source-id": 2, "direction": "asc", "null-order": "nulls-first"},
        {"transform": "bucket[4]", "source-id": 3, "direction": "desc", "null-order": "nulls-last"},
    ],
}


def test_parses_spec_example() -> None:
    order = sort_order_from_json(SPEC_EXAMPLE)
    assert order == SortOrder(
        1,
        (
            SortField(2, IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_FIRST),
            SortField(3, BucketTransform(4), SortDirection.DESC, NullOrder.NULLS_LAST),
        ),
    )
    assert order.to_json() == SPEC_EXAMPLE


def test_null_order_defaults_follow_direction() -> None:
    assert SortField(1).null_order is NullOrder.NULLS_FIRST
    assert SortField(1).transform == IdentityTransform()
    assert SortField(1, direction=SortDirection.DESC).null_order is NullOrder.NULLS_LAST
    assert SortField(1, direction=SortDirection.DESC, null_order=NullOrder.NULLS_FIRST).null_order is NullOrder.NULLS_FIRST


def test_unsorted_order() -> None:
    assert UNSORTED_SORT_ORDER.order_id == 0 and UNSORTED_SORT_ORDER.is_unsorted
    assert UNSORTED_SORT_ORDER.to_json() == {"order-id": 0, "fields": []}
    assert sort_order_from_json({"order-id": 0, "fields": []}) == UNSORTED_SORT_ORDER


def test_order_id_zero_is_reserved_for_unsorted() -> None:
    with pytest.raises(ValidationError, match="reserved"):
        SortOrder(0, (SortField(1),))
    with pytest.raises(ValidationError, match="id 0"):
        SortOrder(2, ())


@pytest.mark.parametrize(
    ("obj", "field", "reason"),
    [
        ([], "(root)", "object"),
        ({"fields": []}, "order-id", "integer"),
        ({"order-id": 1}, "fields", "list"),
        ({"order-id": 1, "fields": [{"transform": "identity", "direction": "asc", "null-order": "nulls-first"}]},
         "fields[0].source-id", "integer"),
        ({"order-id": 1, "fields": [{"transform": "zorder", "source-id": 1, "direction": "asc",
                                     "null-order": "nulls-first"}]}, "fields[0].transform", "zorder"),
        ({"order-id": 1, "fields": [{"transform": "identity", "source-id": 1, "direction": "up",
                                     "null-order": "nulls-first"}]}, "fields[0].direction", "'up'"),
        ({"order-id": 1, "fields": [{"transform": "identity", "source-id": 1, "direction": "asc"}]},
         "fields[0].null-order", "None"),
        ({"order-id": 0, "fields": [{"transform": "identity", "source-id": 1, "direction": "asc",
                                     "null-order": "nulls-last"}]}, "order-id", "reserved"),
    ],
)
def test_bad_json_names_the_field(obj: Any, field: str, reason: str) -> None:
    with pytest.raises(SortOrderJsonError, match=reason) as info:
        sort_order_from_json(obj)
    assert info.value.field == field


TRANSFORMS = st.sampled_from(["identity", "bucket[16]", "truncate[4]", "day", "hour", "year", "month", "void"])


@st.composite
def sort_orders(draw: st.DrawFn) -> SortOrder:
    fields = draw(
        st.lists(
            st.builds(
                SortField,
                st.integers(1, 2**31 - 1),
                TRANSFORMS.map(parse_transform),
                st.sampled_from(SortDirection),
                st.sampled_from(NullOrder),
            ),
            max_size=4,
        )
    )
    return SortOrder(draw(st.integers(1, 100)) if fields else 0, tuple(fields))


@given(sort_orders())
def test_json_round_trip(order: SortOrder) -> None:
    assert sort_order_from_json(json.loads(json.dumps(order.to_json()))) == order


@settings(deadline=None)  # the first example imports pyiceberg
@given(sort_orders())
def test_json_agrees_with_pyiceberg(order: SortOrder) -> None:
    from pyiceberg.table.sorting import SortOrder as PyOrder

    theirs = PyOrder.model_validate_json(json.dumps(order.to_json()))
    assert sort_order_from_json(json.loads(theirs.model_dump_json())) == order


def test_check_compatible() -> None:
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "ts", TimestampType()),
        NestedField(3, "tags", ListType(4, StringType())),
    )
    SortOrder(1, (SortField(2, DayTransform()), SortField(1, BucketTransform(8)))).check_compatible(schema)
    with pytest.raises(ValidationError, match="day.*'id'"):
        SortOrder(1, (SortField(1, DayTransform()),)).check_compatible(schema)
    with pytest.raises(ValidationError, match="'tags'"):
        SortOrder(1, (SortField(3),)).check_compatible(schema)
    with pytest.raises(ValidationError, match="99"):
        SortOrder(1, (SortField(99, TruncateTransform(2)),)).check_compatible(schema)


def test_str() -> None:
    order = SortOrder(3, (SortField(2, BucketTransform(4), SortDirection.DESC),))
    assert str(order) == "sort order 3 [bucket[4](2) desc nulls-last]"
