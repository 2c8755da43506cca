"""ingest.metrics: every ingest metric of docs/metrics.md is exported, with its labels."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from ingest.metrics import IngestMetrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, tuple[str, list[str]]]:
    """name -> (type, labels) from the Ingest table of docs/metrics.md."""
    section = DOC.read_text().split("## Ingest", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(floe_ingest_\w+)` \| (\w+) \| ([\w, ]+) \|", section, re.M)
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
    metrics.files_written.labels(table, "position_deletes").inc(0)
    exported = {m.name: m for m in registry.collect()}
    expected = documented()
    assert len(expected) == 15
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


class _FailingProbe:
    table = "db.t"

    def __init__(self, metrics: IngestMetrics, error: Exception) -> None:
        self.metrics, self.error, self.closed = metrics, error, False

    def refresh(self) -> None:
        raise self.error

    def mark_unreachable(self) -> None:
        self.metrics.set_kafka_up(self.table, False)

    def close(self) -> None:
        self.closed = True


def test_an_unreachable_kafka_is_one_line_per_attempt_and_a_metric(caplog):
    from ingest.metrics import KafkaUnreachable, LagMonitor

    registry = CollectorRegistry()
    metrics = IngestMetrics(registry)
    error = KafkaUnreachable("127.0.0.1:1", RuntimeError("KafkaError{code=_TRANSPORT,val=-195}\nmore detail"))
    monitor = LagMonitor(_FailingProbe(metrics, error), interval_s=15)
    with caplog.at_level("INFO", logger="floe.ingest"):
        monitor.refresh_once()
        monitor.refresh_once()
    lines = [r for r in caplog.records if r.name == "floe.ingest"]
    assert [r.getMessage() for r in lines] == [
        "kafka 127.0.0.1:1 is unreachable: RuntimeError: KafkaError{code=_TRANSPORT,val=-195}; retrying every 15s"
    ] * 2
    assert all(r.exc_info is None for r in lines), "no traceback below DEBUG"
    assert registry.get_sample_value("floe_ingest_kafka_up", {"table": "db.t"}) == 0
