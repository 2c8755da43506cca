"""ingest.driver.table_diff: what differs between a table and its configuration, case by case (pure, no catalog)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from ingest.tasks.decode_records import DecodeSpec
from ingest.job import SortTerm, TableSpec
from ingest.driver.table_diff import Difference, Kind, NotEvolvable, evolve_schema, table_differences
from ingest.driver.table_setup import job_schema
from table.metadata import TableMetadata, new_table_metadata
from table.schema import Schema
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
    StringType,
    StructType,
    TimestamptzType,
)

_ids = iter(range(100, 10_000))  # the configuration's own ids: they must never matter


def col(name: str, field_type: IcebergType, required: bool = False) -> NestedField:
    return NestedField(next(_ids), name, field_type, required)


def struct(*fields: NestedField) -> StructType:
    return StructType(*fields)


BASE = [
    col("id", LongType(), required=True),
    col("qty", IntegerType()),
    col("status", StringType()),
    col("ts", TimestamptzType()),
    col("customer", struct(col("name", StringType()), col("tier", IntegerType()))),
]


def spec(*fields: NestedField, key: tuple[str, ...] = ("id",), partition=(), sort=()) -> TableSpec:
    schema = Schema(*fields)
    return TableSpec("shop.orders", DecodeSpec(schema, key_fields=key), partition=partition, sort_order=sort)


def table(configured: TableSpec) -> TableMetadata:
    """The table Floe creates for ``configured`` (fresh ids, as the catalog assigns them)."""
    schema = job_schema(configured)
    return new_table_metadata(
        schema, configured.partition_spec(schema), configured.iceberg_sort_order(schema), "/tmp/t", {}
    )


def diff(old: TableSpec, new: TableSpec) -> list[Difference]:
    return table_differences(table(old), new)


def only(differences: list[Difference]) -> Difference:
    assert len(differences) == 1, [d.message() for d in differences]
    return differences[0]


def replaced(fields: list[NestedField], column: str, **changes: Any) -> list[NestedField]:
    return [replace(f, **changes) if f.name == column else f for f in fields]


# ---------------------------------------------------------------------------
# Nothing differs
# ---------------------------------------------------------------------------


def test_the_table_floe_created_matches_its_configuration():
    configured = spec(*BASE, partition=(("day", "ts"), ("bucket[16]", "id")), sort=(SortTerm("id", direction="desc"),))
    assert table_differences(table(configured), configured) == []


def test_column_order_and_docs_are_not_differences():
    reordered = [BASE[2], BASE[0], BASE[1], BASE[4], replace(BASE[3], doc="when")]
    assert diff(spec(*BASE), spec(*reordered)) == []


# ---------------------------------------------------------------------------
# Evolvable
# ---------------------------------------------------------------------------


def test_an_added_optional_column_is_evolvable():
    d = only(diff(spec(*BASE), spec(*BASE, col("note", StringType()))))
    assert (d.kind, d.evolvable, d.path, d.new_type) == (Kind.ADD_COLUMN, True, ("note",), StringType())
    assert d.summary() == "add column note (string)"


def test_a_field_added_inside_a_struct_is_evolvable():
    customer = col("customer", struct(col("name", StringType()), col("tier", IntegerType()), col("email", StringType())))
    d = only(diff(spec(*BASE), spec(*replaced(BASE, "customer", field_type=customer.field_type))))
    assert (d.kind, d.path) == (Kind.ADD_COLUMN, ("customer", "email"))
    assert d.summary() == "add column customer.email (string)"


def test_a_field_added_to_the_struct_of_a_list_is_evolvable():
    old = [*BASE, col("lines", ListType(next(_ids), struct(col("sku", StringType(), True)), True))]
    new = [*BASE, col("lines", ListType(next(_ids), struct(col("sku", StringType(), True), col("n", IntegerType())), True))]
    d = only(diff(spec(*old), spec(*new)))
    assert (d.kind, d.path) == (Kind.ADD_COLUMN, ("lines", "element", "n"))


@pytest.mark.parametrize("old, new", [
    (IntegerType(), LongType()),
    (FloatType(), DoubleType()),
    (DecimalType(10, 2), DecimalType(12, 2)),
])
def test_the_promotions_of_the_spec_are_evolvable(old, new):
    d = only(diff(spec(*BASE, col("v", old)), spec(*BASE, col("v", new))))
    assert (d.kind, d.evolvable, d.new_type) == (Kind.WIDEN_TYPE, True, new)
    assert d.summary() == f"widen column v from {old} to {new}"


def test_a_map_value_is_widened_and_a_list_element_made_optional():
    old = [*BASE, col("m", MapType(next(_ids), StringType(), next(_ids), IntegerType(), True)),
           col("l", ListType(next(_ids), StringType(), True))]
    new = [*BASE, col("m", MapType(next(_ids), StringType(), next(_ids), LongType(), True)),
           col("l", ListType(next(_ids), StringType(), False))]
    kinds = {(d.kind, d.path) for d in diff(spec(*old), spec(*new))}
    assert kinds == {(Kind.WIDEN_TYPE, ("m", "value")), (Kind.MAKE_OPTIONAL, ("l", "element"))}


def test_a_required_column_made_optional_is_evolvable():
    old = [*BASE, col("code", StringType(), required=True)]
    d = only(diff(spec(*old), spec(*replaced(old, "code", required=False))))
    assert (d.kind, d.evolvable, d.summary()) == (Kind.MAKE_OPTIONAL, True, "make column code optional")


# ---------------------------------------------------------------------------
# Refused, each with the field, both values, the reason and the fix
# ---------------------------------------------------------------------------


def test_an_added_required_column_is_refused_with_the_reason():
    d = only(diff(spec(*BASE), spec(*BASE, col("note", StringType(), required=True))))
    assert (d.kind, d.evolvable) == (Kind.ADD_REQUIRED_COLUMN, False)
    assert d.message() == (
        "column 'note': absent in the table, required string in the configuration: Iceberg adds a required column "
        "only with a default value for the rows written before, and format 2 tables have no column defaults. "
        "Fix: declare it optional in the configuration (required: false)"
    )


def test_a_required_field_added_inside_an_existing_struct_is_refused():
    customer = struct(col("name", StringType()), col("tier", IntegerType()), col("email", StringType(), True))
    d = only(diff(spec(*BASE), spec(*replaced(BASE, "customer", field_type=customer))))
    assert (d.kind, d.path) == (Kind.ADD_REQUIRED_COLUMN, ("customer", "email"))


def test_an_optional_table_column_the_configuration_lacks_is_kept():
    """Floe writes null to it, as to any optional column a record does not carry."""
    assert diff(spec(*BASE), spec(*[f for f in BASE if f.name != "status"])) == []
    customer = struct(col("name", StringType()))
    assert diff(spec(*BASE), spec(*replaced(BASE, "customer", field_type=customer))) == []


def test_a_required_table_column_the_configuration_lacks_is_refused_with_the_statements():
    with_code = [*BASE, col("code", StringType(), required=True)]
    d = only(diff(spec(*with_code), spec(*BASE)))
    assert (d.kind, d.evolvable) == (Kind.DROP_COLUMN, False)
    assert d.message() == (
        "column 'code': required string in the table, absent in the configuration: Floe cannot write a required "
        "column its configuration does not have (an optional one it fills with null). Fix: add it back to the "
        "configuration, or by hand in Spark SQL make it optional "
        "(ALTER TABLE shop.orders ALTER COLUMN code DROP NOT NULL) or drop it (ALTER TABLE shop.orders DROP COLUMN code)"
    )


def test_a_required_nested_field_the_configuration_lacks_names_its_path():
    table_customer = struct(col("name", StringType()), col("tier", IntegerType(), required=True))
    configured = struct(col("name", StringType()))
    d = only(diff(spec(*replaced(BASE, "customer", field_type=table_customer)),
                  spec(*replaced(BASE, "customer", field_type=configured))))
    assert d.kind is Kind.DROP_COLUMN and d.message().endswith("(ALTER TABLE shop.orders DROP COLUMN customer.tier)")


def test_a_renamed_required_column_is_refused_with_the_statement_that_renames_it():
    old = [*BASE, col("code", StringType(), required=True)]
    d = only(diff(spec(*old), spec(*replaced(old, "code", name="sku"))))
    assert d.kind is Kind.RENAME_COLUMN
    assert d.message().startswith("column 'code': 'code' (string) in the table, 'sku' (string) in the "
                                  "configuration: Floe does not rename columns")
    assert "ALTER TABLE shop.orders RENAME COLUMN code TO sku, or change the configuration back to 'code'" \
        in d.message()


def test_an_optional_column_left_out_next_to_a_new_one_of_its_type_is_kept_and_the_new_one_added():
    """Not a rename: the left-out optional column is kept (null-filled), the new one is a plain add."""
    d = only(diff(spec(*BASE), spec(*replaced(BASE, "status", name="state"))))
    assert (d.kind, d.evolvable, d.path) == (Kind.ADD_COLUMN, True, ("state",))
    customer = struct(col("name", StringType()), col("level", IntegerType()))
    d = only(diff(spec(*BASE), spec(*replaced(BASE, "customer", field_type=customer))))
    assert (d.kind, d.path) == (Kind.ADD_COLUMN, ("customer", "level"))


def test_evolving_past_a_left_out_optional_column_keeps_it_and_adds_the_new_one():
    metadata = table(spec(*BASE))
    configured = spec(*replaced(BASE, "status", name="state"))
    schema, _ = evolve_schema(metadata.schema(), metadata.last_column_id, table_differences(metadata, configured))
    assert {"status", "state"} <= {f.name for f in schema.as_struct().fields}


def test_a_gone_and_a_new_column_of_different_types_are_a_kept_column_and_an_add():
    new = [*[f for f in BASE if f.name != "status"], col("note", LongType())]
    assert {d.kind for d in diff(spec(*BASE), spec(*new))} == {Kind.ADD_COLUMN}


@pytest.mark.parametrize("old, new", [
    (LongType(), IntegerType()),
    (DoubleType(), FloatType()),
    (DecimalType(12, 2), DecimalType(10, 2)),
])
def test_a_narrowed_type_is_refused(old, new):
    d = only(diff(spec(*BASE, col("v", old)), spec(*BASE, col("v", new))))
    assert d.kind is Kind.NARROW_TYPE
    assert d.message() == (f"column 'v': {old} in the table, {new} in the configuration: Iceberg cannot narrow a type. "
                           f"Fix: change the configuration back to {old}")


@pytest.mark.parametrize("old, new", [
    (StringType(), LongType()),
    (DecimalType(10, 2), DecimalType(10, 3)),
    (IntegerType(), DoubleType()),
    (StringType(), StructType(NestedField(900, "s", StringType()))),
])
def test_other_type_changes_are_refused(old, new):
    d = only(diff(spec(*BASE, col("v", old)), spec(*BASE, col("v", new))))
    assert (d.kind, d.path) == (Kind.CHANGE_TYPE, ("v",))
    assert "Iceberg promotes only int to long, float to double" in d.message()
    assert d.fix.startswith("change the configuration back to ")


def test_a_map_key_never_changes():
    old = [*BASE, col("m", MapType(next(_ids), IntegerType(), next(_ids), StringType()))]
    new = [*BASE, col("m", MapType(next(_ids), LongType(), next(_ids), StringType()))]
    d = only(diff(spec(*old), spec(*new)))
    assert (d.kind, d.path, d.reason) == (Kind.CHANGE_TYPE, ("m", "key"), "Iceberg cannot change a map's key type")


def test_an_optional_column_made_required_is_refused():
    d = only(diff(spec(*BASE), spec(*replaced(BASE, "status", required=True))))
    assert d.kind is Kind.MAKE_REQUIRED
    assert d.message() == (
        "column 'status': optional in the table, required in the configuration: Iceberg cannot make an optional "
        "column required: rows written before may hold nulls. Fix: declare it optional in the configuration "
        "(required: false)"
    )


def test_a_changed_key_is_refused_with_the_statement_that_sets_it():
    fields = replaced(BASE, "status", required=True)
    d = only(diff(spec(*fields), spec(*fields, key=("id", "status"))))
    assert d.kind is Kind.CHANGE_KEY
    assert d.message() == (
        "key (identifier fields): [id] in the table, [id, status] in the configuration: Floe does not change a "
        "table's key at start-up: the rows already written are keyed by the table's. Fix: change the "
        "configuration's key back to [id], or set it by hand in Spark SQL: "
        "ALTER TABLE shop.orders SET IDENTIFIER FIELDS id, status"
    )
    dropped = only(diff(spec(*BASE), spec(*BASE, key=())))
    assert dropped.in_table == "[id]" and dropped.configured == "none"
    assert dropped.fix.endswith("ALTER TABLE shop.orders DROP IDENTIFIER FIELDS id")


def test_a_changed_partition_spec_is_refused_as_a_partition_evolution():
    old = spec(*BASE, partition=(("day", "ts"),))
    d = only(diff(old, spec(*BASE, partition=(("day", "ts"), ("bucket[16]", "id")))))
    assert d.kind is Kind.CHANGE_PARTITIONING
    assert d.message() == (
        "partition spec: [day(ts)] in the table, [day(ts), bucket(16, id)] in the configuration: changing it is a "
        "partition evolution, which Floe does not do at start-up. Fix: change the configuration's partition_spec "
        "back to [day(ts)], or evolve it by hand in Spark SQL: ALTER TABLE shop.orders ADD PARTITION FIELD "
        "bucket(16, id)"
    )
    gone = only(diff(old, spec(*BASE)))
    assert gone.configured == "unpartitioned"
    assert gone.fix.endswith("ALTER TABLE shop.orders DROP PARTITION FIELD day(ts)")


def test_a_changed_sort_order_is_refused():
    old = spec(*BASE, sort=(SortTerm("id"),))
    d = only(diff(old, spec(*BASE, sort=(SortTerm("id", direction="desc"), SortTerm("ts", "day")))))
    assert d.kind is Kind.CHANGE_SORT_ORDER
    assert (d.in_table, d.configured) == ("[id ASC NULLS FIRST]", "[id DESC NULLS LAST, day(ts) ASC NULLS FIRST]")
    assert d.fix.endswith("ALTER TABLE shop.orders WRITE ORDERED BY id DESC NULLS LAST, day(ts) ASC NULLS FIRST")
    assert only(diff(old, spec(*BASE))).fix.endswith("ALTER TABLE shop.orders WRITE UNORDERED")


def test_another_format_version_is_refused():
    metadata = table(spec(*BASE))
    object.__setattr__(metadata, "format_version", 1)  # loading refuses it already; the diff says it anyway
    d = only(table_differences(metadata, spec(*BASE)))
    assert (d.kind, d.in_table, d.configured) == (Kind.CHANGE_FORMAT_VERSION, "1", "2")
    assert d.fix.endswith("ALTER TABLE shop.orders SET TBLPROPERTIES ('format-version' = '2')")


def test_names_spark_cannot_read_bare_are_backquoted():
    old = [*BASE, col("unit price", DoubleType(), required=True)]
    d = only(diff(spec(*old), spec(*BASE)))
    assert d.fix.endswith("ALTER TABLE shop.orders DROP COLUMN `unit price`)")


def test_evolvable_and_refused_differences_come_together():
    new = [*replaced(BASE, "qty", field_type=LongType()), col("note", StringType())]
    differences = diff(spec(*BASE), spec(*new, key=()))
    assert sorted(d.kind.value for d in differences) == ["add column", "change key", "widen type"]
    assert [d.evolvable for d in differences if d.kind is Kind.CHANGE_KEY] == [False]


# ---------------------------------------------------------------------------
# Applying the evolvable ones
# ---------------------------------------------------------------------------


def test_evolving_applies_every_evolution_with_ids_after_the_last_column_id():
    old_fields = [*BASE, col("code", StringType(), required=True)]
    customer = struct(col("name", StringType()), col("tier", IntegerType()), col("email", StringType()))
    new_fields = [*replaced(replaced(old_fields, "qty", field_type=LongType()), "customer", field_type=customer),
                  col("note", StringType())]
    new_fields = replaced(new_fields, "code", required=False)
    metadata = table(spec(*old_fields))
    metadata = replace(metadata, last_column_id=20)  # ids up to 20 were used by columns dropped since
    schema, last_id = evolve_schema(metadata.schema(), metadata.last_column_id,
                                    table_differences(metadata, spec(*new_fields)))
    assert last_id == 22
    assert {schema.find_field("customer.email").field_id, schema.find_field("note").field_id} == {21, 22}
    assert schema.find_field("qty").field_type == LongType() and not schema.find_field("code").required
    assert schema.identifier_field_ids == metadata.schema().identifier_field_ids
    assert table_differences(replace(metadata, schemas=(schema,), last_column_id=last_id), spec(*new_fields)) == []


def test_evolving_refuses_a_refused_difference():
    metadata = table(spec(*BASE))
    refused = table_differences(metadata, spec(*replaced(BASE, "qty", field_type=StringType())))
    with pytest.raises(NotEvolvable, match="column 'qty': change type is not an evolution Floe applies"):
        evolve_schema(metadata.schema(), metadata.last_column_id, refused)


def test_a_table_below_the_configured_format_version_is_refused_with_the_upgrade_command():
    metadata = table(spec(*BASE))
    d = only(table_differences(metadata, dataclasses.replace(spec(*BASE), format_version=3)))
    assert (d.kind, d.in_table, d.configured) == (Kind.CHANGE_FORMAT_VERSION, "2", "3")
    assert "floe table upgrade shop.orders --format-version 3" in d.fix


def test_a_v3_table_is_written_by_a_v2_configuration():
    metadata = table(spec(*BASE)).upgrade_format_version(3)
    assert table_differences(metadata, spec(*BASE)) == []


def test_a_column_default_value_is_refused_naming_the_column():
    metadata = table(spec(*BASE)).upgrade_format_version(3)
    schema = metadata.schema()
    column = schema.fields[0]
    with_default = dataclasses.replace(column, initial_default=_default_for(column))
    object.__setattr__(metadata, "schemas", (Schema(with_default, *schema.fields[1:], schema_id=schema.schema_id,
                                                      identifier_field_ids=schema.identifier_field_ids),))
    d = only(table_differences(metadata, spec(*BASE)))
    assert d.subject == f"default value of column {column.name}" and "does not write v3 column default" in d.reason


def _default_for(column):
    from table.types import LongType, StringType
    return {LongType(): 0, StringType(): "x"}.get(column.field_type, 0)
