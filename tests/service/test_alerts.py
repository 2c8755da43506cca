"""deploy/prometheus/: the alert rules and the Prometheus config, checked and unit-tested by promtool.

promtool comes from Debian's ``prometheus`` package; ``make promtool`` (a
step of ``make test``) installs it. The rule unit tests live in
deploy/prometheus/tests/alerts_test.yaml: every alert must fire in at least
one of them, with its labels and annotations checked, and stay silent in at
least one.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yaml"
RULE_TESTS = PROMETHEUS / "tests" / "alerts_test.yaml"
CONFIG = PROMETHEUS / "prometheus.yml"


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("promtool")
    if executable is None:
        pytest.fail("promtool is not installed: run `make promtool` (as root it installs Debian's prometheus package)")
    return subprocess.run(
        [executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def assert_succeeds(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"{' '.join(result.args)} failed:\n{result.stdout}\n{result.stderr}"


@cache
def alert_names() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


@cache
def rule_tests() -> dict[str, Any]:
    return yaml.safe_load(RULE_TESTS.read_text())


def test_alert_rules_pass_promtool_check() -> None:
    result = promtool("check", "rules", ALERTS)
    assert_succeeds(result)
    assert f"SUCCESS: {len(alert_names())} rules found" in result.stdout + result.stderr


def test_alert_rule_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS)
    assert_succeeds(result)
    assert "SUCCESS" in result.stdout + result.stderr


def test_prometheus_config_passes_promtool_check() -> None:
    result = promtool("check", "config", CONFIG)
    assert_succeeds(result)
    # the rule files resolve (relative to the config file) to alerts.yaml and are checked too
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr
    config = yaml.safe_load(CONFIG.read_text())
    assert [(CONFIG.parent / rule).resolve() for rule in config["rule_files"]] == [ALERTS.resolve()]


def test_rule_tests_load_the_alert_rules() -> None:
    assert [(RULE_TESTS.parent / f).resolve() for f in rule_tests()["rule_files"]] == [ALERTS.resolve()]


def test_every_alert_is_tested_firing_and_silent() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for test in rule_tests()["tests"]:
        for case in test.get("alert_rule_test", []):
            name = case["alertname"]
            # promtool accepts an alert name the rules do not have and then expects nothing
            assert name in alert_names(), f"{test.get('name')}: no alert {name} in alerts.yaml"
            if case.get("exp_alerts"):
                firing.add(name)
                for alert in case["exp_alerts"]:
                    assert alert.get("exp_labels", {}).get("severity"), f"{test.get('name')}: {name} labels unchecked"
                    assert set(alert.get("exp_annotations", {})) == {"summary", "description"}, (
                        f"{test.get('name')}: {name} annotations unchecked"
                    )
            else:
                silent.add(name)
    assert set(alert_names()) - firing == set(), "alerts never tested firing"
    assert set(alert_names()) - silent == set(), "alerts never tested silent"


def test_the_crash_loop_is_modelled_with_missing_samples() -> None:
    """The crash-loop tests give failed scrapes no sample (`_`) and expect FloeIngestDown."""
    crash_loops = [t for t in rule_tests()["tests"] if "crash loop" in t.get("name", "")]
    assert crash_loops
    for test in crash_loops:
        up = [s for s in test["input_series"] if s["series"].startswith("floe_up{")]
        assert up and any(v.startswith("_") for v in up[0]["values"].split()), test["name"]
        assert any(
            case["alertname"] == "FloeIngestDown" and case.get("exp_alerts") for case in test["alert_rule_test"]
        ), test["name"]
