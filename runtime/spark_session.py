"""Builds the SparkSession that Floe's jobs run in, logging the way Floe logs.

The Kafka source jars come from the ``spark-kafka`` jar set (see
``runtime.jars``). PYSPARK_PYTHON is pinned to the interpreter running the
driver, so that executors (Python workers) see the same installed packages.

Spark's JVM logs through log4j2, not through Python. :func:`spark_log_config`
writes a log4j2 configuration that prints Spark's lines to stderr in Floe's
format (the same text or JSON line as :mod:`runtime.logging`, logger
``spark.<class>``), at WARN (INFO when Floe logs at DEBUG), with secrets
masked, an exception as its one-line message (the stack trace only at DEBUG),
and the warnings every local run prints and nobody can act on silenced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Optional

from runtime.jars import jar_paths

QUIET_LOGGERS = {
    # startup notes of every local run
    "org.apache.spark.util.Utils": "error",
    "org.apache.hadoop.util.NativeCodeLoader": "error",
    # "spark.sql.adaptive.enabled is not supported in streaming", once per query start
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream": "error",
    # "Query ... terminated with error" and the whole Python traceback inside it: Floe reports a
    # failed query itself, in one line (service.failures)
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution": "fatal",
    # "Failed to cancel job group": a stopped query's jobs have ended already
    "org.apache.spark.scheduler.DAGScheduler": "error",
    # the Kafka clients' reconnect chatter: Floe's lag probe reports an unreachable broker once per attempt
    "org.apache.kafka": "error",
    "org.sparkproject.jetty": "error",
}
# Everything from a Python traceback or the first line break on: a message (or an
# exception's message) may carry a whole Python traceback, as a failed task's does.
# The .properties file turns the two escapes into the line-break characters themselves.
_FIRST_LINE = "(?s)(?:(?:: )?Traceback [(]most recent call last[)]:|[\\r\\n]).*"
# No backslash: a .properties file would eat it.
_REDACT = "(?i)((?:password|passwd|secret|token|credential|jaas[.]config|api.?key)[A-Za-z0-9_.-]*[ ]*[=:][ ]*)[^ ,;]+"


def local_spark_conf(cores: int = 2, shuffle_partitions: int = 4) -> dict[str, str]:
    """Settings for a small local-mode Spark: no UI, few shuffle partitions."""
    return {
        "spark.master": f"local[{cores}]",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def spark_log_config(debug: bool, json_lines: bool) -> str:
    """The text of a log4j2 properties file that logs Spark's JVM the way Floe logs."""
    level = "info" if debug else "warn"
    lines = [
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.stderr.ref = stderr",
        "appender.stderr.type = Console",
        "appender.stderr.name = stderr",
        "appender.stderr.target = SYSTEM_ERR",
        *_layout(debug, json_lines),
    ]
    for index, (name, quiet) in enumerate(sorted(QUIET_LOGGERS.items())):
        lines += [f"logger.quiet{index}.name = {name}", f"logger.quiet{index}.level = {level if debug else quiet}"]
    return "\n".join(lines) + "\n"


def _layout(debug: bool, json_lines: bool) -> list[str]:
    message = f"%replace{{%replace{{%m}}{{{_REDACT}}}{{$1***}}}}{{{_FIRST_LINE}}}{{}}"
    if json_lines:
        template = {
            "ts": {"$resolver": "timestamp", "pattern": {"format": "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", "timeZone": "UTC"}},
            "level": {"$resolver": "level", "field": "name"},
            "logger": {"$resolver": "pattern", "pattern": "spark.%c{1}"},
            "message": {"$resolver": "pattern", "pattern": message},
            "error": {"$resolver": "exception", "field": "message"},
        }
        if debug:
            template["exception"] = {"$resolver": "exception", "field": "stackTrace", "stackTrace": {"stringified": True}}
        return ["appender.stderr.layout.type = JsonTemplateLayout",
                f"appender.stderr.layout.eventTemplate = {json.dumps(template)}"]
    error = f"%notEmpty{{  error: %replace{{%ex{{short.message}}}}{{{_FIRST_LINE}}}{{}}}}"
    tail = "%n%ex" if debug else "%n"
    pattern = f"%d{{yyyy-MM-dd'T'HH:mm:ss.SSS'Z'}}{{UTC}} %-7p spark.%c{{1}}: %enc{{{message}}}{{CRLF}}{error}{tail}"
    return ["appender.stderr.layout.type = PatternLayout",
            f"appender.stderr.layout.pattern = {pattern}",
            "appender.stderr.layout.alwaysWriteExceptions = false"]


def _log_config_file(debug: bool, json_lines: bool) -> Path:
    """The configuration, written once per content to the temp directory."""
    text = spark_log_config(debug, json_lines)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"floe-spark-log4j2-{digest}.properties"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    return path


def _floe_log_style() -> tuple[bool, bool]:
    """(debug, json lines) as Floe's own logging is configured in this process."""
    from runtime.logging import JsonFormatter

    root = logging.getLogger()
    json_lines = any(isinstance(getattr(h, "formatter", None), JsonFormatter) for h in root.handlers)
    return root.isEnabledFor(logging.DEBUG), json_lines


def build_spark_session(
    app_name: str,
    conf: Optional[Mapping[str, str]] = None,
    extra_jars: tuple[str, ...] = (),
):  # -> pyspark.sql.SparkSession (imported lazily: pyspark is heavy)
    """A SparkSession with the Kafka source on its classpath, logging as Floe does."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    settings = {**local_spark_conf(), **(conf or {})}
    log_option = f"-Dlog4j2.configurationFile=file:{_log_config_file(*_floe_log_style())}"
    settings["spark.driver.extraJavaOptions"] = " ".join(
        part for part in (settings.get("spark.driver.extraJavaOptions"), log_option) if part
    )
    jars = [*jar_paths("spark-kafka"), *extra_jars]
    builder = SparkSession.builder.appName(app_name).config("spark.jars", ",".join(jars))
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    _route_pyspark_loggers()
    return session


def _route_pyspark_loggers() -> None:
    """PySpark's own error loggers print JSON with full stack traces through their
    own handler; give them Floe's handler instead (they never propagate)."""
    from pyspark.logger import PySparkLogger

    from runtime.logging import floe_handlers

    handlers = floe_handlers()
    if not handlers:
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).handlers = list(handlers)
