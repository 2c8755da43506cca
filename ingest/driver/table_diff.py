"""What differs between an existing table and the table its configuration asks for.

Pure: no catalog, no files. :func:`table_differences` compares the table's
current schema, identifier fields, default partition spec, default sort order
and format version with the job's :class:`~ingest.job.TableSpec`;
:mod:`ingest.driver.table_setup` applies the evolvable differences at start-up and
refuses the others, and ``floe check`` reports both.

Columns are matched by name, as the configuration names them: the
configuration's field ids only number its columns, the table's are the real
ones. Evolvable are the changes Iceberg's schema evolution allows on a table
that already holds rows (spec "Schema Evolution"):

* adding an optional column, at the top level or inside a struct;
* widening a type: int → long, float → double, decimal(P,S) → decimal(P',S), P' > P;
* making a required column optional.

Everything else is refused, each with a one-line message naming the field, the
table's value, the configured value, why, and how to fix it: change the
configuration back, or do it by hand in Spark SQL (Iceberg's SQL extensions).
Column order and docs are not compared: they change nothing Floe writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from ingest.job import TableSpec
from table.metadata import SUPPORTED_FORMAT_VERSIONS, TableMetadata
from table.partitioning import PartitionSpec
from table.schema import Schema
from table.schema_evolution import SchemaUpdate, is_promotion
from table.sort_order import NullOrder, SortOrder
from table.transforms import VoidTransform
from table.types import IcebergType, ListType, MapType, NestedField, StructType


class Kind(Enum):
    """What kind of difference; the first three are the evolvable ones."""

    ADD_COLUMN = "add column"
    WIDEN_TYPE = "widen type"
    MAKE_OPTIONAL = "make optional"
    ADD_REQUIRED_COLUMN = "add required column"
    DROP_COLUMN = "drop column"
    RENAME_COLUMN = "rename column"
    NARROW_TYPE = "narrow type"
    CHANGE_TYPE = "change type"
    MAKE_REQUIRED = "make required"
    CHANGE_KEY = "change key"
    CHANGE_PARTITIONING = "change partitioning"
    CHANGE_SORT_ORDER = "change sort order"
    CHANGE_FORMAT_VERSION = "change format version"


EVOLVABLE = frozenset({Kind.ADD_COLUMN, Kind.WIDEN_TYPE, Kind.MAKE_OPTIONAL})
ABSENT = "absent"


@dataclass(frozen=True)
class Difference:
    """One difference between the table (``in_table``) and the configuration (``configured``).

    ``path`` is the column's path (list elements, map keys and values by
    Iceberg's names ``element``, ``key``, ``value``); ``new_type`` and
    ``doc`` are what an evolvable add or widening applies. ``reason`` and
    ``fix`` are set for refused differences only.
    """

    kind: Kind
    subject: str
    in_table: str
    configured: str
    reason: str = ""
    fix: str = ""
    path: tuple[str, ...] = ()
    new_type: IcebergType | None = None
    doc: str | None = None

    @property
    def evolvable(self) -> bool:
        return self.kind in EVOLVABLE

    @property
    def column(self) -> str:
        return ".".join(self.path)

    def summary(self) -> str:
        """Short, for the start-up log line and ``floe check``: ``add column note (string)``."""
        if self.kind is Kind.ADD_COLUMN:
            return f"add column {self.column} ({self.configured})"
        if self.kind is Kind.WIDEN_TYPE:
            return f"widen column {self.column} from {self.in_table} to {self.configured}"
        if self.kind is Kind.MAKE_OPTIONAL:
            return f"make column {self.column} optional"
        return self.message()

    def message(self) -> str:
        """One line: the field, both values, and for a refused difference why and how to fix it."""
        text = f"{self.subject}: {self.in_table} in the table, {self.configured} in the configuration"
        return f"{text}: {self.reason}. Fix: {self.fix}" if self.reason else text


class NotEvolvable(ValueError):
    """A refused difference was handed to :func:`evolve_schema`."""


def table_differences(metadata: TableMetadata, table: TableSpec) -> list[Difference]:
    """Every difference between the table's current metadata and ``table``, evolvable or not."""
    wanted = table.schema()
    sql_table = sql_identifier(table.identifier)
    return [
        *_format_differences(metadata, table.format_version, sql_table),
        *_struct_differences(metadata.schema().as_struct(), wanted.as_struct(), (), sql_table),
        *_key_differences(metadata.schema(), table.key_fields(), sql_table),
        *_partition_differences(metadata, table.partition_spec(wanted), wanted, sql_table),
        *_sort_differences(metadata, table.iceberg_sort_order(wanted), wanted, sql_table),
    ]


def evolve_schema(schema: Schema, last_column_id: int, evolutions: Iterable[Difference]) -> tuple[Schema, int]:
    """``schema`` with the evolvable differences applied, and the new last column id.

    New field ids follow ``last_column_id`` (the table's, not the schema's
    highest id: ids of dropped columns are never reused).
    """
    update = SchemaUpdate(schema, last_column_id)
    for difference in evolutions:
        if difference.kind is Kind.ADD_COLUMN:
            assert difference.new_type is not None
            update.add_column(difference.path, difference.new_type, doc=difference.doc)
        elif difference.kind is Kind.WIDEN_TYPE:
            assert difference.new_type is not None
            update.update_column(difference.column, difference.new_type)
        elif difference.kind is Kind.MAKE_OPTIONAL:
            update.make_optional(difference.column)
        else:
            raise NotEvolvable(f"{difference.subject}: {difference.kind.value} is not an evolution Floe applies")
    return update.apply()


@dataclass(frozen=True)
class KeptColumn:
    """An optional table column the configuration no longer lists: kept, and written as null from now on.

    ``renamed_to`` names the one new optional column of the same type, when there is exactly one: the configuration
    may mean a rename, which Floe cannot tell from a new column, so the note says how to rename it by hand instead.
    """

    path: tuple[str, ...]
    type: str
    renamed_to: str | None = None
    sql_table: str = ""

    def note(self) -> str:
        """One clause for ``floe check`` and the start-up log."""
        column = ".".join(self.path)
        text = f"keeps column {column} ({self.type}), no longer configured: written as null"
        if self.renamed_to is None:
            return text
        return (
            f"{text}; if {self.renamed_to} is {column} renamed, rename it by hand before the start instead: "
            f"ALTER TABLE {self.sql_table} RENAME COLUMN {sql_column(self.path)} TO {sql_name(self.renamed_to)}"
        )


def kept_columns(metadata: TableMetadata, table: TableSpec) -> list[KeptColumn]:
    """The optional table columns the configuration lacks, each with the new column it may be a rename of."""
    return list(_kept(metadata.schema().as_struct(), table.schema().as_struct(), (), sql_identifier(table.identifier)))


def _kept(found: StructType, wanted: StructType, parent: tuple[str, ...], sql_table: str) -> Iterator[KeptColumn]:
    wanted_by_name = {f.name: f for f in wanted.fields}
    found_names = {f.name for f in found.fields}
    added = [f for f in wanted.fields if f.name not in found_names and not f.required]
    for field in found.fields:
        if field.name in wanted_by_name:
            inner = (field.field_type, wanted_by_name[field.name].field_type)
            if isinstance(inner[0], StructType) and isinstance(inner[1], StructType):
                yield from _kept(inner[0], inner[1], (*parent, field.name), sql_table)
        elif not field.required:
            same = [f.name for f in added if _shape(f) == _shape(field)]
            yield KeptColumn(
                (*parent, field.name), type_text(field.field_type), same[0] if len(same) == 1 else None, sql_table
            )


# ---------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------


def _struct_differences(
    found: StructType, wanted: StructType, parent: tuple[str, ...], sql_table: str
) -> Iterator[Difference]:
    """Fields matched by name; a required field gone and one of the same shape new reads as a rename.

    Only a required table column can be half of a rename: an optional one the
    configuration lacks is kept (filled with null), so a new optional column
    next to it is a plain add, not something to refuse.
    """
    found_by_name = {f.name: f for f in found.fields}
    wanted_names = {f.name for f in wanted.fields}
    added = [f for f in wanted.fields if f.name not in found_by_name]
    dropped = [f for f in found.fields if f.name not in wanted_names]
    renames = _renames([f for f in dropped if f.required], added)
    for field in wanted.fields:
        if field.name in found_by_name:
            yield from _field_differences(found_by_name[field.name], field, (*parent, field.name), sql_table)
    for old, new in renames:
        yield _renamed(old, new, parent, sql_table)
    old_names, new_names = {old.name for old, _ in renames}, {new.name for _, new in renames}
    yield from (_added(f, (*parent, f.name)) for f in added if f.name not in new_names)
    # A table column the configuration lacks is kept (Floe writes null to it), unless it is required.
    yield from (_dropped(f, (*parent, f.name), sql_table) for f in dropped if f.name not in old_names and f.required)


def _renames(dropped: Sequence[NestedField], added: Sequence[NestedField]) -> list[tuple[NestedField, NestedField]]:
    """Pairs (old, new) where each is the other's only candidate of the same shape.

    ``dropped`` holds the required table columns the configuration lacks: each
    is refused anyway, and naming it a rename points at the likelier fix.
    """
    pairs = []
    for old in dropped:
        candidates = [f for f in added if _shape(f) == _shape(old)]
        if len(candidates) == 1 and [f for f in dropped if _shape(f) == _shape(old)] == [old]:
            pairs.append((old, candidates[0]))
    return pairs


def _field_differences(
    found: NestedField, wanted: NestedField, path: tuple[str, ...], sql_table: str
) -> Iterator[Difference]:
    if found.required and not wanted.required:
        yield Difference(Kind.MAKE_OPTIONAL, _subject(path), "required", "optional", path=path)
    elif wanted.required and not found.required:
        yield Difference(
            Kind.MAKE_REQUIRED,
            _subject(path),
            "optional",
            "required",
            reason="Iceberg cannot make an optional column required: rows written before may hold nulls",
            fix="declare it optional in the configuration (required: false)",
            path=path,
        )
    yield from _type_differences(found.field_type, wanted.field_type, path, sql_table)


def _type_differences(
    found: IcebergType, wanted: IcebergType, path: tuple[str, ...], sql_table: str
) -> Iterator[Difference]:
    if isinstance(found, StructType) and isinstance(wanted, StructType):
        yield from _struct_differences(found, wanted, path, sql_table)
    elif isinstance(found, ListType) and isinstance(wanted, ListType):
        yield from _field_differences(found.element_field, wanted.element_field, (*path, "element"), sql_table)
    elif isinstance(found, MapType) and isinstance(wanted, MapType):
        if type_text(found.key_type) != type_text(wanted.key_type):
            reason = "Iceberg cannot change a map's key type"
            yield _type_change((*path, "key"), found.key_type, wanted.key_type, reason)
        yield from _field_differences(found.value_field, wanted.value_field, (*path, "value"), sql_table)
    elif type_text(found) != type_text(wanted):
        yield _primitive_change(found, wanted, path)


def _primitive_change(found: IcebergType, wanted: IcebergType, path: tuple[str, ...]) -> Difference:
    if is_promotion(found, wanted):
        return Difference(Kind.WIDEN_TYPE, _subject(path), str(found), str(wanted), path=path, new_type=wanted)
    if is_promotion(wanted, found):
        return Difference(
            Kind.NARROW_TYPE,
            _subject(path),
            str(found),
            str(wanted),
            reason="Iceberg cannot narrow a type",
            fix=f"change the configuration back to {found}",
            path=path,
        )
    return _type_change(
        path,
        found,
        wanted,
        "Iceberg promotes only int to long, float to double and decimal(P,S) to decimal(P',S) with P' > P",
    )


def _type_change(path: tuple[str, ...], found: IcebergType, wanted: IcebergType, reason: str) -> Difference:
    return Difference(
        Kind.CHANGE_TYPE,
        _subject(path),
        type_text(found),
        type_text(wanted),
        reason=reason,
        fix=f"change the configuration back to {type_text(found)}, or land the new type in a column of another name",
        path=path,
    )


def _added(field: NestedField, path: tuple[str, ...]) -> Difference:
    text = type_text(field.field_type)
    if not field.required:
        return Difference(
            Kind.ADD_COLUMN, _subject(path), ABSENT, text, path=path, new_type=field.field_type, doc=field.doc
        )
    return Difference(
        Kind.ADD_REQUIRED_COLUMN,
        _subject(path),
        ABSENT,
        f"required {text}",
        reason="Iceberg adds a required column only with a default value for the rows written before, "
        "and format 2 tables have no column defaults",
        fix="declare it optional in the configuration (required: false)",
        path=path,
    )


def _dropped(field: NestedField, path: tuple[str, ...], sql_table: str) -> Difference:
    """A required table column the configuration lacks: Floe could not fill it."""
    return Difference(
        Kind.DROP_COLUMN,
        _subject(path),
        f"required {type_text(field.field_type)}",
        ABSENT,
        reason="Floe cannot write a required column its configuration does not have (an optional one it fills "
        "with null)",
        fix=f"add it back to the configuration, or by hand in Spark SQL make it optional "
        f"(ALTER TABLE {sql_table} ALTER COLUMN {sql_column(path)} DROP NOT NULL) or drop it "
        f"(ALTER TABLE {sql_table} DROP COLUMN {sql_column(path)})",
        path=path,
    )


def _renamed(old: NestedField, new: NestedField, parent: tuple[str, ...], sql_table: str) -> Difference:
    path = (*parent, old.name)
    return Difference(
        Kind.RENAME_COLUMN,
        _subject(path),
        f"{old.name!r} ({type_text(old.field_type)})",
        f"{new.name!r} ({type_text(new.field_type)})",
        reason="Floe does not rename columns (one column is gone and one of the same type is new, which reads as "
        "a rename)",
        fix=f"rename it by hand in Spark SQL: ALTER TABLE {sql_table} RENAME COLUMN {sql_column(path)} TO "
        f"{sql_name(new.name)}, or change the configuration back to {old.name!r}",
        path=path,
    )


def _subject(path: tuple[str, ...]) -> str:
    return f"column {'.'.join(path)!r}"


def _shape(field: NestedField) -> tuple[bool, str]:
    return field.required, type_text(field.field_type)


def type_text(t: IcebergType) -> str:
    """A type without field ids, required children marked: equal texts mean equal types."""
    if isinstance(t, StructType):
        fields = (f"{f.name}: {_required(f.required)}{type_text(f.field_type)}" for f in t.fields)
        return "struct<" + ", ".join(fields) + ">"
    if isinstance(t, ListType):
        return f"list<{_required(t.element_required)}{type_text(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{type_text(t.key_type)}, {_required(t.value_required)}{type_text(t.value_type)}>"
    return str(t)


def _required(required: bool) -> str:
    return "required " if required else ""


# ---------------------------------------------------------------------------
# Key, partitioning, sort order, format version
# ---------------------------------------------------------------------------


def _key_differences(schema: Schema, key: Sequence[str], sql_table: str) -> list[Difference]:
    found = [schema.find_column_name(i) for i in schema.identifier_field_ids]
    if sorted(found) == sorted(key):
        return []
    verb, columns = ("SET", key) if key else ("DROP", found)
    names = ", ".join(sql_column(c.split(".")) for c in columns)
    statement = f"ALTER TABLE {sql_table} {verb} IDENTIFIER FIELDS {names}"
    return [
        Difference(
            Kind.CHANGE_KEY,
            "key (identifier fields)",
            _listed(found, "none"),
            _listed(key, "none"),
            reason="Floe does not change a table's key at start-up: the rows already written are keyed by the table's",
            fix=f"change the configuration's key back to {_listed(found, '[]')}, "
            f"or set it by hand in Spark SQL: {statement}",
        )
    ]


def _partition_differences(
    metadata: TableMetadata, wanted: PartitionSpec, wanted_schema: Schema, sql_table: str
) -> list[Difference]:
    found_terms = _spec_terms(metadata.spec(), metadata.schema())
    wanted_terms = _spec_terms(wanted, wanted_schema)
    if found_terms == wanted_terms:
        return []
    statements = [f"ALTER TABLE {sql_table} DROP PARTITION FIELD {t}" for t in found_terms if t not in wanted_terms]
    statements += [f"ALTER TABLE {sql_table} ADD PARTITION FIELD {t}" for t in wanted_terms if t not in found_terms]
    by_hand = f", or evolve it by hand in Spark SQL: {', then '.join(statements)}" if statements else ""
    return [
        Difference(
            Kind.CHANGE_PARTITIONING,
            "partition spec",
            _listed(found_terms, "unpartitioned"),
            _listed(wanted_terms, "unpartitioned"),
            reason="changing it is a partition evolution, which Floe does not do at start-up",
            fix=f"change the configuration's partition_spec back to {_listed(found_terms, '[]')}{by_hand}",
        )
    ]


def _sort_differences(
    metadata: TableMetadata, wanted: SortOrder, wanted_schema: Schema, sql_table: str
) -> list[Difference]:
    found_terms = _order_terms(metadata.sort_order(), metadata.schema())
    wanted_terms = _order_terms(wanted, wanted_schema)
    if found_terms == wanted_terms:
        return []
    if wanted_terms:
        statement = f"ALTER TABLE {sql_table} WRITE ORDERED BY {', '.join(wanted_terms)}"
    else:
        statement = f"ALTER TABLE {sql_table} WRITE UNORDERED"
    return [
        Difference(
            Kind.CHANGE_SORT_ORDER,
            "sort order",
            _listed(found_terms, "unsorted"),
            _listed(wanted_terms, "unsorted"),
            reason="Floe does not change a table's sort order at start-up",
            fix=f"change the configuration's sort_order back to {_listed(found_terms, '[]')}, "
            f"or set it by hand in Spark SQL: {statement}",
        )
    ]


def _format_differences(metadata: TableMetadata, wanted: int, sql_table: str) -> list[Difference]:
    """A table below the configured format version (Floe writes v2 and v3 tables; it never downgrades)."""
    version = metadata.format_version
    if version >= wanted and version in SUPPORTED_FORMAT_VERSIONS:
        return _default_value_differences(metadata, sql_table)
    if version < min(SUPPORTED_FORMAT_VERSIONS):
        fix = f"upgrade it by hand in Spark SQL: ALTER TABLE {sql_table} SET TBLPROPERTIES ('format-version' = '{wanted}')"
        reason = f"Floe writes format versions {list(SUPPORTED_FORMAT_VERSIONS)} only"
    elif version < wanted:
        fix = (
            f"upgrade it: floe table upgrade {sql_table} --format-version {wanted}, "
            f"or set format_version: {version} in the configuration"
        )
        reason = f"the configuration asks for format version {wanted}"
    else:
        fix = f"point the configuration at a format {max(SUPPORTED_FORMAT_VERSIONS)} table or older"
        reason = f"Floe writes format versions {list(SUPPORTED_FORMAT_VERSIONS)} only"
    return [Difference(Kind.CHANGE_FORMAT_VERSION, "format version", str(version), str(wanted), reason=reason, fix=fix)]


def _default_value_differences(metadata: TableMetadata, sql_table: str) -> list[Difference]:
    """v3 column default values, which Floe does not write: refused, naming the column."""
    schema = metadata.schema()
    found = []
    for field_id in sorted(schema.field_ids):
        column = schema.find_field(field_id)
        if column.initial_default is not None or column.write_default is not None:
            name = schema.find_column_name(field_id)
            found.append(
                Difference(
                    Kind.CHANGE_FORMAT_VERSION,
                    f"default value of column {name}",
                    "set",
                    "none",
                    reason="Floe does not write v3 column default values (initial-default, write-default)",
                    fix=f"drop the default in Spark SQL: ALTER TABLE {sql_table} ALTER COLUMN {name} DROP DEFAULT",
                )
            )
    return found


def _spec_terms(spec: PartitionSpec, schema: Schema) -> list[str]:
    """Partition fields as Spark SQL terms (``day(ts)``, ``bucket(16, id)``); void fields produce nothing."""
    return [
        transform_term(str(f.transform), sql_column(schema.find_column_name(f.source_id).split(".")))
        for f in spec.fields
        if not isinstance(f.transform, VoidTransform)
    ]


def _order_terms(order: SortOrder, schema: Schema) -> list[str]:
    """Sort fields as Spark SQL terms: ``id ASC NULLS FIRST``."""
    terms = []
    for f in order.fields:
        term = transform_term(str(f.transform), sql_column(schema.find_column_name(f.source_id).split(".")))
        nulls = "FIRST" if f.null_order is NullOrder.NULLS_FIRST else "LAST"
        terms.append(f"{term} {f.direction.value.upper()} NULLS {nulls}")
    return terms


def _listed(items: Sequence[str], empty: str) -> str:
    return f"[{', '.join(items)}]" if items else empty


# ---------------------------------------------------------------------------
# Spark SQL text
# ---------------------------------------------------------------------------

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARGUMENT_TRANSFORM = re.compile(r"^(bucket|truncate)\[(\d+)\]$")


def sql_name(name: str) -> str:
    """A name as Spark SQL reads it: backquoted unless it is a plain identifier."""
    return name if _PLAIN_NAME.match(name) else "`" + name.replace("`", "``") + "`"


def sql_column(path: Sequence[str]) -> str:
    return ".".join(sql_name(p) for p in path)


def sql_identifier(identifier: str) -> str:
    """The table as the configuration names it (prefix it with the Spark catalog's name when needed)."""
    return sql_column(identifier.split("."))


def transform_term(transform: str, column: str) -> str:
    """Iceberg's transform name applied to ``column`` in Spark SQL: ``bucket[16]`` → ``bucket(16, id)``."""
    if transform == "identity":
        return column
    argument = _ARGUMENT_TRANSFORM.match(transform)
    if argument:
        return f"{argument[1]}({argument[2]}, {column})"
    return f"{transform}({column})"
