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
import logging
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Optional

from runtime.jars import jar_paths
from runtime.logging import MASK, SECRET_WORDS

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
# (regex, replacement) pairs, applied in order; no backslash: a .properties file would eat it.
_REDACT_RULES = (
    ("(?i)((?:Bearer|Basic)[ ]+)[A-Za-z0-9._~+/=-]+", f"$1{MASK}"),  # Authorization header values
    ("([A-Za-z][A-Za-z0-9+.-]*://[^/ :@]*):[^@ /]+@", f"$1:{MASK}@"),  # scheme://user:password@host
    # a secret word's key and separator, then its value
    (f"(?i)((?:{'|'.join(SECRET_WORDS)})[A-Za-z0-9_.-]*[ ]*[=:][ ]*)(?:\"[^\"]*\"|'[^']*'|[^ ,;]+)", f"$1{MASK}"),
)


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
    """A PatternLayout for both forms: JSON lines are written by pattern so that ``error``
    appears only with an exception, as in Floe's own lines, and is redacted like ``message``."""
    timestamp = "%d{yyyy-MM-dd'T'HH:mm:ss.SSS'Z'}{UTC}"
    message = _redacted(_first_line("%m"))
    error = _redacted(_first_line("%ex{short.message}"))
    trace = _redacted("%ex")
    if json_lines:
        fields = f'"ts": "{timestamp}", "level": "%p", "logger": "spark.%c{{1}}", "message": "%enc{{{message}}}{{JSON}}"'
        optional = f'%notEmpty{{, "error": "%enc{{{error}}}{{JSON}}"}}'
        if debug:
            optional += f'%notEmpty{{, "exception": "%enc{{{trace}}}{{JSON}}"}}'
        pattern = f"{{{fields}{optional}}}%n"
    else:
        tail = f"%n{trace}" if debug else "%n"
        pattern = f"{timestamp} %-7p spark.%c{{1}}: %enc{{{message}}}{{CRLF}}%notEmpty{{  error: {error}}}{tail}"
    return ["appender.stderr.layout.type = PatternLayout",
            f"appender.stderr.layout.pattern = {pattern}",
            "appender.stderr.layout.alwaysWriteExceptions = false"]


def _redacted(pattern: str) -> str:
    for regex, replacement in _REDACT_RULES:
        pattern = f"%replace{{{pattern}}}{{{regex}}}{{{replacement}}}"
    return pattern


def _first_line(pattern: str) -> str:
    return f"%replace{{{pattern}}}{{{_FIRST_LINE}}}{{}}"


def _log_config_file(debug: bool, json_lines: bool) -> Path:
    """The configuration, written once per content into this user's own directory.

    A shared, predictable name in the temp directory would let another user
    place a configuration of their own there first; the directory is this
    user's, mode 0700, and checked to be so.
    """
    text = spark_log_config(debug, json_lines)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = _private_temp_dir() / f"spark-log4j2-{digest}.properties"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    return path


def _private_temp_dir() -> Path:
    """``<temp>/floe-<uid>``: created 0700 by this user, or refused if someone else owns it."""
    directory = Path(tempfile.gettempdir()) / f"floe-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    status = directory.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid() or status.st_mode & 0o077:
        raise PermissionError(
            f"{directory}: Floe keeps Spark's log configuration here, but it is not a directory "
            "that only this user can write; remove it, or point TMPDIR elsewhere"
        )
    return directory


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
