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
    metrics.set_freshness(table, {"t": {0: 1_000_000}}, now_s=3.0)
    metrics.files_written.labels(table, "position_deletes").inc(0)
    exported = {m.name: m for m in registry.collect()}
    expected = documented()
    assert len(expected) == 14
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
