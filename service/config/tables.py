"""The ``tables`` section: one Iceberg table per streaming query, and how records land in it.

An explicit schema is checked here against the key, partition spec, sort
order and metadata columns, so a typo is reported by ``floe check`` rather
than by a failing query; schemas derived from Avro are checked at start-up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SecretStr, model_validator

from commit.errors import InvalidArgument
from commit.identifiers import to_table_identifier
from commit.key_index.manifest import KEY_INDEX_PROPERTY
from ingest.skips import RecordRef, RecordRefError, parse_record_ref, record_refs
from ingest.tasks.kafka_columns import KAFKA_SOURCES, is_kafka_source, kafka_source_problem
from service.config.credentials import url_password_problems
from service.config.fields import (
    ConfigPath,
    Duration,
    Properties,
    RouteValues,
    Section,
    StringList,
    TopicName,
    comma_list,
)
from service.config.problems import Problem, only_used_when, raise_all, render_path, required_when, show
from service.config.schema import Column, build_schema, has_field
from service.config.terms import SortTerm, Term, parse_sort_term, parse_term, terms_validator
from table.errors import SchemaError, TableError
from table.partitioning import build_partition_spec
from table.schema import Schema
from table.transforms import parse_transform

FORMAT_VERSION_PROPERTY = "format-version"
"""The table property Iceberg engines read at creation for the format version; here it agrees with ``format_version``."""

MANAGED_TABLE_PROPERTIES = {
    KEY_INDEX_PROPERTY: "managed by Floe's commits (the upsert key index; `floe index rebuild` replaces it)",
    **dict.fromkeys(
        (
            "uuid",
            "snapshot-count",
            "current-snapshot-id",
            "current-snapshot-summary",
            "current-snapshot-timestamp-ms",
            "current-schema",
            "default-partition-spec",
            "default-sort-order",
        ),
        "reserved: Iceberg derives it from the table's metadata",
    ),
}
"""Table properties a configuration may not set, with the reason: whatever it set would be overwritten or ignored."""


CONFLUENT = ("confluent", "confluent-avro")
"""The format types of schema-registry framing (``confluent-avro`` is the former name of ``confluent``)."""


class FormatConfig(Section):
    """How Kafka record values are decoded."""

    type: Literal["json", "avro", "confluent", "confluent-avro"] = Field(
        "json",
        description="`json`, `avro` (plain binary Avro) or `confluent` (schema-registry framing: Avro, JSON "
        "Schema or Protobuf, as the registry says; `confluent-avro` is its former name).",
    )
    schema_file: ConfigPath | None = Field(
        None, description="Avro reader schema (.avsc); required for `avro`, optional for `confluent`."
    )
    registry_url: str | None = Field(None, description="Schema registry URL for `confluent` (no credentials in it).")
    registry_username: str | None = Field(None, description="Schema registry basic-auth user.")
    registry_password: SecretStr | None = Field(None, description="Schema registry basic-auth password.")
    schema_dir: ConfigPath | None = Field(
        None, description="For `confluent` without a registry: directory of Avro writer schemas named `<id>.avsc`."
    )
    subject: str | None = Field(
        None,
        description="For `confluent` with a registry and no `schema`: the subject whose versions the table's "
        "columns follow (default `<topic>-value`, the registry's topic-name strategy).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fits_type(self) -> FormatConfig:
        problems = [(key, only_used_when("type", allowed, self.type)) for key, allowed in self._misplaced()]
        if self.type == "avro" and self.schema_file is None:
            problems.append(("schema_file", required_when("type", "avro")))
        if self.type in CONFLUENT and (self.registry_url is None) == (self.schema_dir is None):
            problems.append(
                ("registry_url", f"set exactly one of registry_url and schema_dir when type is {self.type!r}")
            )
        if (self.registry_username is None) != (self.registry_password is None):
            problems.append(("registry_username", "set registry_username and registry_password together"))
        if self.registry_url is not None:
            problems += url_password_problems(
                "registry_url", self.registry_url, "registry_username and registry_password"
            )
        raise_all(problems)
        return self

    def _misplaced(self) -> Iterator[tuple[str, str]]:
        allowed = {
            "schema_file": ("avro", *CONFLUENT),
            "registry_url": CONFLUENT,
            "registry_username": CONFLUENT,
            "registry_password": CONFLUENT,
            "schema_dir": CONFLUENT,
            "subject": CONFLUENT,
        }
        for key, types_ in allowed.items():
            if getattr(self, key) is not None and self.type not in types_:
                yield key, " or ".join(repr(t) for t in types_)


class OpConfig(Section):
    """Which value of which record field says insert, update or delete (upsert mode)."""

    field: str = Field("op", min_length=1, description="Record field holding the operation (Debezium: `op`).")
    insert: StringList = Field(
        default_factory=lambda: ["c", "r"], description="Values meaning insert (Debezium: create, snapshot read)."
    )
    update: StringList = Field(default_factory=lambda: ["u"], description="Values meaning update.")
    delete: StringList = Field(default_factory=lambda: ["d"], description="Values meaning delete.")
    envelope: bool = Field(
        False,
        description="The value is a change-event envelope (Debezium): the row is its `after` image, "
        "or `before` for deletes.",
    )

    @model_validator(mode="after")
    def _disjoint(self) -> OpConfig:
        seen: dict[str, str] = {}
        problems = []
        for kind in ("insert", "update", "delete"):
            for value in getattr(self, kind):
                if value in seen:
                    problems.append((kind, f"value {value!r} is already listed under {seen[value]}"))
                seen.setdefault(value, kind)
        raise_all(problems)
        return self


class RouteConfig(Section):
    """Which records of its topics a table takes, when several tables share them: by a field's value."""

    field: str = Field(
        min_length=1,
        description="Field of the record value whose value picks the table (a dotted path for a nested field; "
        "for Avro, a field of the reader schema). Every routed table of a topic routes by the same field.",
    )
    values: RouteValues = Field(
        min_length=1,
        description="The field's values this table takes: strings, integers, booleans. Two tables may list one "
        "value (both take the record). A record no routed table takes (or a tombstone, or one without the "
        "field) is a bad record of the topic's first routed table.",
    )


def _metadata_sources(value: Any) -> Any:
    """Unknown sources are refused before the schema is known (also for schemas derived from Avro)."""
    if isinstance(value, dict):
        raise_all(
            [
                (str(column), f"expected {KAFKA_SOURCES}, got {show(source)}")
                for column, source in value.items()
                if not isinstance(source, str) or not is_kafka_source(source)
            ]
        )
    return value


TOPIC_PLACEHOLDER = "{topic}"
"""In a table's identifier: one table per topic of its pattern (:meth:`TableConfig.for_topic`)."""


class TableConfig(Section):
    """One Iceberg table fed by one streaming query."""

    identifier: str = Field(
        description="Table identifier `namespace.table` (namespace levels separated by dots). With "
        "`topic_pattern` it may name a table per topic: `raw.{topic}` lands each topic the pattern matches at "
        "start in its own table (the topic's `.` and `-` become `_`), all with this entry's settings."
    )
    topics: Annotated[list[TopicName], BeforeValidator(comma_list)] | None = Field(
        None, description="Source topics (a list or a comma-separated string); or use `topic_pattern`."
    )
    topic_pattern: str | None = Field(
        None, description="Source topics as a Java regular expression matched against whole names."
    )
    share_topics: bool = Field(
        False,
        description="Allow this table's topics to be read by other tables too (each of them must set it, or route).",
    )
    route: RouteConfig | None = Field(
        None,
        description="Take only the records of the listed topics whose `field` holds one of `values`: several "
        "tables share a topic this way without setting share_topics.",
    )
    format: FormatConfig = Field(
        default_factory=FormatConfig, description="Record value format; a string is shorthand for `{type: ...}`."
    )
    columns: list[Column] | None = Field(
        None,
        alias="schema",
        description="Table columns; leave out to take them from the Avro reader schema (`schema_file`) or, for "
        "`confluent` with a registry, from the subject's versions, followed while ingest runs.",
    )
    partition_spec: Annotated[list[str], AfterValidator(terms_validator(parse_term))] = Field(
        default_factory=list,
        description="Partition fields: `day(event_ts)`, `bucket(16, id)`, `truncate(4, name)`, "
        "`identity(country)` or `country`.",
    )
    sort_order: Annotated[list[str], AfterValidator(terms_validator(parse_sort_term))] = Field(
        default_factory=list, description="Sort fields: `id`, `event_ts desc`, `day(event_ts) asc nulls last`."
    )
    key: StringList = Field(
        default_factory=list,
        description="Identifier fields (the row key); required for upsert, unless the columns come from the registry: "
        "then the Kafka key's schema (subject `<topic>-key`) names them.",
    )
    mode: Literal["append", "upsert"] = Field(
        "append", description="`append` adds every record; `upsert` keeps the latest row per key."
    )
    op: OpConfig | None = Field(
        None,
        description="Operation field of change records (upsert only); without it every record is an upsert, "
        "a null value a delete.",
    )
    metadata_columns: Annotated[dict[str, str], BeforeValidator(_metadata_sources)] = Field(
        default_factory=dict,
        description=(
            "Column -> Kafka metadata: `key`, `key.<path>` (a field of a JSON key), `timestamp`, `topic`, "
            "`partition`, `offset`, `headers.<name>`."
        ),
    )
    bad_records: Literal["fail", "dead-letter"] = Field(
        "fail",
        description="`fail` stops the query on an undecodable record; `dead-letter` sends it to `dead_letter_topic`.",
    )
    dead_letter_topic: TopicName | None = Field(
        None, description="Topic for bad records; required with `bad_records: dead-letter`."
    )
    skip_records: StringList = Field(
        default_factory=list,
        description="Records this table skips, whatever they hold: `topic/partition@offset` (e.g. `orders/0@50`, "
        "the place a `bad record at ...` failure names). The batch holding one lands every other record and "
        "lists the skipped ones in its snapshot summary (`floe.kafka.skipped-records`); `floe ingest --skip` "
        "adds to it for one run.",
    )
    format_version: Literal[2, 3] = Field(
        2,
        description="Iceberg format version of a table Floe creates: 3 writes deletion vectors and row lineage. "
        "An existing table below it is refused; `floe table upgrade` upgrades one.",
    )
    properties: Properties = Field(
        default_factory=dict,
        description="Iceberg table properties set at creation (e.g. `write.target-file-size-bytes`).",
    )
    commit_interval: Duration | None = Field(
        None,
        description="With `ingest.query: shared`: commit this table at most once per this interval (e.g. `30s`), "
        "to make fewer, bigger files and snapshots. Its records wait in Kafka until it is due, then land in one "
        "commit; a quiet stream's are landed when the interval is up. Unset: every micro-batch.",
    )

    @model_validator(mode="before")
    @classmethod
    def _format_version_from_properties(cls, value: Any) -> Any:
        """``properties: {format-version: "3"}`` is how Spark and pyiceberg ask for a v3 table: it stands for an unset
        ``format_version``. A conflict between the two is reported by :meth:`_property_problems`, never overwritten."""
        if not isinstance(value, dict) or "format_version" in value or not isinstance(value.get("properties"), dict):
            return value
        version = str(value["properties"].get(FORMAT_VERSION_PROPERTY, "")).strip()
        return {**value, "format_version": int(version)} if version in ("2", "3") else value

    @property
    def namespace(self) -> tuple[str, ...]:
        return tuple(self.identifier.split(".")[:-1])

    @property
    def name(self) -> str:
        return self.identifier.split(".")[-1]

    @property
    def source_topics(self) -> list[str]:
        """The listed topics (empty when the table subscribes by pattern)."""
        return list(self.topics or [])

    def partition_terms(self) -> list[Term]:
        return [parse_term(t) for t in self.partition_spec]

    def sort_terms(self) -> list[SortTerm]:
        return [parse_sort_term(t) for t in self.sort_order]

    def iceberg_schema(self) -> Schema | None:
        """The explicit schema with fresh ids and the key as identifier fields; None when derived from Avro."""
        return build_schema(self.columns, self.key) if self.columns is not None else None

    @model_validator(mode="after")
    def _coherent(self) -> TableConfig:
        problems = [*self._identifier_problems(), *self._source_problems(), *self._mode_problems()]
        problems += self._property_problems()
        problems += self._schema_problems() if self.columns is not None else []
        raise_all(problems)
        return self

    def _identifier_problems(self) -> list[Problem]:
        if self.is_template and self.topic_pattern is None:
            return [("identifier", f"{TOPIC_PLACEHOLDER} names a table per topic of topic_pattern; set topic_pattern")]
        try:
            to_table_identifier(self.identifier.replace(TOPIC_PLACEHOLDER, "topic"))
        except InvalidArgument as exc:
            return [("identifier", f"expected namespace.table: {exc}")]
        return []

    @property
    def keys_from_registry(self) -> bool:
        """Whether the key columns come from the Kafka key's registry subject: an upsert table that names none,
        whose columns come from the registry."""
        fmt = self.format
        return (
            self.mode == "upsert"
            and not self.key
            and self.columns is None
            and fmt.type in CONFLUENT
            and fmt.registry_url is not None
        )

    @property
    def is_template(self) -> bool:
        """Whether the entry stands for a table per topic of its pattern (``{topic}`` in the identifier)."""
        return TOPIC_PLACEHOLDER in self.identifier

    def for_topic(self, topic: str) -> TableConfig:
        """The table a template stands for on ``topic``: its identifier filled in, reading that topic alone."""
        name = self.identifier.replace(TOPIC_PLACEHOLDER, re.sub(r"[.\-]", "_", topic))
        return self.model_copy(update={"identifier": name, "topics": [topic], "topic_pattern": None})

    def skip_refs(self) -> tuple[RecordRef, ...]:
        """``skip_records`` parsed (valid once the configuration loaded)."""
        return record_refs(self.skip_records)

    def reads_topic(self, topic: str) -> bool:
        """Whether this table's query reads ``topic`` (listed, or matched whole by ``topic_pattern``)."""
        return topic in self.source_topics or bool(self.topic_pattern and re.fullmatch(self.topic_pattern, topic))

    def _source_problems(self) -> list[Problem]:
        problems = [*self._topic_problems(), *self._dead_letter_problems(), *self._skip_problems()]
        if self.columns is None and self.format.type == "json":
            problems.append(("schema", required_when("format", "json")))
        return problems

    def _topic_problems(self) -> list[Problem]:
        problems = []
        if self.route is not None and self.topic_pattern is not None:
            problems.append(("route", "routes records of listed topics; list them in topics, not topic_pattern"))
        if (self.topics is None) == (self.topic_pattern is None):
            problems.append(("topics", "set exactly one of topics and topic_pattern"))
        if self.topics is not None and not self.topics:
            problems.append(("topics", "expected at least one topic, got []"))
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                problems.append(("topic_pattern", f"expected a regular expression, {exc} (got {self.topic_pattern!r})"))
        return problems

    def _skip_problems(self) -> list[Problem]:
        """Each skipped record is ``topic/partition@offset`` of a topic this table reads."""
        problems: list[Problem] = []
        for i, text in enumerate(self.skip_records):
            try:
                ref = parse_record_ref(text)
            except RecordRefError as exc:
                problems.append((f"skip_records[{i}]", str(exc)))
                continue
            if (self.topics is None) == (self.topic_pattern is None) or self.reads_topic(ref.topic):
                continue  # without a valid source the topic cannot be checked; _topic_problems reports that
            problems.append((f"skip_records[{i}]", skip_topic_problem(ref, self)))
        return problems

    def _dead_letter_problems(self) -> list[Problem]:
        problems = []
        if self.bad_records == "dead-letter" and self.dead_letter_topic is None:
            problems.append(("dead_letter_topic", required_when("bad_records", "dead-letter")))
        if self.bad_records == "fail" and self.dead_letter_topic is not None:
            problems.append(("dead_letter_topic", only_used_when("bad_records", "'dead-letter'", self.bad_records)))
        if self.dead_letter_topic is not None and self.dead_letter_topic in self.source_topics:
            problems.append(
                ("dead_letter_topic", f"must not be a source topic of the same table, got {self.dead_letter_topic!r}")
            )
        return problems

    def _property_problems(self) -> list[Problem]:
        """Properties that Floe sets itself (from a field, or in its commits) are refused when they would be ignored."""
        problems = []
        version = self.properties.get(FORMAT_VERSION_PROPERTY)
        path = render_path(("properties", FORMAT_VERSION_PROPERTY))
        if version is not None and version.strip() not in ("2", "3"):
            problems.append((path, f"expected 2 or 3, got {version!r}"))
        elif version is not None and int(version) != self.format_version:
            problems.append(
                (
                    path,
                    f"{version!r} conflicts with format_version: {self.format_version}; "
                    "set one of them, or both to the same version",
                )
            )
        for key, reason in MANAGED_TABLE_PROPERTIES.items():
            if key in self.properties:
                problems.append((render_path(("properties", key)), f"{reason}, not in properties"))
        return problems

    def _mode_problems(self) -> list[Problem]:
        problems = []
        if self.mode == "upsert" and not self.key and not self.keys_from_registry:
            problems.append(("key", required_when("mode", "upsert")))
        if self.mode == "upsert" and self.route is not None and self.op is None:
            problems.append(
                (
                    "op",
                    "required when route is set in upsert mode: without it a delete is a tombstone, which names no table",
                )
            )
        if self.mode != "upsert" and self.op is not None:
            problems.append(("op", only_used_when("mode", "'upsert'", self.mode)))
        for i, name in enumerate(self.key):
            if name in self.key[:i]:
                problems.append((f"key[{i}]", f"duplicate key field {name!r}"))
        return problems

    def _schema_problems(self) -> list[Problem]:
        """Checks against the explicit schema; derived schemas are checked at start-up."""
        assert self.columns is not None
        names = [c.name for c in self.columns]
        duplicates = [(f"schema[{i}].name", f"duplicate column {n!r}") for i, n in enumerate(names) if n in names[:i]]
        if duplicates:
            return duplicates
        try:
            schema = build_schema(self.columns, [])
        except SchemaError as exc:
            return [("schema", str(exc))]
        columns = ", ".join(names)
        problems = [
            *self._key_problems(schema, columns),
            *_term_problems(schema, "partition_spec", self.partition_terms(), columns),
            *_term_problems(schema, "sort_order", self.sort_terms(), columns),
            *self._metadata_problems(schema),
        ]
        return problems or self._whole_problems(schema)

    def _key_problems(self, schema: Schema, columns: str) -> list[Problem]:
        return [
            (f"key[{i}]", f"{name!r} is not a column of the schema (columns: {columns})")
            for i, name in enumerate(self.key)
            if not has_field(schema, name)
        ]

    def _metadata_problems(self, schema: Schema) -> list[Problem]:
        """Ingest's own rules (:func:`ingest.tasks.kafka_columns.kafka_source_problem`), so both always agree."""
        problems = []
        for column, source in self.metadata_columns.items():
            problem = kafka_source_problem(source, column, schema)
            if problem is not None:
                problems.append((render_path(("metadata_columns", column)), problem))
        return problems

    def _whole_problems(self, schema: Schema) -> list[Problem]:
        """The table layer's own rules (identifier fields, redundant partitions)."""
        problems = []
        try:
            build_schema(self.columns or [], self.key)
        except TableError as exc:
            problems.append(("key", str(exc)))
        try:
            build_partition_spec(schema, [(t.transform, t.column) for t in self.partition_terms()])
        except TableError as exc:
            problems.append(("partition_spec", str(exc)))
        return problems


def skip_topic_problem(ref: RecordRef, table: TableConfig) -> str:
    """Why ``ref`` cannot be skipped by ``table``: it names a topic the table does not read."""
    source = f"topics: {', '.join(table.source_topics)}" if table.topics else f"topic_pattern: {table.topic_pattern!r}"
    return f"{str(ref)!r} names topic {ref.topic!r}, which table {table.identifier} does not read ({source})"


def _term_problems(schema: Schema, key: str, terms: list[Any], columns: str) -> list[Problem]:
    """Each term's source column exists and its transform applies to the column's type."""
    problems = []
    for i, term in enumerate(terms):
        if not has_field(schema, term.column):
            problems.append((f"{key}[{i}]", f"source column {term.column!r} is not in the schema (columns: {columns})"))
            continue
        field_type = schema.find_field(term.column).field_type
        if not parse_transform(term.transform).can_transform(field_type):
            problems.append((f"{key}[{i}]", f"{term.transform} cannot apply to {term.column!r} of type {field_type}"))
    return problems
