"""The pure parts of ingest: batch stats, offsets math, summaries, lag, start offsets, the job spec."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import batch_summary
from ingest.driver.batch import MAX_INDEX_REDOS, BatchProcessor, IngestStopped, redo_backoff
from ingest.driver.batch_committer import IndexRaced
from ingest.tasks.changes import OpField
from ingest.tasks.decode_records import DecodeSpec
from ingest.job import (
    CatalogSpec,
    IngestJob,
    JobSpecError,
    SortTerm,
    SourceSpec,
    TableSpec,
    TriggerSpec,
    job_from_json,
    job_to_json,
)
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import (
    MAX_TIMESTAMPS,
    BatchStats,
    batch_size,
    batch_stats,
    committed_timestamps,
    consumer_lag,
    decode_timestamps,
    encode_timestamps,
    parse_offset_log_entry,
    parse_pinned_offsets,
    replayed_records,
    starting_offsets,
    through_planned_ends,
)
from ingest.driver.table_setup import job_schema, needs_global_deletes
from ingest.tasks.writer import keys_determine_partition
from table.metadata import Snapshot, new_table_metadata
from table.partitioning import UNPARTITIONED_SPEC, build_partition_spec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.types import LongType, NestedField, StringType, TimestamptzType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "ts", TimestamptzType()),
    identifier_field_ids=[1, 2],
)


def stat(topic, partition, error, first, last, records, max_ts=None):
    return dict(topic=topic, partition=partition, error_class=error, first_offset=first, last_offset=last,
                records=records, max_ts=max_ts)


# ---------------------------------------------------------------------------
# Batch stats
# ---------------------------------------------------------------------------


def test_batch_stats_fold_rows_and_dead_letters_per_partition():
    stats = batch_stats([
        stat("a", 0, None, 10, 19, 9, 500),
        stat("a", 0, "DecodeError", 12, 12, 1, None),
        stat("a", 1, "FieldError", 3, 4, 2, None),
        stat("b", 0, None, 0, 0, 1, 900),
        stat("a", 1, None, 0, 2, 3, 100),
    ])
    assert stats.offsets == {"a": {0: (10, 20), 1: (0, 5)}, "b": {0: (0, 1)}}
    assert stats.max_timestamps == {"a": {0: 500, 1: 100}, "b": {0: 900}}
    assert (stats.records, stats.rows, stats.bad_records) == (16, 13, 3)
    assert stats.dead_letters == {"DecodeError": 1, "FieldError": 2}
    assert not stats.empty


def test_an_empty_aggregate_is_an_empty_batch():
    stats = batch_stats([])
    assert stats.empty and stats.offsets == {} and stats.bad_records == 0


def test_replayed_records_sum_the_offset_ranges():
    assert replayed_records({"a": {0: (10, 20), 1: (5, 5)}, "b": {3: (0, 7)}}) == 17


# ---------------------------------------------------------------------------
# Newest timestamps in summaries
# ---------------------------------------------------------------------------


def test_timestamps_round_trip_compactly():
    text = encode_timestamps({"b": {1: 5}, "a": {10: 7, 2: 9}})
    assert text == '{"a":{"2":9,"10":7},"b":{"1":5}}'
    assert decode_timestamps(text) == {"a": {2: 9, 10: 7}, "b": {1: 5}}


def _history(*summaries):
    metadata = new_table_metadata(SCHEMA, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, "/tmp/t")
    parent = None
    for i, summary in enumerate(summaries, start=1):
        snapshot = Snapshot(i, parent, i, 1000 + i, f"/tmp/t/m{i}.avro", {"operation": "append", **summary})
        metadata = metadata.add_snapshot(snapshot).set_branch("main", i)
        parent = i
    return metadata


def test_committed_timestamps_take_each_partitions_newest_batch():
    metadata = _history(
        {**batch_summary("w", 0, {"t": {0: (0, 5), 1: (0, 3)}}), MAX_TIMESTAMPS: encode_timestamps({"t": {0: 10, 1: 11}})},
        {"note": "a compaction: no writer"},
        {**batch_summary("w", 1, {"t": {0: (5, 9)}}), MAX_TIMESTAMPS: encode_timestamps({"t": {0: 20}})},
    )
    assert committed_timestamps(metadata) == {"t": {0: 20, 1: 11}}


# ---------------------------------------------------------------------------
# Lag and start offsets
# ---------------------------------------------------------------------------


def test_lag_is_high_watermark_minus_the_tables_position():
    marks = {"t": {0: (0, 100), 1: (40, 50), 2: (0, 10)}, "u": {0: (5, 5)}}
    committed = {"t": {0: 90, 2: 12}}
    # partition 1 was never committed: everything retained is lag; 2 is ahead (compacted topic): zero
    assert consumer_lag(marks, committed) == {"t": {0: 10, 1: 10, 2: 0}, "u": {0: 0}}


def test_start_offsets_resume_from_the_table_and_name_every_partition():
    committed = {"t": {0: 42, 2: 7}}
    resumed = starting_offsets("earliest", committed, {"t": [0, 1, 2]})
    assert json.loads(resumed) == {"t": {"0": 42, "1": -2, "2": 7}}
    assert json.loads(starting_offsets("latest", committed, {"t": [0, 1]})) == {"t": {"0": 42, "1": -1}}
    specific = json.dumps({"t": {"1": 5}})
    assert json.loads(starting_offsets(specific, committed, {"t": [0, 1]})) == {"t": {"0": 42, "1": 5}}


def test_a_configured_offset_ahead_of_the_table_skips_forward_and_one_behind_never_rereads():
    """How an operator gets past a poison record at t/0@50: new checkpoint, starting_offsets t/0 = 51."""
    committed = {"t": {0: 50, 1: 7}}
    skip = json.dumps({"t": {"0": 51, "1": 3}})
    assert json.loads(starting_offsets(skip, committed, {"t": [0, 1]})) == {"t": {"0": 51, "1": 7}}


def test_a_configured_offset_ahead_of_the_table_logs_one_warning_with_the_records_it_skips(caplog):
    committed = {"t": {0: 50, 1: 7}}
    skip = json.dumps({"t": {"0": 53, "1": 3}})
    with caplog.at_level(logging.WARNING, logger="floe.ingest"):
        starting_offsets(skip, committed, {"t": [0, 1]}, "shop.orders")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(
        "WARNING", "table shop.orders: starting_offsets skips records of t/0: committed offset 50, "
        "configured offset 53, 3 records skipped",
    )]
    assert caplog.records[0].table == "shop.orders"


def test_a_configured_offset_not_ahead_of_the_table_logs_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="floe.ingest"):
        starting_offsets(json.dumps({"t": {"0": 50}}), {"t": {0: 50}}, {"t": [0, 1]})
    assert caplog.records == []


def test_start_offsets_are_the_configured_ones_when_the_table_has_none():
    assert starting_offsets("earliest", {}, {"t": [0]}) is None
    assert starting_offsets("earliest", {"other": {0: 1}}, {"t": [0]}) is None


# ---------------------------------------------------------------------------
# Where equality deletes go
# ---------------------------------------------------------------------------


def test_deletes_are_partitioned_only_when_the_key_determines_the_partition():
    by_region = build_partition_spec(SCHEMA, [("identity", "region"), ("bucket[8]", "id")])
    by_day = build_partition_spec(SCHEMA, [("day", "ts")])
    assert keys_determine_partition(by_region, [1, 2])
    assert not keys_determine_partition(by_day, [1, 2])
    assert keys_determine_partition(UNPARTITIONED_SPEC, [1])
    assert not keys_determine_partition(by_region, [])


def _table(partition=(), mode="upsert", **kwargs):
    op = OpField() if mode == "upsert" else None
    return TableSpec("db.t", DecodeSpec(SCHEMA, mode=mode, op_field=op), partition=partition, **kwargs)


def test_a_global_delete_spec_is_needed_for_upserts_partitioned_off_the_key():
    day = _table((("day", "ts"),))
    metadata = new_table_metadata(SCHEMA, day.partition_spec(), UNSORTED_SORT_ORDER, "/tmp/t")
    assert needs_global_deletes(metadata, day)
    assert not needs_global_deletes(metadata, _table((("day", "ts"),), mode="append"))
    keyed = _table((("bucket[4]", "id"),))
    metadata = new_table_metadata(SCHEMA, keyed.partition_spec(), UNSORTED_SORT_ORDER, "/tmp/t")
    assert not needs_global_deletes(metadata, keyed)


def test_explicit_key_fields_become_identifier_fields():
    plain = Schema(*SCHEMA.fields)
    table = TableSpec("db.t", DecodeSpec(plain, mode="upsert", key_fields=("id",)))
    assert list(job_schema(table).identifier_field_ids) == [1]


# ---------------------------------------------------------------------------
# The job spec
# ---------------------------------------------------------------------------


def _job(**source):
    return IngestJob(
        source=SourceSpec("k:9092", topics=("t",), **source),
        table=_table((("bucket[4]", "id"),), sort_order=(SortTerm("ts", direction="desc"),),
                     properties={"write.target-file-size-bytes": 1024}, bad_records="dead-letter",
                     dead_letter_topic="t-dlq"),
        catalog=CatalogSpec("sqlite:////tmp/c.db", "/tmp/w"),
        checkpoint_location="/tmp/cp",
        trigger=TriggerSpec(5.0),
    )


def test_job_spec_round_trips_through_json():
    job = _job(max_offsets_per_trigger=100, starting_offsets={"t": {0: 5}},
               kafka_properties={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    text = json.dumps(job_to_json(job))
    assert job_from_json(json.loads(text)) == job


def test_spark_options_pass_client_properties_as_kafka_options():
    job = _job(max_offsets_per_trigger=100, min_offsets_per_trigger=10, max_trigger_delay="5m",
               kafka_properties={"security.protocol": "SASL_SSL", "sasl.jaas.config": "secret"})
    options = job.source.spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"] == "secret"
    assert options["kafka.bootstrap.servers"] == "k:9092"
    assert options["subscribe"] == "t"
    assert options["includeHeaders"] == "true"
    assert (options["maxOffsetsPerTrigger"], options["minOffsetsPerTrigger"], options["maxTriggerDelay"]) == ("100", "10", "5m")
    assert options["kafka.isolation.level"] == "read_committed", "aborted transactions are skipped, as librdkafka does"
    assert options["kafka.default.api.timeout.ms"] == "300000", "a task waits out a broker's outage of minutes"
    assert options["kafkaConsumer.pollTimeoutMs"] == "300000", "and so does its fetch"
    chosen = _job(kafka_properties={"isolation.level": "read_uncommitted",
                                    "default.api.timeout.ms": "90000"}).source.spark_options()
    assert chosen["kafka.isolation.level"] == "read_uncommitted"
    assert chosen["kafka.default.api.timeout.ms"] == "90000"
    assert chosen["kafkaConsumer.pollTimeoutMs"] == "90000", "one setting for how long a task waits out Kafka"


def test_floes_source_gets_a_task_per_local_slot_unless_the_job_caps_its_tasks():
    from ingest.driver.stream import python_source_options

    python = _job(reader="python")
    assert "maxPartitions" not in python_source_options(python), "a cluster: a task per range"
    assert python_source_options(python, task_slots=2)["maxPartitions"] == "2"
    capped = _job(reader="python", max_tasks_per_batch=3)
    assert python_source_options(capped, task_slots=2)["maxPartitions"] == "3"
    assert job_from_json(json.loads(json.dumps(job_to_json(capped)))) == capped


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"topics": ()}, "source.topics"),
        ({"topic_pattern": "t.*"}, "source.topics"),
        ({"max_offsets_per_trigger": 5, "min_offsets_per_trigger": 10}, "source.min_offsets_per_trigger"),
        ({"kafka_properties": {"group.id": "x"}}, "source.kafka_properties"),
        ({"max_trigger_delay": "soon"}, "source.max_trigger_delay"),
        ({"max_tasks_per_batch": 0, "reader": "python"}, "source.max_tasks_per_batch"),
        ({"max_tasks_per_batch": 4}, "source.max_tasks_per_batch"),  # Spark's source plans its own tasks
    ],
)
def test_bad_sources_are_refused_naming_the_field(changes, field):
    with pytest.raises(JobSpecError) as raised:
        SourceSpec("k:9092", **{"topics": ("t",), **changes})
    assert raised.value.field == field


def test_bad_tables_are_refused():
    with pytest.raises(JobSpecError, match="dead_letter_topic"):
        _table(bad_records="dead-letter")
    with pytest.raises(JobSpecError, match="partition"):
        _table((("bucket[4]", "nope"),))
    with pytest.raises(JobSpecError, match="also a source topic"):
        IngestJob(SourceSpec("k:9092", topics=("t",)), _table(bad_records="dead-letter", dead_letter_topic="t"),
                  CatalogSpec("sqlite:////tmp/c.db", "/tmp/w"), "/tmp/cp")


def test_only_appends_that_need_no_clustering_or_sorting_take_the_direct_path():
    from ingest.driver.write_plans import direct_path
    from table.sort_order import SortField, SortOrder

    plain = new_table_metadata(SCHEMA, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, "/tmp/t")
    by_day = new_table_metadata(SCHEMA, build_partition_spec(SCHEMA, [("day", "ts")]), UNSORTED_SORT_ORDER, "/tmp/t")
    sorted_ = new_table_metadata(SCHEMA, UNPARTITIONED_SPEC, SortOrder(1, (SortField(1),)), "/tmp/t")
    fanout = new_table_metadata(SCHEMA, build_partition_spec(SCHEMA, [("day", "ts")]), UNSORTED_SORT_ORDER, "/tmp/t",
                                {"write.distribution-mode": "none"})
    assert direct_path(plain, "append") and direct_path(fanout, "append")
    assert not direct_path(plain, "upsert")
    assert not direct_path(by_day, "append"), "partitioned tables default to hash distribution"
    assert not direct_path(sorted_, "append")


def test_a_new_streaming_table_deletes_old_metadata_files_unless_the_job_says_otherwise(tmp_path):
    from dataclasses import replace

    from commit.catalog.base import Catalog
    from commit.catalog.sql.catalog import SqlCatalog
    from ingest.driver.table_setup import ensure_table

    with SqlCatalog(f"sqlite:///{tmp_path / 'c.db'}", str(tmp_path / "wh")) as catalog:
        default = ensure_table(catalog, replace(_table(), identifier="db.a"))
        chosen = ensure_table(catalog, replace(_table(properties={"write.metadata.delete-after-commit.enabled": "false"}),
                                               identifier="db.b"))
    assert default.metadata.properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert chosen.metadata.properties["write.metadata.delete-after-commit.enabled"] == "false"


# --------------------------------------------------------------------------
# The batch's planned ends (Spark's offset log)
# --------------------------------------------------------------------------

OFFSET_LOG = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"t":{"0":120,"1":40}}\n'


def test_an_offset_log_entry_gives_the_batch_ends():
    assert parse_offset_log_entry(OFFSET_LOG, "cp/offsets/3") == {"t": {0: 120, 1: 40}}


@pytest.mark.parametrize("text", ["v1\n{}\n", 'v1\n{}\n{"t":{"0":1}}\n{"u":{"0":1}}\n', "v1\n{}\n[1, 2]\n",
                                  'v1\n{}\n{"t":{"x":1}}\n', 'v2\n{}\n0:{"t":{"0":1}}\n', ""])
def test_an_offset_log_entry_of_another_shape_is_refused_naming_the_file(text: str):
    with pytest.raises(ValueError, match="^cp/offsets/3: "):
        parse_offset_log_entry(text, "cp/offsets/3")


def test_ranges_run_to_the_planned_end_past_markers_and_aborted_records():
    seen = BatchStats({"t": {0: (100, 117)}}, records=17, rows=17)
    planned = {"t": {0: 120, 1: 40, 2: 9, 3: -2}}
    committed = {"t": {0: 100, 1: 30, 2: 9}}
    got = through_planned_ends(seen, planned, committed)
    # partition 0: records up to 116, then a marker and aborted records up to 119;
    # 1: markers only, past the committed 30; 2: idle, recorded empty (the newest snapshot stands in every
    # partition the table covered, so an idle one holds no snapshot back from expiry); 3: not resolved yet
    assert got.offsets == {"t": {0: (100, 120), 1: (30, 40), 2: (9, 9)}}
    assert (got.records, got.rows) == (17, 17)
    markers_only = through_planned_ends(BatchStats(), {"t": {1: 40}}, committed)
    assert markers_only.empty and markers_only.covers_offsets
    assert not through_planned_ends(BatchStats(), {"t": {2: 9, 4: 12}}, committed).covers_offsets
    # a partition the table never covered stays out (snapshot expiry keeps the newest snapshot of each partition)
    assert through_planned_ends(seen, {"t": {5: 7}}, {}).offsets == {"t": {0: (100, 117)}}
    assert through_planned_ends(seen, {}, committed) == seen


def test_the_batch_ends_come_from_the_checkpoint_and_an_unreadable_entry_is_warned_once(tmp_path, caplog):
    """Spark's offset log gives each batch's end; where it cannot be read the offsets seen stand, with one warning."""
    job = dataclasses.replace(_job(), checkpoint_location=str(tmp_path / "checkpoint"))
    (tmp_path / "checkpoint" / "offsets").mkdir(parents=True)
    (tmp_path / "checkpoint" / "offsets" / "4").write_text(OFFSET_LOG)
    (tmp_path / "checkpoint" / "offsets" / "5").write_text("v9\n")
    with SqlCatalog(f"sqlite:///{tmp_path}/c.db", str(tmp_path / "wh"), "t") as catalog:
        processor = BatchProcessor(job, job.table, catalog, IngestMetrics(CollectorRegistry()))
        with caplog.at_level(logging.WARNING, logger="floe.ingest"):
            assert processor.offset_log.planned_ends(4) == {"t": {0: 120, 1: 40}}
            assert caplog.records == []
            assert processor.offset_log.planned_ends(5) == {}
            assert processor.offset_log.planned_ends(6) == {}  # no entry: process() outside a streaming query
    [warning] = caplog.records
    assert "offsets/5: offset log version 'v9', expected 'v1'" in warning.getMessage()


def test_a_batch_size_is_known_from_where_it_starts_and_ends_in_the_checkpoint_or_not_at_all():
    ends = {"t": {0: 120, 1: 60}}
    assert batch_size({"t": {0: 100, 1: 50}}, ends) == 30
    # a partition found since the last batch is read whole, whatever maxOffsetsPerTrigger: not known
    assert batch_size({"t": {0: 100}}, ends) is None
    assert batch_size({}, ends) is None and batch_size({}, {}) is None  # batch 0 of Spark's source
    assert batch_size({"t": {0: -2, 1: 50}}, ends) is None  # a start not resolved
    assert batch_size({"t": {0: 130, 1: 50}}, ends) is None  # an end before its start (refused elsewhere)


def test_pinned_starting_offsets_read_with_integer_partitions_and_refused_naming_the_file():
    assert parse_pinned_offsets('{"t": {"0": 5, "1": 7}}', "cp/floe/starting-offsets.json") == {"t": {0: 5, 1: 7}}
    for bad in ("latest", '{"t": 3}', '{"t": {"x": 1}}'):
        with pytest.raises(ValueError, match="^cp/floe/starting-offsets.json: not Kafka offsets"):
            parse_pinned_offsets(bad, "cp/floe/starting-offsets.json")


def test_a_raced_batch_backs_off_long_enough_for_a_compaction_run_to_finish():
    waits = [redo_backoff(redo) for redo in range(MAX_INDEX_REDOS)]
    assert all(0.125 <= w <= 8.0 for w in waits), waits
    assert sum(waits) >= 20.0, "a partial-progress run of ten group commits has time to end between the writes"


def test_a_stop_ends_a_raced_batchs_backoff_at_once(tmp_path):
    """A raced batch waiting to be written again gives up when the query stops: it is replayed on restart."""
    import threading
    import time

    stopping = threading.Event()
    job = _job()
    with SqlCatalog(f"sqlite:///{tmp_path}/c.db", str(tmp_path / "wh"), "t") as catalog:
        processor = BatchProcessor(job, job.table, catalog, IngestMetrics(CollectorRegistry()), stopping=stopping)
        stopping.set()
        began = time.monotonic()
        with pytest.raises(IngestStopped, match="batch 7 given up"):
            processor._back_off(7, IndexRaced(RuntimeError("deletes raced a compaction")), MAX_INDEX_REDOS - 1)
        assert time.monotonic() - began < 1.0, "the up to 8 s wait did not hold the stop"
