"""Every metric the dashboard, the alert rules and /readyz refer to is exported by running services.

`floe ingest` and `floe compact` run side by side on free ports over a small
upsert table (with one bad record sent to a dead-letter topic); their
``/metrics`` pages are scraped over HTTP and compared with the names parsed
from deploy/grafana/floe-dashboard.json, deploy/prometheus/alerts.yaml and
the readiness rule (service.ingest_command.READINESS_METRICS).
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import yaml
from prometheus_client import CollectorRegistry

from service.compact_command import run_compactor
from service.config import parse_config
from service.ingest_command import READINESS_METRICS, run_ingest_service
from service.local_kafka import free_port
from tests.ingest.e2e_support import Event, change_events, produce
from tests.service.test_ingest_command import events_config, http_get

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

NO_SAMPLE_UNTIL_IT_HAPPENS = {
    # Labelled counters get a sample at their first event; a healthy short run has none.
    "floe_ingest_commit_retries_total",
    "floe_ingest_commit_conflicts_total",
    "floe_compaction_groups_total",
    "floe_compaction_deletes_carried_over_total",
}


def dashboard_names() -> set[str]:
    dashboard = json.loads((ROOT / "deploy/grafana/floe-dashboard.json").read_text())
    exprs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            exprs.extend(v for k, v in node.items() if k in ("expr", "query", "definition") and isinstance(v, str))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(dashboard)
    assert exprs, "the dashboard has queries"
    return {name for expr in exprs for name in re.findall(r"\bfloe_\w+", expr)}


def alert_names() -> set[str]:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yaml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    return {name for expr in exprs for name in re.findall(r"\bfloe_\w+", expr)}


def exposition(text: str) -> tuple[dict[str, str], set[str]]:
    """(declared name -> type, names with a sample) of a Prometheus text page."""
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    sampled = set(re.findall(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})? \S+", text, re.M))
    return declared, sampled


def exported_names(declared: dict[str, str]) -> set[str]:
    """Every series name the declared families can carry (a histogram's three suffixes)."""
    names = set()
    for name, kind in declared.items():
        names.add(name)
        if kind == "histogram":
            names |= {name + s for s in HISTOGRAM_SUFFIXES}
        if kind == "counter" and not name.endswith("_total"):
            names.add(name + "_total")
    return names


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_dashboard_alerts_and_readiness_metrics_are_exported(spark, kafka_bootstrap, new_topic, tmp_path):
    topic, dlq = new_topic("scrape", partitions=2), new_topic("scrape-dlq")
    produce(kafka_bootstrap, topic, [*change_events(600, 100, seed=5), Event(b"1", b"{not json")])
    raw = events_config(tmp_path, kafka_bootstrap, topic,
                        table={"bad_records": "dead-letter", "dead_letter_topic": dlq},
                        compaction={"interval": "1h", "jitter": "0s",
                                    "rewrite_options": {"min-input-files": "2"}})
    raw["kafka"]["max_offsets_per_trigger"] = 200
    config = parse_config(raw)
    ingest_registry, compact_registry = CollectorRegistry(), CollectorRegistry()
    ingest_port, compact_port = free_port(), free_port()
    stop_ingest, stop_compact = threading.Event(), threading.Event()
    codes: dict[str, int] = {}
    ingest = threading.Thread(target=lambda: codes.update(ingest=run_ingest_service(
        config, stop=stop_ingest, registry=ingest_registry, port=ingest_port, spark=spark)))
    compact = threading.Thread(target=lambda: codes.update(compact=run_compactor(
        config, once=False, stop=stop_compact, registry=compact_registry, port=compact_port)))
    ingest.start()
    try:
        wait_for(lambda: (ingest_registry.get_sample_value("floe_ingest_records_read_total",
                                                           {"table": "db.events"}) or 0) >= 601, "ingest")
        compact.start()
        wait_for(lambda: compact_registry.get_sample_value(
            "floe_compaction_runs_total", {"table": "db.events", "result": "success"}) == 1, "a compaction run")
        status, ingest_page = http_get(f"http://127.0.0.1:{ingest_port}/metrics")
        assert status == 200
        status, compact_page = http_get(f"http://127.0.0.1:{compact_port}/metrics")
        assert status == 200
        ready, body = http_get(f"http://127.0.0.1:{ingest_port}/readyz")
        assert ready == 200, body
    finally:
        stop_ingest.set()
        stop_compact.set()
        ingest.join(180)
        if compact.is_alive() or compact.ident is not None:
            compact.join(180)
    assert codes == {"ingest": 3, "compact": 3}

    ingest_declared, ingest_sampled = exposition(ingest_page)
    compact_declared, compact_sampled = exposition(compact_page)
    exported = exported_names(ingest_declared) | exported_names(compact_declared)
    sampled = ingest_sampled | compact_sampled
    referenced = {
        "dashboard": dashboard_names(),
        "alerts": alert_names(),
        "/readyz": set(READINESS_METRICS),
    }
    for where, names in referenced.items():
        missing = sorted(names - exported)
        assert not missing, f"{where} refers to metrics no running service exports: {missing}"
        silent = sorted(n for n in names - sampled if _family(n) not in NO_SAMPLE_UNTIL_IT_HAPPENS)
        assert not silent, f"{where} refers to metrics with no sample after a run: {silent}"
    assert {"floe_ingest_bad_records_total", "floe_ingest_batch_duration_seconds_bucket"} <= sampled
    assert 'floe_up{component="compact"} 1.0' in compact_page and 'floe_up{component="ingest"} 1.0' in ingest_page


def _family(name: str) -> str:
    return next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
