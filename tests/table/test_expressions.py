"""Tests of table.expressions: building predicates, binding and literal conversion."""

from __future__ import annotations

import datetime
import struct
import uuid
from decimal import Decimal
from typing import Any

import pytest

from table.errors import SchemaError, ValidationError
from table.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    And,
    BoundPredicate,
    BoundReference,
    Not,
    Operation,
    Or,
    UnboundPredicate,
    bind,
    col,
    referenced_field_ids,
    rewrite_not,
)
from table.schema import Schema
from table.types import IntegerType, LongType, NestedField, StructType
from tests.table.helpers import FILTER_SCHEMA

# --------------------------------------------------------------------------
# Building and binding
# --------------------------------------------------------------------------


def test_column_operators_build_unbound_predicates() -> None:
    assert (col("id") == 5) == UnboundPredicate(Operation.EQ, "id", (5,))
    assert (col("id") >= 5).op is Operation.GE
    assert col("s").is_in(["a", "b"]) == UnboundPredicate(Operation.IN, "s", ("a", "b"))
    assert col("s").is_null().op is Operation.IS_NULL
    combined = (col("id") < 1) & ~(col("s") != "a") | col("x").is_nan()
    assert isinstance(combined, Or) and isinstance(combined.left, And)
    assert isinstance(combined.left.right, Not)
    assert And(ALWAYS_TRUE, ALWAYS_TRUE, ALWAYS_FALSE) == And(And(ALWAYS_TRUE, ALWAYS_TRUE), ALWAYS_FALSE)


def test_is_in_rejects_a_single_string() -> None:
    with pytest.raises(ValidationError, match="'s'"):
        col("s").is_in("abc")


def test_bind_resolves_names_to_field_ids_and_converts_literals() -> None:
    bound = bind(col("id") == 5, FILTER_SCHEMA)
    assert bound == BoundPredicate(Operation.EQ, BoundReference(1, LongType(), ("id",)), (5,))
    nested = bind(col("point.px") < 3, FILTER_SCHEMA)
    assert isinstance(nested, BoundPredicate)
    assert nested.ref.field_id == 7 and nested.ref.path == ("point", "px")


def test_bind_is_case_insensitive_on_request() -> None:
    assert bind(col("MIXED") == True, FILTER_SCHEMA, case_sensitive=False).ref.field_id == 13  # noqa: E712
    with pytest.raises(SchemaError, match="MIXED"):
        bind(col("MIXED") == True, FILTER_SCHEMA)  # noqa: E712


def test_bind_rejects_an_unknown_column() -> None:
    with pytest.raises(SchemaError, match="nope"):
        bind(col("nope") == 1, FILTER_SCHEMA)


@pytest.mark.parametrize(
    "column, value, expected",
    [
        ("id", 7, 7),
        ("x", 1, 1.0),
        ("f", 0.1, struct.unpack("<f", struct.pack("<f", 0.1))[0]),
        ("d", Decimal("1.5"), Decimal("1.50")),
        ("d", 3, Decimal("3.00")),
        ("d", "2.25", Decimal("2.25")),
        ("day", datetime.date(1970, 1, 11), 10),
        ("day", "1970-01-03", 2),
        ("ts", datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc), 1_000_000),
        ("ts", datetime.datetime(1970, 1, 1, 0, 0, 2), 2_000_000),
        ("u", str(uuid.UUID(int=5)), uuid.UUID(int=5)),
        ("u", uuid.UUID(int=5).bytes, uuid.UUID(int=5)),
        ("b", bytearray(b"ab"), b"ab"),
    ],
)
def test_literal_conversion(column: str, value: Any, expected: Any) -> None:
    bound = bind(col(column) == value, FILTER_SCHEMA)
    assert isinstance(bound, BoundPredicate)
    assert bound.literal == expected and type(bound.literal) is type(expected)


@pytest.mark.parametrize(
    "column, value, reason",
    [
        ("id", "5", "str"),
        ("id", True, "bool"),
        ("id", 2**63, "out of range"),
        ("n", 2**31, "out of range"),
        ("x", "1.0", "str"),
        ("s", 5, "int"),
        ("d", Decimal("1.234"), "2 digits after the point"),
        ("d", Decimal("12345678.9"), "9 digits"),
        ("day", "not a date", "not a date"),
        ("Mixed", 1, "int"),
    ],
)
def test_literal_that_does_not_fit_names_the_column(column: str, value: Any, reason: str) -> None:
    with pytest.raises(ValidationError, match=f"column '{column}'.*") as info:
        bind(col(column) == value, FILTER_SCHEMA)
    assert reason in str(info.value)


def test_null_and_nan_literals_are_rejected() -> None:
    with pytest.raises(ValidationError, match="is_null"):
        bind(col("s") == None, FILTER_SCHEMA)  # noqa: E711
    with pytest.raises(ValidationError, match="is_nan"):
        bind(col("x") < float("nan"), FILTER_SCHEMA)


def test_bind_folds_what_the_types_decide() -> None:
    assert bind(col("id").is_null(), FILTER_SCHEMA) is ALWAYS_FALSE
    assert bind(col("id").not_null(), FILTER_SCHEMA) is ALWAYS_TRUE
    assert bind(col("n").is_nan(), FILTER_SCHEMA) is ALWAYS_FALSE
    assert bind(col("n").not_nan(), FILTER_SCHEMA) is ALWAYS_TRUE
    assert bind(col("s").is_in([]), FILTER_SCHEMA) is ALWAYS_FALSE
    assert bind(col("s").not_in([]), FILTER_SCHEMA) is ALWAYS_TRUE
    assert bind(col("s").is_in(["a", "a"]), FILTER_SCHEMA) == bind(col("s") == "a", FILTER_SCHEMA)
    assert bind((col("id") == 1) | col("id").not_null(), FILTER_SCHEMA) is ALWAYS_TRUE
    # a required field inside an optional struct can still be null
    schema = Schema(NestedField(1, "p", StructType(NestedField(2, "q", IntegerType(), required=True))))
    assert isinstance(bind(col("p.q").is_null(), schema), BoundPredicate)


def test_bind_pushes_not_into_predicates() -> None:
    bound = bind(~((col("id") < 5) & col("s").is_in(["a", "b"])), FILTER_SCHEMA)
    assert isinstance(bound, Or)
    assert bound.left.op is Operation.GE and bound.right.op is Operation.NOT_IN
    assert rewrite_not(Not(Not(ALWAYS_FALSE))) is ALWAYS_FALSE
    assert referenced_field_ids(bound) == {1, 3}


def test_cannot_filter_on_a_struct_or_inside_a_list() -> None:
    with pytest.raises(ValidationError, match="point"):
        bind(col("point") == 1, FILTER_SCHEMA)
    from table.types import ListType

    schema = Schema(NestedField(1, "l", ListType(2, StructType(NestedField(3, "v", IntegerType())))))
    with pytest.raises(ValidationError, match="l.element.v|inside"):
        bind(col("l.element.v") == 1, schema)
