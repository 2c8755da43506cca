"""Partition specs: building with Java's names and checks, evolution, the
partition struct, paths, values and Appendix C JSON (pyiceberg as oracle)."""

from __future__ import annotations

import json
import urllib.parse
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg import partitioning as opart
from pyiceberg import schema as oschema
from pyiceberg import transforms as otr
from pyiceberg import types as ptypes
from pyiceberg.typedef import Record

from table.conversions import days_from_civil
from table.errors import JsonFieldError, SchemaError, ValidationError
from table.partitioning import (
    PARTITION_FIELD_ID_START,
    UNPARTITIONED_SPEC,
    PartitionField,
    PartitionSpec,
    PartitionSpecJsonError,
    build_partition_spec,
    evolve_partition_spec,
    partition_spec_from_json,
    url_encode,
)
from table.schema import Schema
from table.transforms import (
    BucketTransform,
    DayTransform,
    IdentityTransform,
    TruncateTransform,
    VoidTransform,
    parse_transform,
)
from table.types import (
    BooleanType,
    DateType,
    DecimalType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), True),
    NestedField(2, "name", StringType()),
    NestedField(3, "ts", TimestamptzType()),
    NestedField(4, "event_date", DateType()),
    NestedField(5, "price", DecimalType(9, 2)),
    NestedField(6, "location", StructType(NestedField(7, "lat", FloatType()), NestedField(8, "city", StringType()))),
    NestedField(9, "tags", ListType(10, StringType())),
    NestedField(11, "props", MapType(12, StringType(), 13, StringType())),
    NestedField(14, "flag", BooleanType()),
)

ORACLE_SCHEMA = oschema.Schema(
    ptypes.NestedField(1, "id", ptypes.LongType(), required=True),
    ptypes.NestedField(2, "name", ptypes.StringType(), required=False),
    ptypes.NestedField(3, "ts", ptypes.TimestamptzType(), required=False),
    ptypes.NestedField(4, "event_date", ptypes.DateType(), required=False),
    ptypes.NestedField(5, "price", ptypes.DecimalType(9, 2), required=False),
)

DEC_1_2017 = days_from_civil(2017, 12, 1)
TS_2017 = (DEC_1_2017 * 24 + 10) * 3_600_000_000 + 12 * 60_000_000


def spec_of(*fields):
    return build_partition_spec(SCHEMA, list(fields))


# ------------------------------------------------------------------ building


def test_build_assigns_ids_and_java_default_names():
    spec = spec_of(("day", "ts"), ("bucket[16]", "id"), ("truncate[4]", "name"), ("identity", "event_date"))
    assert spec.spec_id == 0
    assert [(f.source_id, f.field_id, str(f.transform), f.name) for f in spec.fields] == [
        (3, 1000, "day", "ts_day"),
        (1, 1001, "bucket[16]", "id_bucket"),
        (2, 1002, "truncate[4]", "name_trunc"),
        (4, 1003, "identity", "event_date"),
    ]
    assert spec.last_assigned_field_id == 1003


@pytest.mark.parametrize(
    "transform, name",
    [("year", "ts_year"), ("month", "ts_month"), ("hour", "ts_hour"), ("void", "ts_null"), ("identity", "ts")],
)
def test_default_names_for_other_transforms(transform, name):
    assert spec_of((transform, "ts")).fields[0].name == name


def test_build_honours_explicit_names_ids_and_nested_sources():
    spec = build_partition_spec(
        SCHEMA,
        [(BucketTransform(8), "id", "shard"), ("identity", "location.city")],
        spec_id=3,
        last_partition_id=1010,
    )
    assert [(f.field_id, f.name, f.source_id) for f in spec.fields] == [(1011, "shard", 1), (1012, "location.city", 8)]
    assert spec.spec_id == 3


def test_different_bucket_counts_on_one_column_are_allowed():
    spec = spec_of(("bucket[16]", "id", "b16"), ("bucket[8]", "id", "b8"))
    assert [str(f.transform) for f in spec.fields] == ["bucket[16]", "bucket[8]"]


@pytest.mark.parametrize(
    "fields, reason",
    [
        ([("bucket[4]", "id", "x"), ("day", "ts", "x")], "used more than once"),
        ([("bucket[4]", "id", "name")], "conflicts with a schema column"),
        ([("identity", "id", "name")], "conflicts with a schema column"),
        ([("day", "ts"), ("hour", "ts")], "redundant"),
        ([("bucket[4]", "id", "a"), ("bucket[4]", "id", "b")], "redundant"),
        ([("bucket[4]", "score")], "'score' is not in the schema"),
        ([("bucket[4]", "flag")], r"bucket\[4\] cannot be applied to source type boolean"),
        ([("day", "name")], "day cannot be applied to source type string"),
        ([("bucket[2]", "location.lat")], "cannot be applied to source type float"),
        ([("identity", "location")], "not a primitive"),
        ([("identity", "tags.element")], "inside a list or map"),
        ([("identity", "props.value")], "inside a list or map"),
        ([("bucket[0]", "id")], "bucket count must be a positive int"),
        ([("zorder", "id")], "unknown partition transform"),
        ([("day",)], "must be \\(transform, column\\[, name\\]\\)"),
    ],
)
def test_build_rejects_invalid_fields(fields, reason):
    with pytest.raises(SchemaError, match=reason):
        build_partition_spec(SCHEMA, fields)


def test_identity_and_void_may_reuse_their_own_column_name():
    assert spec_of(("identity", "id", "id")).fields[0].name == "id"
    assert spec_of(("void", "id", "id")).fields[0].name == "id"


# ----------------------------------------------------------- partition type


def test_partition_type_matches_pyiceberg():
    spec = spec_of(
        ("day", "ts"), ("bucket[16]", "id"), ("truncate[4]", "name"), ("identity", "event_date"), ("month", "event_date", "m")
    )
    ours = spec.partition_type(SCHEMA)
    assert all(not f.required for f in ours.fields)
    theirs = opart.PartitionSpec(
        *(opart.PartitionField(f.source_id, f.field_id, otr.parse_transform(str(f.transform)), f.name) for f in spec.fields),
        spec_id=0,
    ).partition_type(ORACLE_SCHEMA)
    # pyiceberg (still in 0.12) marks fields of required sources required;
    # Java and the spec keep every partition field optional (asserted above).
    assert [(f.field_id, f.name, str(f.field_type)) for f in ours.fields] == [
        (f.field_id, f.name, str(f.field_type)) for f in theirs.fields
    ]


def test_partition_type_types():
    spec = spec_of(("day", "ts"), ("bucket[16]", "id"), ("void", "price"))
    assert [f.field_type for f in spec.partition_type(SCHEMA).fields] == [DateType(), IntegerType(), DecimalType(9, 2)]


def test_void_field_survives_its_dropped_source_column():
    spec = PartitionSpec(1, (PartitionField(99, 1000, VoidTransform(), "gone_null"),))
    assert spec.partition_type(SCHEMA).fields[0].field_type == IntegerType()
    assert spec.partition_values({1: 5}, SCHEMA) == (None,)
    assert spec.partition_path((None,), SCHEMA) == "gone_null=null"
    missing = PartitionSpec(1, (PartitionField(99, 1000, DayTransform(), "gone_day"),))
    with pytest.raises(SchemaError, match="'gone_day': source field 99 is not in the schema"):
        missing.partition_type(SCHEMA)


def test_partition_type_names_the_field_whose_source_cannot_be_transformed():
    spec = PartitionSpec(0, (PartitionField(2, 1000, DayTransform(), "bad"),))
    with pytest.raises(SchemaError, match="partition field 'bad'.*day cannot be applied to source type string"):
        spec.partition_type(SCHEMA)


# -------------------------------------------------------- values and paths


def test_partition_values_apply_each_transform():
    spec = spec_of(("day", "ts"), ("bucket[16]", "id"), ("truncate[3]", "name"), ("void", "price"))
    record = {1: 34, 2: "iceberg", 3: TS_2017, 5: Decimal("1.00")}
    assert spec.partition_values(record, SCHEMA) == (DEC_1_2017, 2017239379 % 16, "ice", None)
    assert spec.partition_values({1: None, 2: None, 3: None}, SCHEMA) == (None, None, None, None)
    with pytest.raises(ValidationError, match="no value for source field 3 of partition field 'ts_day'"):
        spec.partition_values({1: 34}, SCHEMA)


def test_partition_path_matches_java():
    # built directly: day and hour of one column would be redundant for the builder
    spec = PartitionSpec(
        0,
        (
            PartitionField(3, 1000, "day", "ts_day"),
            PartitionField(3, 1001, "hour", "ts hour"),
            PartitionField(1, 1002, "bucket[16]", "id_bucket"),
            PartitionField(2, 1003, "truncate[8]", "name_trunc"),
            PartitionField(4, 1004, "identity", "event_date"),
            PartitionField(5, 1005, "identity", "price"),
        ),
    )
    values = (DEC_1_2017, DEC_1_2017 * 24 + 10, 3, "a/b c~*é", DEC_1_2017, Decimal("-1.50"))
    assert spec.partition_path(values, SCHEMA) == (
        "ts_day=2017-12-01/ts+hour=2017-12-01-10/id_bucket=3/name_trunc=a%2Fb+c%7E*%C3%A9"
        "/event_date=2017-12-01/price=-1.50"
    )
    assert spec.partition_path((None,) * 6, SCHEMA).split("/")[0] == "ts_day=null"
    with pytest.raises(ValidationError, match="has 6 fields, got 1 values"):
        spec.partition_path((1,), SCHEMA)


@given(
    day=st.integers(-100_000, 100_000),
    bucket=st.integers(0, 15),
    text=st.text(st.characters(codec="utf-8", exclude_characters="~*"), max_size=8),
)
def test_partition_path_agrees_with_pyiceberg(day, bucket, text):
    # pyiceberg escapes with quote_plus, which differs from Java only on '~' and '*'.
    spec = spec_of(("day", "ts"), ("bucket[16]", "id"), ("truncate[8]", "name"), ("month", "event_date"))
    theirs = opart.PartitionSpec(
        *(opart.PartitionField(f.source_id, f.field_id, otr.parse_transform(str(f.transform)), f.name) for f in spec.fields),
        spec_id=0,
    )
    values = (day, bucket, text, day // 31)
    assert spec.partition_path(values, SCHEMA) == theirs.partition_to_path(Record(*values), ORACLE_SCHEMA)


@given(st.text())
def test_url_encode_is_reversible_and_uses_only_safe_characters(text):
    encoded = url_encode(text)
    assert urllib.parse.unquote_plus(encoded) == text
    assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-*_+%")


# ---------------------------------------------------------------------- JSON

APPENDIX_C = {
    "spec-id": 0,
    "fields": [
        {"source-id": 4, "field-id": 1000, "name": "ts_day", "transform": "day"},
        {"source-id": 1, "field-id": 1001, "name": "id_bucket", "transform": "bucket[16]"},
    ],
}


def test_appendix_c_example_round_trips():
    spec = partition_spec_from_json(APPENDIX_C)
    assert spec.fields[1] == PartitionField(1, 1001, BucketTransform(16), "id_bucket")
    assert spec.to_json() == APPENDIX_C
    assert partition_spec_from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_json_is_readable_by_pyiceberg():
    spec = spec_of(("day", "ts"), ("bucket[16]", "id"), ("truncate[4]", "name"), ("void", "price"))
    theirs = opart.PartitionSpec.model_validate_json(json.dumps(spec.to_json()))
    assert [(f.source_id, f.field_id, str(f.transform), f.name) for f in theirs.fields] == [
        (f.source_id, f.field_id, str(f.transform), f.name) for f in spec.fields
    ]
    assert json.loads(theirs.model_dump_json()) == spec.to_json()


def test_v1_forms_without_field_ids():
    fields = [{"source-id": 4, "name": "ts_day", "transform": "day"}, {"source-id": 1, "name": "b", "transform": "void"}]
    spec = partition_spec_from_json(fields)  # the deprecated bare field list
    assert spec.spec_id == 0
    assert [f.field_id for f in spec.fields] == [1000, 1001]


@pytest.mark.parametrize(
    "obj, reason",
    [
        ("x", "expected an object"),
        ({"spec-id": 0}, "fields: expected a list"),
        ({"spec-id": "0", "fields": []}, "spec-id: expected an int"),
        ({"spec-id": 0, "fields": [3]}, r"fields\[0\]: expected an object"),
        ({"spec-id": 0, "fields": [{"field-id": 1000, "name": "a", "transform": "day"}]}, r"fields\[0\]\.source-id"),
        ({"spec-id": 0, "fields": [{"source-id": 1, "name": "a", "transform": "bucket"}]}, r"fields\[0\]\.transform"),
        ({"spec-id": 0, "fields": [{"source-id": 1, "transform": "day"}]}, r"fields\[0\]\.name"),
        (
            {"spec-id": 0, "fields": [{"source-id": 1, "field-id": True, "name": "a", "transform": "day"}]},
            r"fields\[0\]\.field-id",
        ),
        (
            {
                "spec-id": 0,
                "fields": [
                    {"source-id": 1, "field-id": 1000, "name": "a", "transform": "day"},
                    {"source-id": 2, "field-id": 1000, "name": "b", "transform": "day"},
                ],
            },
            "repeats field id 1000",
        ),
    ],
)
def test_json_errors_name_the_field(obj, reason):
    with pytest.raises(ValidationError, match=reason):
        partition_spec_from_json(obj)


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ("spec", "(root)"),
        ({"spec-id": 0, "fields": None}, "fields"),
        ({"fields": []}, "spec-id"),
        ({"spec-id": 0, "fields": [{}, {"source-id": 1, "name": "a", "transform": "bucket[x]"}]}, "fields[0].name"),
        ({"spec-id": 0, "fields": [{"source-id": 1, "name": "a", "transform": "bucket[x]"}]}, "fields[0].transform"),
    ],
)
def test_json_errors_carry_the_field_apart_from_the_reason(obj, field):
    with pytest.raises(PartitionSpecJsonError) as info:
        partition_spec_from_json(obj)
    assert info.value.field == field
    assert isinstance(info.value, JsonFieldError) and isinstance(info.value, ValidationError)
    assert info.value.reason and field not in info.value.reason


# ------------------------------------------------------------- unpartitioned


def test_unpartitioned_spec():
    assert PARTITION_FIELD_ID_START == 1000
    assert UNPARTITIONED_SPEC.spec_id == 0 and UNPARTITIONED_SPEC.fields == ()
    assert UNPARTITIONED_SPEC.is_unpartitioned
    assert UNPARTITIONED_SPEC.last_assigned_field_id == 999
    assert UNPARTITIONED_SPEC.partition_type(SCHEMA) == StructType()
    assert UNPARTITIONED_SPEC.partition_path((), SCHEMA) == ""
    assert UNPARTITIONED_SPEC.to_json() == {"spec-id": 0, "fields": []}
    assert spec_of(("void", "ts")).is_unpartitioned
    assert not spec_of(("day", "ts")).is_unpartitioned


def test_compatible_with_ignores_ids():
    spec = spec_of(("day", "ts"), ("bucket[16]", "id"))
    renumbered = build_partition_spec(SCHEMA, [("day", "ts"), ("bucket[16]", "id")], 4, 1500)
    assert spec != renumbered and spec.compatible_with(renumbered)
    assert not spec.compatible_with(spec_of(("day", "ts"), ("bucket[8]", "id", "id_bucket")))
    assert not spec.compatible_with(spec_of(("bucket[16]", "id"), ("day", "ts")))


def test_spec_rejects_repeated_names_and_accepts_transform_strings():
    field = PartitionField(1, 1000, "bucket[4]", "b")
    assert field.transform == BucketTransform(4)
    with pytest.raises(ValidationError, match="repeats name 'b'"):
        PartitionSpec(0, (field, PartitionField(2, 1001, "identity", "b")))
    with pytest.raises(ValidationError, match="empty name"):
        PartitionField(1, 1000, IdentityTransform(), "")
    assert spec_of(("bucket[4]", "id"), ("day", "ts")).fields_by_source_id(3)[0].name == "ts_day"


# ----------------------------------------------------------------- evolution


def test_evolution_reuses_ids_of_known_source_transform_pairs():
    spec0 = spec_of(("day", "ts"), ("bucket[16]", "id"))
    spec1 = evolve_partition_spec([spec0], SCHEMA, [("day", "ts"), ("truncate[4]", "name")], 1001)
    assert spec1.spec_id == 1
    assert [(f.field_id, f.name) for f in spec1.fields] == [(1000, "ts_day"), (1002, "name_trunc_4")]

    # bucket[16](id) comes back from spec 0 with its id and name; a rename keeps the id
    spec2 = evolve_partition_spec(
        [spec0, spec1], SCHEMA, [("bucket[16]", "id"), ("day", "ts", "event_day"), ("bucket[8]", "id")], 1002
    )
    assert spec2.spec_id == 2
    assert [(f.field_id, f.name) for f in spec2.fields] == [(1001, "id_bucket"), (1000, "event_day"), (1003, "id_bucket_8")]


def test_evolution_of_a_table_without_specs_starts_at_zero():
    spec = evolve_partition_spec([], SCHEMA, [("identity", "event_date")], 999)
    assert (spec.spec_id, spec.fields[0].field_id) == (0, 1000)


def test_evolution_validates_like_building():
    spec0 = spec_of(("day", "ts"))
    with pytest.raises(ValidationError, match="below existing partition field id 1000"):
        evolve_partition_spec([spec0], SCHEMA, [("day", "ts")], 999)
    with pytest.raises(SchemaError, match="redundant"):
        evolve_partition_spec([spec0], SCHEMA, [("day", "ts"), ("hour", "ts")], 1000)
    with pytest.raises(SchemaError, match="conflicts with a schema column"):
        evolve_partition_spec([spec0], SCHEMA, [("day", "ts", "id")], 1000)


def test_parse_transform_is_what_specs_store():
    assert PartitionField(1, 1000, parse_transform("truncate[10]"), "t").transform == TruncateTransform(10)
