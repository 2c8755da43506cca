"""ingest.driver.metrics: every ingest metric of docs/metrics.md is exported, with its labels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ingest.driver.metrics import IngestMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, tuple[str, list[str]]]:
    """name -> (type, labels) from the Ingest table of docs/metrics.md."""
    section = DOC.read_text().split("## Ingest", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(floe_(?:ingest|key_index)_\w+)` \| (\w+) \| ([\w, ]+) \|", section, re.M)
    return {name: (kind, [label.strip() for label in labels.split(",")]) for name, kind, labels in rows}


def test_every_documented_ingest_metric_is_exported_with_its_labels():
    registry = CollectorRegistry()
    metrics = IngestMetrics(registry)
    table = "db.t"
    metrics.batch_committed(table, records=10, committed_rows=8, attempts=2,
                            files={"data": (1, 100), "equality_deletes": (1, 50)}, duration_s=1.5, commit_s=0.1)
    metrics.batch_skipped(table, 3, 0.2)
    metrics.batch_empty(table)
    metrics.batch_failed(table)
    metrics.dead_lettered(table, {"DecodeError": 2})
    metrics.set_active(table, True)
    metrics.set_lag(table, {"t": {0: 5}})
    metrics.set_freshness(table, {"t": {0: 1_000_000}}, now_s=3.0, lag={"t": {0: 5}})
    metrics.set_kafka_up(table, True)
    metrics.set_held(table, True, "storage")
    metrics.schema_version(table, "refused")
    metrics.files_written.labels(table, "position_deletes").inc(0)
    metrics.index_committed(table, entries=120, size_bytes=4096, lookups=8, update_s=0.05, rebuilt=True)
    exported = {m.name: m for m in registry.collect()}
    expected = documented()
    assert len(expected) == 23
    for name, (kind, labels) in expected.items():
        base = name[: -len("_total")] if kind == "counter" else name
        assert base in exported, f"{name} is not exported"
        assert exported[base].type == kind
        sample_labels = {tuple(sorted(s.labels)) for s in exported[base].samples}
        assert tuple(sorted(labels)) in sample_labels or tuple(sorted(labels + ["le"])) in sample_labels, name
    text = generate_latest(registry).decode()
    assert 'floe_ingest_batches_total{result="committed",table="db.t"} 1.0' in text
    assert 'floe_ingest_commit_retries_total{table="db.t"} 1.0' in text
    assert 'floe_ingest_freshness_seconds{partition="0",table="db.t",topic="t"} 2.0' in text
    assert 'floe_key_index_entries{table="db.t"} 120.0' in text
    assert 'floe_key_index_rebuilds_total{table="db.t"} 1.0' in text
    assert 'floe_ingest_table_held{table="db.t"} 1.0' in text
    assert 'floe_ingest_table_failures_total{cause="storage",table="db.t"} 1.0' in text


def test_every_labelled_counter_starts_at_zero_and_the_last_commit_is_seeded():
    """A crash-looping ingest must export its counters before the first increment (alerts use increase())."""
    registry = CollectorRegistry()
    IngestMetrics(registry).register_table("db.t", last_commit_s=1_700_000_000.0)
    for result in ("committed", "skipped", "empty", "failed"):
        assert registry.get_sample_value("floe_ingest_batches_total", {"table": "db.t", "result": result}) == 0
    for name in ("floe_ingest_records_read_total", "floe_ingest_records_committed_total",
                 "floe_ingest_commit_retries_total", "floe_ingest_commit_conflicts_total"):
        assert registry.get_sample_value(name, {"table": "db.t"}) == 0, name
    for content in ("data", "position_deletes", "equality_deletes"):
        assert registry.get_sample_value("floe_ingest_files_written_total", {"table": "db.t", "content": content}) == 0
    assert registry.get_sample_value("floe_ingest_bad_records_total", {"table": "db.t", "reason": "DecodeError"}) == 0
    assert registry.get_sample_value("floe_ingest_last_commit_timestamp_seconds", {"table": "db.t"}) == 1_700_000_000.0


def test_a_caught_up_partition_is_fresh_however_old_its_newest_record():
    registry = CollectorRegistry()
    metrics = IngestMetrics(registry)
    newest = {"t": {0: 1_000_000, 1: 1_000_000}}
    metrics.set_freshness("db.t", newest, now_s=681.0, lag={"t": {0: 0, 1: 3}})
    labels = {"table": "db.t", "topic": "t"}
    assert registry.get_sample_value("floe_ingest_freshness_seconds", {**labels, "partition": "0"}) == 0.0
    assert registry.get_sample_value("floe_ingest_freshness_seconds", {**labels, "partition": "1"}) == 680.0


def probe_of(bootstrap: str, tmp_path: Path) -> tuple[Any, Any, CollectorRegistry]:
    """A lag probe of a new upsert table reading ``orders`` from ``bootstrap``: probe, catalog, registry."""
    from commit.catalog.base import Catalog
    from commit.catalog.sql.catalog import SqlCatalog
    from ingest.driver.lag import LagProbe
    from ingest.driver.table_setup import ensure_table
    from tests.ingest.e2e_support import upsert_job

    job = upsert_job(bootstrap, "orders", tmp_path)
    catalog = SqlCatalog(job.catalog.uri, job.catalog.warehouse)
    ensure_table(catalog, job.table)
    registry = CollectorRegistry()
    return LagProbe(job, catalog, IngestMetrics(registry), timeout_s=1), catalog, registry


def test_an_unreachable_kafka_is_a_metric_at_every_attempt_and_one_line_a_minute(tmp_path, caplog):
    from ingest.driver.lag import LagMonitor
    from service.local_kafka import free_port

    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    probe, catalog, registry = probe_of(bootstrap, tmp_path)
    monitor = LagMonitor(probe, interval_s=15)
    try:
        with caplog.at_level("INFO", logger="floe.ingest"):
            caplog.clear()
            monitor.refresh_once()
            monitor.refresh_once()
            assert registry.get_sample_value("floe_ingest_kafka_up", {"table": "db.events"}) == 0
            catalog.drop_table("db.events")  # Kafka is asked first: still the same outage
            monitor.refresh_once()
    finally:
        probe.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "floe.ingest"]  # the monitor's, since clear()
    unreachable = rf"kafka {bootstrap} is unreachable: [^{{}}]+ \(failed to get metadata\); retrying every 15s " \
                  r"\(unreachable for 0s\)"
    assert len(lines) == 1 and re.fullmatch(unreachable, lines[0]), lines  # not a line per attempt
    assert all(r.exc_info is None for r in caplog.records if r.name == "floe.ingest"), "no traceback below DEBUG"


@pytest.mark.kafka
def test_a_catalog_failure_is_one_line_and_kafka_up_still_says_kafka_answers(kafka_bootstrap, tmp_path, caplog):
    from ingest.driver.lag import LagMonitor

    probe, catalog, registry = probe_of(kafka_bootstrap, tmp_path)
    monitor = LagMonitor(probe, interval_s=15)
    catalog.drop_table("db.events")  # a failure that is not about Kafka
    try:
        with caplog.at_level("INFO", logger="floe.ingest"):
            for _ in range(3):  # a catalog that stays down is one line when it begins, once a minute after
                monitor.refresh_once()
    finally:
        probe.close()
    assert registry.get_sample_value("floe_ingest_kafka_up", {"table": "db.events"}) == 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "floe.ingest"]
    assert line.startswith("lag refresh failed: ") and "db.events" in line, line
    assert line.endswith("; retrying every 15s (failing for 0s)"), line
    assert all(r.exc_info is None for r in caplog.records if r.name == "floe.ingest"), "no traceback below DEBUG"


def test_every_record_error_class_is_a_seeded_reason():
    """The ``reason`` label is the error's class name; each starts at 0 so rate() sees the first one."""
    import ingest.tasks.decoding  # noqa: F401 - registers the decoders' record errors
    from ingest.driver.metrics import BAD_RECORD_REASONS
    from ingest.tasks.record_errors import RecordError

    def subclasses(cls: type) -> set[str]:
        return {cls.__name__}.union(*(subclasses(sub) for sub in cls.__subclasses__()))

    assert set(BAD_RECORD_REASONS) == subclasses(RecordError) - {"RecordError"}


def test_deletion_vectors_count_once_per_puffin_file_under_their_own_label(tmp_path: Path):
    from ingest.tasks.output import BatchFiles, file_counts
    from table.deletes.writers import DeletionVectorWriter
    from table.io import FileIO

    writer = DeletionVectorWriter(FileIO.for_location(str(tmp_path)), str(tmp_path / "data"))
    for i in range(15):  # one batch's DVs: 15 data files, one Puffin file
        writer.delete(f"{tmp_path}/data/f{i}.parquet", [0, i + 1], 0, ())
    dvs = writer.close()
    [puffin] = list((tmp_path / "data").glob("*.puffin"))
    assert len(dvs) == 15 and {dv.file_path for dv in dvs} == {str(puffin)}

    registry = CollectorRegistry()
    metrics = IngestMetrics(registry)
    metrics.register_table("db.t")
    metrics.batch_committed("db.t", records=30, committed_rows=30, attempts=1, duration_s=1.0, commit_s=0.1,
                            files=file_counts(BatchFiles([], dvs, 30)))
    sample = registry.get_sample_value
    assert sample("floe_ingest_files_written_total", {"table": "db.t", "content": "deletion_vectors"}) == 1
    assert sample("floe_ingest_bytes_written_total", {"table": "db.t", "content": "deletion_vectors"}) \
        == puffin.stat().st_size
    assert sample("floe_ingest_files_written_total", {"table": "db.t", "content": "position_deletes"}) == 0
