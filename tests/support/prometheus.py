"""A real Prometheus for the fault tests: it scrapes Floe's /metrics every second and evaluates Floe's own
alert rules (deploy/prometheus/alerts.yaml) every second, so a test can ask which alerts a fault set off
and whether they cleared.

The server is Debian's ``prometheus`` package (``make promtool`` installs it with promtool). Its TSDB
lives in the test's directory; it listens on a free loopback port and dies with the test process.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest
import yaml

from service.local_kafka import free_port
from tests.support.loopback_server import LoopbackServer

ALERT_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yaml"
INSTALL_HINT = "run `make promtool` (as root it installs Debian's prometheus package, server and promtool)"


@dataclass(frozen=True)
class AlertSpan:
    """An alert active (pending or firing) from ``began`` to ``ended``, Unix seconds of its evaluations."""

    labels: dict[str, str]
    began: float
    ended: float
    fired: bool  # it reached ``firing`` (its ``for:`` ran out), not just ``pending``


class PrometheusServer(LoopbackServer):
    """``with PrometheusServer(dir, ["127.0.0.1:9464"]) as prometheus:`` scrapes those targets."""

    name = "Prometheus"
    log_name = "prometheus.log"

    def __init__(self, work_dir: Path, targets: Sequence[str]) -> None:
        super().__init__(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.targets = list(targets)
        self.port = free_port()

    def __enter__(self) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail(f"the prometheus server is not installed: {INSTALL_HINT}")
        config = self.work_dir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERT_RULES)],
            "scrape_configs": [{"job_name": "floe", "static_configs": [{"targets": self.targets}]}],
        }))
        self._launch([binary, f"--config.file={config}", f"--storage.tsdb.path={self.work_dir / 'data'}",
                      f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"])
        return self

    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/-/ready"

    def alerted(self, alert: str, since: float, until: float) -> list[AlertSpan]:
        """Each stretch in [since, until] in which ``alert`` was active, per label set, from the ``ALERTS``
        series Prometheus itself writes (so no state is missed between two looks)."""
        query = urllib.parse.urlencode({"query": f'ALERTS{{alertname="{alert}"}}', "start": f"{since:.3f}",
                                        "end": f"{until:.3f}", "step": "1"})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/query_range?{query}", timeout=30) as r:
            result = json.load(r)["data"]["result"]
        stretches: dict[tuple[tuple[str, str], ...], list[AlertSpan]] = {}
        for series in result:
            labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "alertstate")}
            key = tuple(sorted(labels.items()))
            for at in (float(t) for t, _ in series["values"]):
                stretches.setdefault(key, []).append(AlertSpan(labels, at, at, series["metric"]["alertstate"] == "firing"))
        return [span for points in stretches.values() for span in _joined(sorted(points, key=lambda s: s.began))]

    def active(self, alert: str) -> list[dict[str, str]]:
        """The label sets of ``alert`` pending or firing now."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/alerts", timeout=30) as r:
            alerts = json.load(r)["data"]["alerts"]
        return [a["labels"] for a in alerts if a["labels"].get("alertname") == alert]


def _joined(points: list[AlertSpan], gap_s: float = 5.0) -> list[AlertSpan]:
    """Points one evaluation apart as one span (a missed evaluation or two still one)."""
    spans: list[AlertSpan] = []
    for point in points:
        last = spans[-1] if spans else None
        if last is not None and point.began - last.ended <= gap_s:
            spans[-1] = AlertSpan(last.labels, last.began, point.ended, last.fired or point.fired)
        else:
            spans.append(point)
    return spans
