"""runtime/spark_session.py: Spark's JVM logs the way Floe logs (log4j2 configuration)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.spark_session import _REDACT, QUIET_LOGGERS, spark_log_config

REPO = Path(__file__).resolve().parents[2]


def properties(text: str) -> dict[str, str]:
    return dict(line.split(" = ", 1) for line in text.splitlines() if line.strip())


def test_warn_by_default_info_at_debug_and_the_noise_quiet():
    quiet = properties(spark_log_config(debug=False, json_lines=False))
    assert quiet["rootLogger.level"] == "warn"
    levels = {v: quiet[k.replace(".name", ".level")] for k, v in quiet.items() if k.startswith("logger.") and k.endswith(".name")}
    assert levels == QUIET_LOGGERS
    assert quiet["appender.stderr.layout.alwaysWriteExceptions"] == "false"
    assert "%ex{short.message}" in quiet["appender.stderr.layout.pattern"], "an exception is its message only"
    assert "\\" not in _REDACT, "a .properties file would eat its backslashes"
    loud = properties(spark_log_config(debug=True, json_lines=False))
    assert loud["rootLogger.level"] == "info" and loud["appender.stderr.layout.pattern"].endswith("%n%ex")


def test_json_lines_carry_floes_keys():
    config = properties(spark_log_config(debug=False, json_lines=True))
    template = json.loads(config["appender.stderr.layout.eventTemplate"])
    assert set(template) == {"ts", "level", "logger", "message", "error"}


@pytest.mark.spark
def test_the_jvm_logs_through_the_configuration_with_secrets_masked(tmp_path):
    script = tmp_path / "spark_logs.py"
    script.write_text(
        "import sys\n"
        "from runtime.logging import configure_logging\n"
        "configure_logging('INFO', sys.stderr, 'text')\n"
        "from runtime.spark_session import build_spark_session\n"
        "spark = build_spark_session('floe-log-test')\n"
        "jvm = spark.sparkContext._jvm\n"
        "jvm.org.apache.log4j.LogManager.getLogger('org.apache.spark.Probe').warn('probe sasl.jaas.config=secret-123 end')\n"
        "jvm.org.apache.log4j.LogManager.getLogger('org.apache.spark.Probe').info('not at warn')\n"
        "jvm.org.apache.log4j.LogManager.getLogger('org.apache.spark.Probe').warn('first line\\nsecond line')\n"
        "spark.stop()\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "spark.Probe" in line]
    assert len(lines) == 2 and lines[0].endswith("WARN    spark.Probe: probe sasl.jaas.config=*** end"), done.stderr
    assert lines[1].endswith("WARN    spark.Probe: first line") and "second line" not in done.stderr
    assert "secret-123" not in done.stderr
    assert "Using Spark's default log4j profile" not in done.stderr
    assert "NativeCodeLoader" not in done.stderr and "resolves to a loopback address" not in done.stderr
