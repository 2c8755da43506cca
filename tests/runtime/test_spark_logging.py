"""runtime/spark_session.py: Spark's JVM logs the way Floe logs (log4j2 configuration)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runtime.spark_session import _REDACT_RULES, QUIET_LOGGERS, _log_config_file, spark_log_config

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
    assert not any("\\" in rule for rules in _REDACT_RULES for rule in rules), "a .properties file eats backslashes"
    loud = properties(spark_log_config(debug=True, json_lines=False))
    loud_pattern = loud["appender.stderr.layout.pattern"]
    assert loud["rootLogger.level"] == "info" and "%ex}" in loud_pattern[loud_pattern.rindex("%n"):]


def test_json_lines_carry_floes_keys_and_error_only_with_an_exception():
    pattern = properties(spark_log_config(debug=False, json_lines=True))["appender.stderr.layout.pattern"]
    keys = re.findall(r'"(\w+)": ', pattern)
    assert keys == ["ts", "level", "logger", "message", "error"]
    assert '%notEmpty{, "error": ' in pattern and "exception" not in pattern
    assert '"exception": ' in properties(spark_log_config(debug=True, json_lines=True))["appender.stderr.layout.pattern"]


def jvm_redacted(text: str) -> str:
    """What the log4j2 rules make of ``text`` (Java's and Python's regex syntax agree on them)."""
    for regex, replacement in _REDACT_RULES:
        text = re.sub(regex, replacement.replace("$1", r"\1"), text)
    return text


@pytest.mark.parametrize("text, expected", [
    ("sasl.jaas.config=secret-1 end", "sasl.jaas.config=*** end"),
    ("ssl.keystore.key: secret-2, next", "ssl.keystore.key: ***, next"),
    ('s3.secret-key = "secret 3" end', 's3.secret-key = *** end'),
    ("api-key=secret-4", "api-key=***"),
    ("connect to postgresql://floe:secret-5@db:5432/x", "connect to postgresql://floe:***@db:5432/x"),
    ("Authorization: Basic c2VjcmV0LTY=", "Authorization: *** ***"),
    ("header Bearer secret-7 sent", "header Bearer *** sent"),
    ("a plain line about 5 partitions", "a plain line about 5 partitions"),
])
def test_the_jvm_rules_mask_what_floe_masks(text: str, expected: str) -> None:
    assert jvm_redacted(text) == expected


def test_the_configuration_lives_in_a_directory_only_this_user_can_write(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = _log_config_file(debug=False, json_lines=True)
    assert path.parent == tmp_path / f"floe-{os.getuid()}" and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.parent.chmod(0o777)
    with pytest.raises(PermissionError, match="not a directory that only this user can write"):
        _log_config_file(debug=False, json_lines=True)


_PROBE_SCRIPT = """\
import sys
from runtime.logging import configure_logging
configure_logging('INFO', sys.stderr, sys.argv[1])
from runtime.spark_session import build_spark_session
spark = build_spark_session('floe-log-test')
jvm = spark.sparkContext._jvm
probe = jvm.org.apache.log4j.LogManager.getLogger('org.apache.spark.Probe')
probe.warn('probe sasl.jaas.config=secret-123 end')
probe.info('not at warn')
probe.warn('first line\\nsecond line')
probe.warn('login failed', jvm.java.lang.RuntimeException('bad ssl.key.password=secret-456\\nthird line'))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_jvm_logs_through_the_configuration_with_secrets_masked(tmp_path, log_format):
    script = tmp_path / "spark_logs.py"
    script.write_text(_PROBE_SCRIPT)
    done = subprocess.run([sys.executable, str(script), log_format], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "spark.Probe" in line]
    if log_format == "json":
        entries = [json.loads(line) for line in lines]
        assert [(e["level"], e["message"], e.get("error")) for e in entries] == [
            ("WARN", "probe sasl.jaas.config=*** end", None),
            ("WARN", "first line", None),
            ("WARN", "login failed", "bad ssl.key.password=***"),
        ], done.stderr
    else:
        assert [line.split(" ", 1)[1] for line in lines] == [
            "WARN    spark.Probe: probe sasl.jaas.config=*** end",
            "WARN    spark.Probe: first line",
            "WARN    spark.Probe: login failed  error: bad ssl.key.password=***",
        ], done.stderr
    assert "second line" not in done.stderr and "third line" not in done.stderr
    assert "secret-123" not in done.stderr and "secret-456" not in done.stderr
    assert "Using Spark's default log4j profile" not in done.stderr
    assert "NativeCodeLoader" not in done.stderr and "resolves to a loopback address" not in done.stderr
