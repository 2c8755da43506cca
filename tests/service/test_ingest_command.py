"""floe ingest: configuration -> job specs, readiness, and a short real run of the service.

The mapping tests build real job specs (the ingest layer validates them) from
parsed configurations; the run lands change events from a real broker in a
real SQLite-catalogued table with the session's Spark.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.schema_registry import SchemaRegistry
from prometheus_client import CollectorRegistry

from commit.catalog.sql.catalog import SqlCatalog
from ingest.tasks.decoding import AvroFormat, ConfluentFormat, JsonFormat
from ingest.job import SortTerm, job_from_json, job_to_json
from service.config import ConfigError, parse_config
from service.ingest_command import EXIT_OK, EXIT_STOPPED, IngestReadiness, run_ingest_service
from service.jobs import build_jobs
from service.local_kafka import free_port
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import change_events, expected_table, normalized, produce

EVENT_COLUMNS = [
    {"name": "id", "type": "long", "required": True},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "event_ts", "type": "timestamptz"},
    {"name": "version", "type": "long"},
]


def events_config(tmp: Path, bootstrap: str, topic: str, **overrides: Any) -> dict[str, Any]:
    """A config landing e2e_support's change events (op field, key id) in db.events."""
    table = {
        "identifier": "db.events",
        "topics": [topic],
        "mode": "upsert",
        "key": ["id"],
        "op": {"field": "op"},
        "schema": EVENT_COLUMNS,
        "partition_spec": ["bucket(4, id)"],
    }
    table.update(overrides.pop("table", {}))
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "max_offsets_per_trigger": 1000},
        "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "warehouse")},
        "checkpoint_location": str(tmp / "checkpoints"),
        "trigger": {"processing_time": "1s"},
        "readiness": {"max_commit_age": "5m"},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "tables": [table],
    }
    config.update(overrides)
    return config


def read_rows(tmp: Path, identifier: str = "db.events") -> tuple[dict, Any]:
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        loaded = catalog.load_table(identifier)
    scan = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata)
    return normalized(scan.to_arrow()), loaded.metadata


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# ----------------------------------------------------------------------------- mapping


def test_upsert_json_table_maps_every_key(tmp_path):
    raw = events_config(tmp_path, "127.0.0.1:9092,127.0.0.2:9093", "events", table={
        "schema": [*EVENT_COLUMNS, {"name": "k", "type": "string"}, {"name": "ts", "type": "timestamptz"},
                   {"name": "p", "type": "int"}, {"name": "o", "type": "long"}, {"name": "trace", "type": "string"}],
        "op": {"field": "op", "insert": ["i"], "update": ["u", "r"], "delete": ["x"]},
        "partition_spec": ["day(event_ts)", "bucket(8, id)", "truncate(3, name)", "p"],
        "sort_order": ["id", "event_ts desc", "truncate(2, name) asc nulls last"],
        "metadata_columns": {"k": "key", "ts": "timestamp", "p": "partition", "o": "offset", "trace": "headers.trace"},
        "bad_records": "dead-letter", "dead_letter_topic": "events.dlq",
        "properties": {"write.target-file-size-bytes": "1048576"},
    })
    raw["kafka"].update({"min_offsets_per_trigger": 10, "max_trigger_delay": "30s", "fail_on_data_loss": False,
                         "properties": {"fetch.max.bytes": "1048576"}, "starting_offsets": "latest",
                         "reader": "python", "max_tasks_per_batch": 3})
    [job] = build_jobs(parse_config(raw))

    source, table, decode = job.source, job.table, job.table.decode
    assert source.bootstrap_servers == "127.0.0.1:9092,127.0.0.2:9093"
    assert source.topics == ("events",) and source.topic_pattern is None
    assert (source.max_offsets_per_trigger, source.min_offsets_per_trigger) == (1000, 10)
    assert source.max_trigger_delay == "30000ms" and source.fail_on_data_loss is False
    assert source.reader == "python" and source.python_source_options()["maxPartitions"] == "3"
    assert source.starting_offsets == "latest"
    assert source.spark_options()["kafka.fetch.max.bytes"] == "1048576"
    assert source.spark_options()["kafka.security.protocol"] == "PLAINTEXT"
    assert table.partition == (("day", "event_ts"), ("bucket[8]", "id"), ("truncate[3]", "name"), ("identity", "p"))
    assert table.sort_order == (
        SortTerm("id", "identity", "asc", "nulls-first"),
        SortTerm("event_ts", "identity", "desc", "nulls-last"),
        SortTerm("name", "truncate[2]", "asc", "nulls-last"),
    )
    assert dict(decode.metadata_columns) == {"k": "key", "ts": "timestamp", "p": "partition", "o": "offset",
                                             "trace": "headers.trace"}
    assert decode.mode == "upsert" and decode.key_fields == ("id",)
    assert decode.op_field is not None
    assert (decode.op_field.name, decode.op_field.inserts, decode.op_field.updates, decode.op_field.deletes) == (
        "op", ("i",), ("u", "r"), ("x",))
    assert isinstance(decode.format, JsonFormat)
    assert [f.name for f in table.schema().fields][:5] == ["id", "name", "amount", "event_ts", "version"]
    assert tuple(table.schema().identifier_field_ids) == (1,)
    assert (table.bad_records, table.dead_letter_topic) == ("dead-letter", "events.dlq")
    assert dict(table.properties) == {"write.target-file-size-bytes": "1048576"}
    assert job.checkpoint_location == f"{tmp_path / 'checkpoints'}/db.events"
    assert (job.trigger.processing_time_seconds, job.trigger.available_now) == (1.0, False)
    assert job.catalog.uri == f"sqlite:///{tmp_path / 'catalog.db'}"
    assert job_from_json(json.loads(json.dumps(job_to_json(job)))) == job, "the spec survives python -m ingest's JSON"


def test_append_table_by_pattern_with_sasl_and_available_now(tmp_path):
    raw = events_config(tmp_path, "broker:9092", "unused", table={
        "topics": None, "topic_pattern": "clicks\\..*", "mode": "append", "key": [], "op": None,
        "partition_spec": ["hour(event_ts)"], "sort_order": [],
    }, trigger={"available_now": True})
    raw["tables"][0] = {k: v for k, v in raw["tables"][0].items() if v is not None}
    raw["kafka"]["security"] = {"protocol": "SASL_SSL",
                                "sasl": {"mechanism": "SCRAM-SHA-256", "username": "floe", "password": "s3cret"}}
    raw["kafka"]["starting_offsets"] = {"other": {0: 5}}
    raw["tables"].append({"identifier": "db.other", "topics": ["other"], "schema": EVENT_COLUMNS})
    clicks, other = build_jobs(parse_config(raw))

    assert clicks.source.topic_pattern == "clicks\\..*" and clicks.source.topics == ()
    assert other.source.starting_offsets == (("other", ((0, 5),)),)
    assert clicks.source.starting_offsets == "earliest", "Spark refuses offsets of topics a query does not read"
    assert clicks.table.decode.mode == "append" and clicks.table.decode.op_field is None
    assert clicks.table.partition == (("hour", "event_ts"),) and clicks.table.sort_order == ()
    options = clicks.source.spark_options()
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-256" and "s3cret" in options["kafka.sasl.jaas.config"]
    client = clicks.source.librdkafka_config()
    assert (client["security.protocol"], client["sasl.username"], client["sasl.password"]) == ("sasl_ssl", "floe", "s3cret")
    assert clicks.trigger.available_now and other.checkpoint_location.endswith("/db.other")


def test_avro_formats_read_schema_files_and_registry_credentials(tmp_path):
    avsc = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}
    (tmp_path / "e.avsc").write_text(json.dumps(avsc))
    (tmp_path / "schemas").mkdir()
    columns = [{"name": "id", "type": "long", "required": True}]
    raw = events_config(tmp_path, "b:9092", "a", table={"format": {"type": "avro", "schema_file": str(tmp_path / "e.avsc")},
                                                        "schema": columns, "partition_spec": [], "mode": "append",
                                                        "key": [], "op": None})
    raw["tables"][0] = {k: v for k, v in raw["tables"][0].items() if v is not None}
    raw["tables"] += [
        {"identifier": "db.reg", "topics": ["b"], "schema": columns,
         "format": {"type": "confluent-avro", "registry_url": "https://registry:8081/x",
                    "registry_username": "u", "registry_password": "p@ss"}},
        {"identifier": "db.dir", "topics": ["c"], "schema": columns,
         "format": {"type": "confluent-avro", "schema_dir": str(tmp_path / "schemas")}},
    ]
    plain, registry, directory = (j.table.decode.format for j in build_jobs(parse_config(raw)))

    assert isinstance(plain, AvroFormat) and json.loads(plain.reader_schema) == avsc
    assert isinstance(registry, ConfluentFormat) and registry.registry_url == "https://u:p%40ss@registry:8081/x"
    assert isinstance(directory, ConfluentFormat) and directory.schema_dir == str(tmp_path / "schemas")
    assert directory.registry_url is None and directory.reader_schema is None


def test_a_schema_left_to_avro_takes_the_reader_schemas_columns(tmp_path):
    avsc = {"type": "record", "name": "E", "fields": [
        {"name": "id", "type": "long"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "note", "type": ["null", "string"]}]}
    (tmp_path / "e.avsc").write_text(json.dumps(avsc))
    raw = events_config(tmp_path, "b:9092", "a")
    raw["tables"] = [{"identifier": "db.a", "topics": ["a"], "mode": "upsert", "key": ["id"],
                      "format": {"type": "avro", "schema_file": str(tmp_path / "e.avsc")}}]
    (job,) = build_jobs(parse_config(raw))
    schema = job.table.schema()
    assert [(f.field_id, f.name, str(f.field_type), f.required) for f in schema.fields] == [
        (1, "id", "long", True), (2, "at", "timestamptz", True), (3, "note", "string", False)]
    assert list(schema.identifier_field_ids) == [1]


def test_a_schema_left_to_avro_is_refused_naming_the_key(tmp_path):
    avsc = {"type": "record", "name": "E", "fields": [{"name": "id", "type": ["null", "long"]}]}
    (tmp_path / "e.avsc").write_text(json.dumps(avsc))
    raw = events_config(tmp_path, "b:9092", "a")
    raw["tables"] = [{"identifier": "db.a", "topics": ["a"], "mode": "upsert", "key": ["id"],
                      "format": {"type": "avro", "schema_file": str(tmp_path / "e.avsc")}}]
    with pytest.raises(ConfigError) as caught:
        build_jobs(parse_config(raw))
    assert caught.value.problems[0].startswith(
        f"tables[0].schema: schema_file {tmp_path / 'e.avsc'}: the Avro reader schema refused: column 'id' is the key")


def test_columns_from_the_registry_follow_every_version_of_the_topics_subject(tmp_path):
    registry = SchemaRegistry()
    url = registry.serve()
    try:
        v1 = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "int"}]}
        v2 = {**v1, "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "long"}]}
        v3 = {**v1, "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "string"}]}
        for version in (v1, v2, v3):
            registry.register("a-value", {"schema": json.dumps(version)})
        raw = events_config(tmp_path, "b:9092", "a")
        raw["tables"] = [{"identifier": "db.a", "topics": ["a"], "format": {"type": "confluent-avro", "registry_url": url}}]
        (job,) = build_jobs(parse_config(raw))
    finally:
        registry.close()
    fmt = job.table.decode.format
    assert str(job.table.schema().find_type("n")) == "long"
    assert (fmt.subject, fmt.schema_ids) == ("a-value", (1, 2))
    ((refused_id, reason),) = fmt.refused_ids
    assert refused_id == 3 and reason.startswith("schema id 3 (version 3 of a-value) refused: column 'n' is long in the table")


def test_a_subject_with_no_version_is_refused_naming_it(tmp_path):
    registry = SchemaRegistry()
    url = registry.serve()
    try:
        raw = events_config(tmp_path, "b:9092", "a")
        raw["tables"] = [{"identifier": "db.a", "topics": ["a"], "format": {"type": "confluent-avro", "registry_url": url}}]
        with pytest.raises(ConfigError) as caught:
            build_jobs(parse_config(raw))
    finally:
        registry.close()
    assert caught.value.problems == [
        "tables[0].schema: subject a-value has no schema the table can take yet; register one, or list the columns"]


def test_readiness_needs_active_queries_with_recent_commits():
    registry = CollectorRegistry()
    from ingest.driver.metrics import IngestMetrics

    metrics = IngestMetrics(registry)
    now = [1_000.0]
    ready = IngestReadiness(registry, ["db.a", "db.b"], max_commit_age_s=60, clock=lambda: now[0])
    assert ready() == (False, "streaming queries are starting")
    ready.queries_started()
    metrics.set_active("db.a", True)
    ok, reason = ready()
    assert not ok and "db.b: query not active" in reason
    metrics.set_active("db.b", True)
    assert ready()[0], "a fresh start counts as a commit"
    now[0] += 61
    ok, reason = ready()
    assert not ok and "db.a: no commit for 61s (max 60s) with unknown records waiting" in reason
    metrics.set_lag("db.a", {"t": {0: 4, 1: 0}})
    metrics.set_lag("db.b", {"t": {0: 0}})
    ok, reason = ready()
    assert not ok and "db.a: no commit for 61s (max 60s) with 4 records waiting" in reason
    assert "db.b" not in reason, "an idle topic is old but not late"
    metrics.last_commit.labels("db.a").set(now[0] - 5)
    metrics.last_commit.labels("db.b").set(now[0] - 59)
    assert ready()[0]


def test_a_restart_behind_an_old_commit_gets_the_full_grace_period():
    """The last-commit gauge is seeded from the table: hours old after a restart, with a backlog."""
    registry = CollectorRegistry()
    from ingest.driver.metrics import IngestMetrics

    metrics = IngestMetrics(registry)
    now = [10_000.0]
    ready = IngestReadiness(registry, ["db.a"], max_commit_age_s=60, clock=lambda: now[0])
    metrics.last_commit.labels("db.a").set(now[0] - 7_200)
    metrics.set_lag("db.a", {"t": {0: 50_000}})
    ready.queries_started()
    metrics.set_active("db.a", True)
    assert ready()[0], "a restart counts as a commit"
    now[0] += 61
    ok, reason = ready()
    assert not ok and reason == "db.a: no commit for 61s (max 60s) with 50000 records waiting"


def test_an_idle_caught_up_pipeline_stays_ready_and_an_unreachable_kafka_is_not():
    """Lag 0 and no new data: old commits must not make Kubernetes mark the pod NotReady."""
    registry = CollectorRegistry()
    from ingest.driver.metrics import IngestMetrics

    metrics = IngestMetrics(registry)
    now = [1_000.0]
    ready = IngestReadiness(registry, ["db.a"], max_commit_age_s=60, clock=lambda: now[0])
    ready.queries_started()
    metrics.set_active("db.a", True)
    metrics.set_lag("db.a", {"t": {0: 0}})
    metrics.last_commit.labels("db.a").set(now[0])
    now[0] += 3_600
    assert ready() == (True, "1 queries active; none is late (a commit within 60s, or nothing waiting)")
    metrics.set_kafka_up("db.a", False)
    assert ready() == (False, "db.a: kafka unreachable")


# ----------------------------------------------------------------------------- a real run


@pytest.mark.kafka
@pytest.mark.spark
def test_service_lands_events_serves_metrics_and_readiness(spark, kafka_bootstrap, new_topic, tmp_path, caplog):
    caplog.set_level("INFO", logger="floe.ingest")
    topic = new_topic("svc", partitions=2)
    delivered = produce(kafka_bootstrap, topic, change_events(2_000, 300, seed=3))
    config = parse_config(events_config(tmp_path, kafka_bootstrap, topic))
    registry, stop, port = CollectorRegistry(), threading.Event(), free_port()
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.update(
        code=run_ingest_service(config, stop=stop, registry=registry, port=port, spark=spark)))
    thread.start()
    try:
        deadline = time.monotonic() + 150
        while (registry.get_sample_value("floe_ingest_records_read_total", {"table": "db.events"}) or 0) < 2_000:
            assert thread.is_alive() and time.monotonic() < deadline, "the service should land every event"
            time.sleep(0.5)
        status, body = http_get(f"http://127.0.0.1:{port}/readyz")
        assert status == 200, body
        assert json.loads(body)["checks"]["ingest"]["ok"] is True
        status, metrics = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'floe_ingest_query_active{table="db.events"} 1.0' in metrics
        assert 'floe_up{component="ingest"} 1.0' in metrics
        assert 'floe_ingest_records_read_total{table="db.events"} 2000.0' in metrics
    finally:
        stop.set()
        thread.join(180)
    assert result == {"code": EXIT_STOPPED}
    assert registry.get_sample_value("floe_up", {"component": "ingest"}) == 0
    rows, _ = read_rows(tmp_path)
    assert rows == expected_table(delivered)
    committed = [r for r in caplog.records if getattr(r, "result", None) == "committed"]
    assert committed, "every committed batch logs a line"
    assert sum(r.rows_committed for r in committed) == registry.get_sample_value(
        "floe_ingest_records_committed_total", {"table": "db.events"}), "the batch log and the metric count alike"
    assert sum(r.records for r in committed) == 2_000
    stopped = [r for r in caplog.records if r.getMessage() == "ingest stopped"]
    assert [(r.name, r.exit_code) for r in stopped] == [("floe.ingest", EXIT_STOPPED)], "a final line, from ingest"

    more = produce(kafka_bootstrap, topic, change_events(300, 300, seed=4))
    back_fill = parse_config(events_config(tmp_path, kafka_bootstrap, topic, trigger={"available_now": True}))
    assert run_ingest_service(back_fill, port=0, spark=spark) == EXIT_OK, "available_now ends on its own"
    rows, _ = read_rows(tmp_path)
    assert rows == expected_table(delivered + more)


def test_an_upsert_table_without_a_key_takes_its_key_columns_from_the_kafka_keys_subject(tmp_path):
    registry = SchemaRegistry()
    url = registry.serve()
    try:
        key = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
        value = {"type": "record", "name": "V", "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "int"}]}
        registry.register("a-key", {"schema": json.dumps(key)})
        registry.register("a-value", {"schema": json.dumps(value)})
        raw = events_config(tmp_path, "b:9092", "a")
        upsert = {"identifier": "db.a", "topics": ["a"], "mode": "upsert", "format": {"type": "confluent", "registry_url": url}}
        raw["tables"] = [upsert, {**upsert, "identifier": "db.b", "topics": ["b"]}]
        with pytest.raises(ConfigError) as caught:
            build_jobs(parse_config(raw))
        assert caught.value.problems == [
            "tables[1].key: an upsert table needs its key columns: name them in key, or register the Kafka key's "
            "schema (a record) under b-key"]
        raw["tables"] = raw["tables"][:1]
        (job,) = build_jobs(parse_config(raw))
    finally:
        registry.close()
    decode = job.table.decode
    assert (decode.key_fields, decode.key_format) == (("id",), "confluent")
    assert [job.table.schema().find_column_name(i) for i in job.table.schema().identifier_field_ids] == ["id"]
