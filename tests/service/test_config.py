"""service/config/: loading, environment overrides, validation messages, secrets, reference."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from ingest.tasks.kafka_columns import check_kafka_source
from service.config import (
    ConfigError,
    FloeConfig,
    NonNegativeDuration,
    env_overrides,
    format_duration,
    load_config,
    parse_sort_term,
    parse_term,
    redacted_dict,
    render_config_reference,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "example-config.yaml"


def minimal() -> dict[str, Any]:
    return {
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "catalog": {"uri": "sqlite:////tmp/floe-test/catalog.db", "warehouse": "/tmp/floe-test/warehouse"},
        "checkpoint_location": "/tmp/floe-test/checkpoints",
        "tables": [
            {
                "identifier": "db.events",
                "topics": ["events"],
                "schema": [
                    {"name": "id", "type": "long", "required": True},
                    {"name": "name", "type": "string"},
                    {"name": "event_ts", "type": "timestamptz"},
                    {"name": "price", "type": "decimal(10,2)"},
                ],
            }
        ],
    }


def write(tmp_path: Path, data: Any, name: str = "floe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def problems_of(data: dict[str, Any], tmp_path: Path, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, data), environ or {})
    return caught.value.problems


def changed(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = minimal()
    mutate(data)
    return data


# ------------------------------------------------------------------ loading


def test_minimal_config_gets_documented_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, minimal()), {})
    assert config.kafka.bootstrap_servers == ["localhost:9092"]
    assert config.trigger.processing_time == timedelta(seconds=60)
    assert config.compaction.interval == timedelta(hours=1)
    assert config.compaction.remove_orphans.older_than == timedelta(days=3)
    assert config.tables[0].mode == "append"
    assert config.tables[0].bad_records == "fail"
    assert config.http.ingest_port != config.http.compact_port
    assert config.checkpoint_for(config.tables[0]) == "/tmp/floe-test/checkpoints/db.events"


def test_example_config_loads_with_every_section(tmp_path: Path) -> None:
    config = load_config(EXAMPLE, {})
    orders = config.table("shop.orders")
    assert orders.mode == "upsert" and orders.key == ["order_id"]
    assert orders.op is not None and orders.op.delete == ["d"] and orders.op.insert == ["c", "r"]
    schema = orders.iceberg_schema()
    assert schema is not None
    assert schema.identifier_field_ids == (schema.find_field("order_id").field_id,)
    assert str(schema.find_field("amount").field_type) == "decimal(10,2)"
    assert schema.find_field("lines.element.sku").required
    assert [tuple(t) for t in orders.partition_terms()] == [("day", "created_at"), ("bucket[16]", "order_id")]
    assert orders.properties == {"write.target-file-size-bytes": "134217728"}
    assert config.compaction.rewrite_options["min-input-files"] == "5"
    with pytest.raises(KeyError, match="shop.orders, web.clicks"):
        config.table("nope.nope")


def test_relative_files_resolve_against_the_config_directory(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "orders.avsc").write_text('{"type": "record", "name": "o", "fields": []}')
    data = changed(lambda d: d["tables"][0].update(format={"type": "avro", "schema_file": "schemas/orders.avsc"}))
    config = load_config(write(tmp_path, data), {})
    assert config.tables[0].format.schema_file == tmp_path.resolve() / "schemas" / "orders.avsc"


def test_missing_referenced_file_is_reported_only_when_checking_files(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(format={"type": "avro", "schema_file": "missing.avsc"}))
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert caught.value.problems == [
        f"tables[0].format.schema_file: file not found: '{tmp_path.resolve()}/missing.avsc'"
    ]
    assert load_config(path, {}, check_files=False).tables[0].format.type == "avro"


def test_yaml_problems_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "kafka:\n  bootstrap_servers: a:1\nkafka:\n  x: 1\n"), {})
    assert caught.value.problems == ["line 3, column 1: duplicate key 'kafka'"]
    with pytest.raises(ConfigError, match=r"line 2, column"):
        load_config(write(tmp_path, "kafka: [\n  : :\n"), {})
    with pytest.raises(ConfigError, match="expected a mapping of sections at the top level, got list"):
        load_config(write(tmp_path, "- a\n- b\n"), {})
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "absent.yaml", {})


# ------------------------------------------------------------------ messages


def test_the_two_documented_messages_verbatim(tmp_path: Path) -> None:
    data = changed(lambda d: (d["tables"][0].update(mode="upsert"), d["kafka"].update(max_offsets_per_trigger="ten")))
    assert problems_of(data, tmp_path) == [
        "kafka.max_offsets_per_trigger: expected an integer, got 'ten'",
        "tables[0].key: required when mode is 'upsert' (got nothing)",
    ]


def test_unknown_keys_are_errors_at_every_level(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["kafka"]["bootstrap_server"] = "typo:9092"
        d["compaction"] = {"expire_snapshots": {"older_then": "1d"}}
        d["tables"][0]["partitions"] = ["day(event_ts)"]
        d["tables"][0]["schema"][0]["nullable"] = False
        d["extra_section"] = {}

    problems = problems_of(changed(mutate), tmp_path)
    assert (
        problems[0]
        == "compaction.expire_snapshots.older_then: unknown key (expected one of: enabled, older_than, retain_last)"
    )
    assert (
        problems[1] == "extra_section: unknown key (expected one of: kafka, catalog, tables, checkpoint_location, "
        "trigger, spark, storage, compaction, ingest, http, readiness, log_level, log_format)"
    )
    assert problems[2].startswith("kafka.bootstrap_server: unknown key (expected one of: bootstrap_servers, security,")
    assert (
        problems[3] == "tables[0].partitions: unknown key (expected one of: identifier, topics, topic_pattern, "
        "share_topics, route, format, schema, partition_spec, sort_order, key, mode, op, metadata_columns, bad_records, "
        "dead_letter_topic, skip_records, format_version, properties, commit_interval)"
    )
    assert problems[4] == "tables[0].schema[0].nullable: unknown key (expected one of: name, type, required, doc)"
    assert len(problems) == 5


def test_type_errors_name_path_expectation_and_value(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["trigger"] = {"processing_time": "soon"}
        d["http"] = {"ingest_port": 70000}
        d["tables"][0]["mode"] = "merge"
        d["tables"][0]["share_topics"] = "maybe"
        d["tables"][0]["schema"][2]["type"] = {"type": "list", "element": "timestamp_tz"}

    assert problems_of(changed(mutate), tmp_path) == [
        "http.ingest_port: expected a number at most 65535, got 70000",
        "tables[0].mode: expected one of 'append' or 'upsert', got 'merge'",
        "tables[0].schema[2].type.element: expected an Iceberg type such as long, string, decimal(10,2), "
        "timestamptz, fixed[16], or a struct/list/map object, got 'timestamp_tz'",
        "tables[0].share_topics: expected true or false, got 'maybe'",
        "trigger.processing_time: expected a duration like '500ms', '60s', '5m', '1h30m', '3d' or a number of "
        "seconds, got 'soon'",
    ]


def test_missing_required_sections(tmp_path: Path) -> None:
    assert problems_of({"tables": []}, tmp_path) == [
        "catalog: required (got nothing)",
        "checkpoint_location: required (got nothing)",
        "kafka: required (got nothing)",
        "tables: expected at least 1 item(s), got []",
    ]


# ------------------------------------------------------------------ table rules


def test_key_fields_must_be_columns_and_valid_identifiers(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(mode="upsert", key=["id", "idd"]))
    assert problems_of(data, tmp_path) == [
        "tables[0].key[1]: 'idd' is not a column of the schema (columns: id, name, event_ts, price)"
    ]
    data["tables"][0]["key"] = ["name"]  # optional column: Iceberg identifier fields must be required
    assert problems_of(data, tmp_path) == ["tables[0].key: identifier field 'name' must be required"]
    data["tables"][0]["key"] = ["id"]
    assert load_config(write(tmp_path, data), {}).tables[0].iceberg_schema().identifier_field_ids == (1,)


def test_partition_and_sort_terms_are_checked_against_the_schema(tmp_path: Path) -> None:
    data = changed(
        lambda d: d["tables"][0].update(
            partition_spec=["day(event_ts)", "bucket(16, idd)", "day(name)"], sort_order=["price desc", "nope"]
        )
    )
    assert problems_of(data, tmp_path) == [
        "tables[0].partition_spec[1]: source column 'idd' is not in the schema (columns: id, name, event_ts, price)",
        "tables[0].partition_spec[2]: day cannot apply to 'name' of type string",
        "tables[0].sort_order[1]: source column 'nope' is not in the schema (columns: id, name, event_ts, price)",
    ]
    data["tables"][0]["partition_spec"] = ["hour(event_ts)", "day(event_ts)"]
    data["tables"][0]["sort_order"] = []
    [problem] = problems_of(data, tmp_path)
    assert problem.startswith("tables[0].partition_spec: partition field 'event_ts_day' (day) is redundant")


def test_term_syntax_errors_list_every_bad_item(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(partition_spec=["dya(event_ts)", "bucket(id)", "name"]))
    problems = problems_of(data, tmp_path)
    assert [p.split(":")[0] for p in problems] == ["tables[0].partition_spec[0]", "tables[0].partition_spec[1]"]
    assert "got 'bucket(id)'" in problems[1]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("country", ("identity", "country")),
        ("identity(country)", ("identity", "country")),
        ("day(event_ts)", ("day", "event_ts")),
        ("days(event_ts)", ("day", "event_ts")),
        ("bucket(16, id)", ("bucket[16]", "id")),
        ("truncate( 4 ,name )", ("truncate[4]", "name")),
        ("hour(payload.ts)", ("hour", "payload.ts")),
    ],
)
def test_parse_term(text: str, expected: tuple[str, str]) -> None:
    assert tuple(parse_term(text)) == expected


@pytest.mark.parametrize("text", ["bucket(0, id)", "day(3, ts)", "bucket(id)", "f(x)", "a b", "day()"])
def test_parse_term_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        parse_term(text)


def test_parse_sort_term_defaults_null_order_like_iceberg() -> None:
    assert tuple(parse_sort_term("id")) == ("identity", "id", "asc", "nulls-first")
    assert tuple(parse_sort_term("day(ts) DESC")) == ("day", "ts", "desc", "nulls-last")
    assert tuple(parse_sort_term("ts asc nulls last")) == ("identity", "ts", "asc", "nulls-last")
    with pytest.raises(ValueError, match="nulls first"):
        parse_sort_term("id sideways")


def test_upsert_op_and_dead_letter_rules(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(op={"update": ["u", "c"]}))
    assert problems_of(data, tmp_path) == ["tables[0].op.update: value 'c' is already listed under insert"]
    data["tables"][0].update(op={"field": "__op"}, bad_records="dead-letter")
    assert problems_of(data, tmp_path) == [
        "tables[0].dead_letter_topic: required when bad_records is 'dead-letter' (got nothing)",
        "tables[0].op: only used when mode is 'upsert' (mode is 'append')",
    ]
    data["tables"][0].update(mode="upsert", key=["id"], dead_letter_topic="events")
    assert problems_of(data, tmp_path) == [
        "tables[0].dead_letter_topic: must not be a source topic of the same table, got 'events'"
    ]
    data["tables"][0]["dead_letter_topic"] = "events.dlq"
    assert load_config(write(tmp_path, data), {}).tables[0].op.field == "__op"


def test_json_needs_an_explicit_schema_but_avro_can_derive_it(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].pop("schema"))
    assert problems_of(data, tmp_path) == ["tables[0].schema: required when format is 'json' (got nothing)"]
    data["tables"][0].update(format={"type": "confluent-avro", "registry_url": "http://registry:8081"}, key=["id"])
    table = load_config(write(tmp_path, data), {}).tables[0]
    assert table.iceberg_schema() is None and table.key == ["id"]


def test_metadata_columns_need_a_column_of_a_fitting_type(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(metadata_columns={"name": "offset", "ghost": "topic", "x": "hdr"}))
    assert problems_of(data, tmp_path) == [
        "tables[0].metadata_columns.x: expected key, key.<path>, headers.<name>, topic, partition, offset or "
        "timestamp, got 'hdr'"
    ]
    data["tables"][0]["metadata_columns"] = {"name": "offset", "ghost": "headers.trace"}
    assert problems_of(data, tmp_path) == [
        "tables[0].metadata_columns.ghost: Kafka metadata column 'ghost' is not a top-level column of the table",
        "tables[0].metadata_columns.name: column 'name' is string; Kafka offset needs long",
    ]


def test_a_metadata_column_ingest_would_refuse_is_refused_by_the_configuration(tmp_path: Path) -> None:
    """It used to pass ``floe check`` and fail at start-up: Kafka timestamps never land in a long column."""
    data = changed(lambda d: d["tables"][0].update(metadata_columns={"id": "timestamp"}))
    assert problems_of(data, tmp_path) == [
        "tables[0].metadata_columns.id: column 'id' is long; Kafka timestamp needs timestamptz or timestamp"
    ]


@pytest.mark.parametrize("source", ["key", "key.id", "headers.trace", "topic", "partition", "offset", "timestamp"])
@pytest.mark.parametrize("column_type", ["string", "binary", "long", "int", "timestamptz", "timestamp",
                                         {"type": "list", "element": "long"}])
def test_metadata_columns_are_accepted_exactly_when_ingest_accepts_them(
    tmp_path: Path, source: str, column_type: Any
) -> None:
    data = changed(lambda d: d["tables"][0]["schema"].append({"name": "m", "type": column_type}))
    schema = load_config(write(tmp_path, data), {}).tables[0].iceberg_schema()
    assert schema is not None
    data["tables"][0]["metadata_columns"] = {"m": source}
    try:
        check_kafka_source(source, "m", schema)
    except ValueError as exc:
        assert problems_of(data, tmp_path) == [f"tables[0].metadata_columns.m: {exc}"]
    else:
        load_config(write(tmp_path, data), {})


def test_duplicate_tables_and_shared_topics(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["tables"].append(copy.deepcopy(d["tables"][0]))

    assert problems_of(changed(mutate), tmp_path) == [
        "tables[0].topics[0]: topic 'events' is also read by tables[1] (db.events); "
        "set share_topics: true or a route on each of them "
        "to allow it",
        "tables[1].identifier: 'db.events' is already used by tables[0]",
        "tables[1].topics[0]: topic 'events' is also read by tables[0] (db.events); "
        "set share_topics: true or a route on each of them "
        "to allow it",
    ]


def test_a_shared_topic_is_allowed_only_when_every_reader_says_so(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        second = copy.deepcopy(d["tables"][0])
        second.update(identifier="db.events_copy", topics=None, topic_pattern="ev.*", share_topics=True)
        d["tables"].append(second)

    data = changed(mutate)
    assert problems_of(data, tmp_path) == [
        "tables[0].topics[0]: topic 'events' is also read by tables[1] (db.events_copy); "
        "set share_topics: true or a route on each of them "
        "to allow it"
    ]
    data["tables"][0]["share_topics"] = True
    assert len(load_config(write(tmp_path, data), {}).tables) == 2


def routed(d: dict[str, Any], *routes: tuple[str, str, list[str]]) -> None:
    """Tables of ``d`` reading 'events' by route: (identifier, field, values) each, in place of the first."""
    first = d["tables"].pop(0)
    for identifier, field, values in routes:
        d["tables"].append({**copy.deepcopy(first), "identifier": identifier, "route": {"field": field,
                                                                                         "values": values}})


def test_routed_tables_share_a_topic_without_share_topics(tmp_path: Path) -> None:
    data = changed(lambda d: routed(d, ("db.orders", "kind", ["order"]), ("db.payments", "kind", ["pay", 5, True])))
    config = load_config(write(tmp_path, data), {})
    assert [t.route.values for t in config.tables if t.route] == [["order"], ["pay", "5", "true"]], "as JSON text"


def test_a_routed_upsert_table_needs_an_op_field_and_a_float_is_no_route_value(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        routed(d, ("db.orders", "kind", ["order"]), ("db.payments", "kind", [1.5]))
        d["tables"][0].update(mode="upsert", key=["id"])

    assert problems_of(changed(mutate), tmp_path) == [
        "tables[0].op: required when route is set in upsert mode: without it a delete is a tombstone, which names "
        "no table",
        "tables[1].route.values[0]: expected a string, got 1.5",
    ]


def test_a_route_needs_values_and_listed_topics(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        routed(d, ("db.orders", "kind", ["order"]), ("db.rest", "kind", []))
        d["tables"].append({**copy.deepcopy(d["tables"][0]), "identifier": "db.all", "topics": None,
                            "topic_pattern": "ev.*"})

    assert problems_of(changed(mutate), tmp_path) == [
        "tables[1].route.values: expected at least 1 item(s), got []",
        "tables[2].route: routes records of listed topics; list them in topics, not topic_pattern",
    ]


def test_a_topic_is_routed_by_one_field(tmp_path: Path) -> None:
    data = changed(lambda d: routed(d, ("db.orders", "kind", ["order"]), ("db.payments", "type", ["pay"])))
    assert problems_of(data, tmp_path) == [
        "tables[1].route.field: topic 'events' is routed by 'kind' in tables[0] (db.orders); a topic's tables "
        "route by one field, got 'type'",
    ]


def test_cross_section_rules(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["readiness"] = {"max_commit_age": "45s"}
        d["compaction"] = {"interval": "10m", "jitter": "10m"}
        d["http"] = {"ingest_port": 9000, "compact_port": 9000}
        d["kafka"].update(starting_offsets={"other": {"0": 5}}, min_offsets_per_trigger=10, max_offsets_per_trigger=5,
                          max_tasks_per_batch=2, reader="spark")

    assert problems_of(changed(mutate), tmp_path) == [
        "compaction.jitter: must be shorter than interval (10m), got '10m'",
        "http.compact_port: must differ from ingest_port (both containers share the pod's network), got 9000",
        "kafka.max_tasks_per_batch: only used with reader: python (got reader: spark)",
        "kafka.min_offsets_per_trigger: must not exceed max_offsets_per_trigger (5), got 10",
    ]
    data = changed(lambda d: d.update(compaction={"remove_orphans": {"older_than": "12h"}}))
    assert problems_of(data, tmp_path) == [
        "compaction.remove_orphans.older_than: must be at least 1d, so that files of in-flight commits survive, "
        "got '12h'"
    ]
    data = changed(
        lambda d: (
            d.update(readiness={"max_commit_age": "45s"}),
            d["kafka"].update(starting_offsets={"other": {"0": 5}}),
        )
    )
    assert problems_of(data, tmp_path) == [
        "kafka.starting_offsets.other: topic 'other' is not listed in any table's topics",
        "readiness.max_commit_age: must be longer than trigger.processing_time (1m), got '45s'",
    ]


def test_kafka_properties_managed_by_floe_are_refused(tmp_path: Path) -> None:
    data = changed(lambda d: d["kafka"].update(properties={"bootstrap.servers": "x:1", "fetch.max.bytes": 1024}))
    assert problems_of(data, tmp_path) == [
        "kafka.properties['bootstrap.servers']: set by kafka.bootstrap_servers, not in properties"
    ]
    del data["kafka"]["properties"]["bootstrap.servers"]
    assert load_config(write(tmp_path, data), {}).kafka.properties == {"fetch.max.bytes": "1024"}


def test_format_version_property_alone_sets_the_format_version(tmp_path: Path) -> None:
    # written as Spark's TBLPROPERTIES ('format-version'='3') or pyiceberg's properties={"format-version": "3"}
    data = changed(lambda d: d["tables"][0].update(properties={"format-version": 3}))
    table = load_config(write(tmp_path, data), {}).tables[0]
    assert table.format_version == 3 and table.properties == {"format-version": "3"}


def test_format_version_property_that_agrees_with_the_field_is_kept(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(format_version=3, properties={"format-version": "3"}))
    assert load_config(write(tmp_path, data), {}).tables[0].format_version == 3


def test_format_version_property_that_conflicts_with_the_field_is_refused_naming_both(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(format_version=2, properties={"format-version": "3"}))
    assert problems_of(data, tmp_path) == [
        "tables[0].properties.format-version: '3' conflicts with format_version: 2; "
        "set one of them, or both to the same version"
    ]
    data["tables"][0]["properties"] = {"format-version": "4"}
    del data["tables"][0]["format_version"]
    assert problems_of(data, tmp_path) == ["tables[0].properties.format-version: expected 2 or 3, got '4'"]


def test_table_properties_floe_or_iceberg_manage_are_refused(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(properties={"floe.key-index": "x", "current-snapshot-id": 1}))
    assert problems_of(data, tmp_path) == [
        "tables[0].properties['floe.key-index']: managed by Floe's commits (the upsert key index; "
        "`floe index rebuild` replaces it), not in properties",
        "tables[0].properties.current-snapshot-id: reserved: Iceberg derives it from the table's metadata, "
        "not in properties",
    ]


def test_compaction_rewrite_options_are_iceberg_options(tmp_path: Path) -> None:
    options = {"partial-progress.enabled": True, "min-input-files": "x", "bogus": 1, "rewrite-job-order": "bytes-asc"}
    problems = problems_of(changed(lambda d: d.update(compaction={"rewrite_options": options})), tmp_path)
    assert len(problems) == 3
    assert "compaction.rewrite_options.min-input-files: expected a non-negative integer, got 'x'" in problems
    assert (
        "compaction.rewrite_options['partial-progress.enabled']: set by compaction.partial_progress.enabled, "
        "not in rewrite_options"
    ) in problems
    [unknown] = [p for p in problems if ".bogus" in p]
    assert unknown.startswith("compaction.rewrite_options.bogus: unknown rewrite option (expected one of: ")


def test_trigger_kinds_are_exclusive(tmp_path: Path) -> None:
    data = changed(lambda d: d.update(trigger={"available_now": True, "processing_time": "30s"}))
    assert problems_of(data, tmp_path) == [
        "trigger.available_now: cannot be combined with processing_time; set one of them"
    ]
    data["trigger"] = {"available_now": True}
    assert load_config(write(tmp_path, data), {}).trigger.available_now


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("60s", 60),
        ("5m", 300),
        ("1h30m", 5400),
        ("3d", 259200),
        ("500ms", 0.5),
        (90, 90),
        ("2.5", 2.5),
        ("1h 2m", 3720),
    ],
)
def test_duration_forms(tmp_path: Path, text: Any, seconds: float) -> None:
    config = load_config(write(tmp_path, changed(lambda d: d.update(compaction={"interval": text, "jitter": 0}))), {})
    assert config.compaction.interval.total_seconds() == seconds


@given(st.integers(min_value=0, max_value=10**12))
def test_format_duration_round_trips(millis: int) -> None:
    value = timedelta(milliseconds=millis)
    text = format_duration(value)
    assert re.fullmatch(r"0s|(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?", text)
    assert TypeAdapter(NonNegativeDuration).validate_python(text) == value


# ------------------------------------------------------------------ environment


def test_env_overrides_nested_keys_list_items_and_top_level(tmp_path: Path) -> None:
    environ = {
        "FLOE_KAFKA__BOOTSTRAP_SERVERS": "b1:9092, b2:9092",
        "FLOE_KAFKA__MAX_OFFSETS_PER_TRIGGER": "1000",
        "FLOE_TABLES__0__MODE": "upsert",
        "FLOE_TABLES__0__KEY": "id",
        "FLOE_CHECKPOINT_LOCATION": "s3://bucket/checkpoints",
        "FLOE_COMPACTION__EXPIRE_SNAPSHOTS__ENABLED": "false",
        "FLOE_JARS_DIR": "/opt/floe/jars",  # belongs to runtime/jars.py, not to the config
        "FLOE_TEST_KAFKA": "localhost:1",
        "KAFKA__BOOTSTRAP_SERVERS": "ignored:1",
    }
    config = load_config(write(tmp_path, minimal()), environ)
    assert config.kafka.bootstrap_servers == ["b1:9092", "b2:9092"]
    assert config.kafka.max_offsets_per_trigger == 1000
    assert config.tables[0].mode == "upsert" and config.tables[0].key == ["id"]
    assert config.checkpoint_location == "s3://bucket/checkpoints"
    assert config.compaction.expire_snapshots.enabled is False
    assert [o.variable for o in env_overrides(environ)] == sorted(
        v for v in environ if v.startswith("FLOE_") and v not in ("FLOE_JARS_DIR", "FLOE_TEST_KAFKA")
    )


def test_env_problems_name_the_variable(tmp_path: Path) -> None:
    environ = {"FLOE_KAFKA__BOOTSTRAP_SERVER": "x:1", "FLOE_TABLES__0__MODE": "merge"}
    assert problems_of(minimal(), tmp_path, environ) == [
        "kafka.bootstrap_server: unknown key (expected one of: bootstrap_servers, security, properties, "
        "starting_offsets, max_offsets_per_trigger, min_offsets_per_trigger, max_trigger_delay, fail_on_data_loss, "
        "max_tasks_per_batch, reader) "
        "(from FLOE_KAFKA__BOOTSTRAP_SERVER)",
        "tables[0].mode: expected one of 'append' or 'upsert', got 'merge' (from FLOE_TABLES__0__MODE)",
    ]
    for variable, message in [
        ("FLOE_TABLES__3__MODE", "FLOE_TABLES__3__MODE: tables[3]: no such list item (the list has 1 items)"),
        (
            "FLOE_KAFKA__BOOTSTRAP_SERVERS__X",
            "FLOE_KAFKA__BOOTSTRAP_SERVERS__X: kafka.bootstrap_servers: is a value, not a section",
        ),
        ("FLOE_KAFKA____X", "FLOE_KAFKA____X: empty key segment in 'FLOE_KAFKA____X' (use single '__' between keys)"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_config(write(tmp_path, minimal()), {variable: "1"})
        assert caught.value.problems == [message]


# ------------------------------------------------------------------ secrets


SECRET = "s3cr3t-Pa55"


def secret_config(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "kafka-password").write_text(SECRET + "\n")

    def mutate(d: dict[str, Any]) -> None:
        d["kafka"]["security"] = {
            "protocol": "sasl_ssl",
            "sasl": {"mechanism": "scram-sha-512", "username": "floe", "password_file": "kafka-password"},
            "ssl": {"key_password": SECRET, "keystore_file": "/etc/tls/client.pem"},
        }
        d["kafka"]["properties"] = {"sasl.oauthbearer.client.secret": SECRET}
        d["catalog"] = {"uri": "postgresql://floe@db:5432/floe", "warehouse": "s3://b/w"}
        d["tables"][0]["format"] = {
            "type": "confluent-avro",
            "registry_url": "https://registry:8081",
            "registry_username": "reg",
            "registry_password": SECRET,
        }

    return changed(mutate)


def test_secrets_never_appear_in_repr_or_redacted_dict(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, secret_config(tmp_path)), {"FLOE_CATALOG__PASSWORD": SECRET}, check_files=False
    )
    assert SECRET not in repr(config) and SECRET not in str(config)
    shown = redacted_dict(config)
    assert SECRET not in repr(shown)
    assert shown["catalog"]["password"] == "***"
    assert shown["kafka"]["security"]["sasl"]["username"] == "floe"  # not secret, still shown
    assert shown["kafka"]["security"]["sasl"]["password_file"].endswith("kafka-password")
    # ...while the code that connects gets them.
    sasl = config.kafka.security.sasl
    assert sasl is not None and sasl.password_value() == SECRET
    assert f'username="floe" password="{SECRET}";' in config.kafka.java_client_properties()["sasl.jaas.config"]
    assert config.kafka.java_client_properties()["ssl.key.password"] == SECRET
    assert config.kafka.security.librdkafka_properties()["sasl.password"] == SECRET
    assert config.catalog.connection_uri() == f"postgresql://floe:{SECRET}@db:5432/floe"
    assert config.catalog.display_uri == "postgresql://floe@db:5432/floe"


def test_catalog_password_file_is_percent_encoded_into_the_uri(tmp_path: Path) -> None:
    (tmp_path / "pg").write_text("p@ss:/word\n")
    data = changed(
        lambda d: d.update(catalog={"uri": "postgresql://floe@db/floe", "password_file": "pg", "warehouse": "/w"})
    )
    config = load_config(write(tmp_path, data), {})
    assert config.catalog.connection_uri() == "postgresql://floe:p%40ss%3A%2Fword@db/floe"


def test_secret_values_are_not_echoed_in_errors(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["catalog"] = {"uri": f"postgresql://floe:{SECRET}@db/floe", "password": 12345678, "warehouse": "/w"}
        d["tables"][0]["format"] = {"type": "confluent-avro", "registry_url": f"http://u:{SECRET}@r"}

    problems = problems_of(changed(mutate), tmp_path, {"FLOE_KAFKA__SECURITY__SASL__PASSWORD": SECRET})
    text = "\n".join(problems)
    assert SECRET not in text and "12345678" not in text
    assert "catalog.password: expected a string, got <redacted>" in problems


def test_catalog_uri_rules(tmp_path: Path) -> None:
    def catalog(**values: Any) -> list[str]:
        return problems_of(changed(lambda d: d.update(catalog={"warehouse": "/w", **values})), tmp_path)

    assert catalog(uri=f"postgresql://floe:{SECRET}@db/floe") == [
        "catalog.uri: must not contain a password; use catalog.password or catalog.password_file "
        "(got 'postgresql://floe@db/floe')"
    ]
    assert catalog(uri="sqlite:///relative.db") == [
        "catalog.uri: expected an absolute SQLite path, sqlite:////abs/path.db, got 'sqlite:///relative.db'"
    ]
    assert catalog(uri="sqlite:////abs.db", password="x") == [
        "catalog.password: only used with a postgresql:// catalog uri"
    ]
    assert catalog(uri="mysql://db/floe")[0].startswith("catalog.uri: catalog URI 'mysql://db/floe' is not supported")
    assert catalog(uri="postgresql://db/floe", password="x") == [
        "catalog.uri: needs a user name (postgresql://user@host/db) when a password is set (got 'postgresql://db/floe')"
    ]
    assert problems_of(changed(lambda d: d["catalog"].update(warehouse="relative/wh")), tmp_path) == [
        "catalog.warehouse: expected an absolute path or a URI like s3://bucket/path, got 'relative/wh'"
    ]


def test_security_sections_must_match_the_protocol(tmp_path: Path) -> None:
    data = changed(lambda d: d["kafka"].update(security={"protocol": "SASL_SSL"}))
    assert problems_of(data, tmp_path) == ["kafka.security.sasl: required when protocol is 'SASL_SSL' (got nothing)"]
    data["kafka"]["security"] = {"protocol": "PLAINTEXT", "sasl": {"username": "u", "password": "p"}, "ssl": {}}
    assert problems_of(data, tmp_path) == [
        "kafka.security.sasl: only used when protocol is SASL_PLAINTEXT or SASL_SSL (protocol is 'PLAINTEXT')",
        "kafka.security.ssl: only used when protocol is SSL or SASL_SSL (protocol is 'PLAINTEXT')",
    ]
    data["kafka"]["security"] = {"protocol": "SASL_PLAINTEXT", "sasl": {"username": "u"}}
    assert problems_of(data, tmp_path) == [
        "kafka.security.sasl.password: set exactly one of password and password_file"
    ]


# ------------------------------------------------------------------ reference


def test_config_reference_documents_every_key() -> None:
    reference = render_config_reference()
    rows = [line for line in reference.splitlines()[2:]]
    paths = [re.match(r"^\| `([^`]+)` \|", row).group(1) for row in rows]  # type: ignore[union-attr]
    for expected in [
        "kafka.bootstrap_servers",
        "kafka.security.sasl.password_file",
        "tables[].key",
        "tables[].schema[].type",
        "tables[].op.delete",
        "compaction.remove_orphans.older_than",
        "readiness.max_commit_age",
        "http.compact_port",
    ]:
        assert expected in paths
    assert len(paths) == len(set(paths))
    for row in rows:
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        assert len(cells) == 4, row
        assert cells[3].strip(), f"no description: {row}"
    assert "| `trigger.processing_time` | duration | `1m` |" in reference
    assert "| `tables[].mode` | `append` \\| `upsert` | `append` |" in reference
    assert "| `catalog.uri` | string | **required** |" in reference


def test_every_model_field_has_a_description() -> None:
    def walk(model: type) -> list[str]:
        missing = []
        for name, info in model.model_fields.items():  # type: ignore[attr-defined]
            if not info.description:
                missing.append(f"{model.__name__}.{name}")
        return missing

    import service.config as module

    models = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, FloeConfig.__mro__[1]) and v.model_fields
    ]
    assert len(models) > 10
    assert [m for model in models for m in walk(model)] == []


def test_op_envelope_parses_in_upsert_mode_and_is_refused_elsewhere(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(mode="upsert", key=["id"], op={"envelope": True}))
    op = load_config(write(tmp_path, data), {}).tables[0].op
    assert op is not None and op.envelope is True
    assert (op.field, op.insert, op.update, op.delete) == ("op", ["c", "r"], ["u"], ["d"]), "Debezium's defaults"
    data = changed(lambda d: d["tables"][0].update(mode="upsert", key=["id"], op={"field": "op"}))
    assert load_config(write(tmp_path, data), {}).tables[0].op.envelope is False  # type: ignore[union-attr]

    data = changed(lambda d: d["tables"][0].update(op={"envelope": True}))
    assert problems_of(data, tmp_path) == ["tables[0].op: only used when mode is 'upsert' (mode is 'append')"]
    data = changed(lambda d: d["tables"][0].update(mode="upsert", key=["id"], op={"envelope": "sometimes"}))
    assert problems_of(data, tmp_path) == ["tables[0].op.envelope: expected true or false, got 'sometimes'"]
