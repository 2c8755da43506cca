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
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runtime import class_archive
from runtime.jars import jar_paths
from runtime.logging import MASK, SECRET_WORDS
from runtime.signals import ignore_stop_signals

QUIET_LOGGERS = {
    # startup notes of every local run
    "org.apache.spark.util.Utils": "error",
    "org.apache.hadoop.util.NativeCodeLoader": "error",
    # "spark.sql.adaptive.enabled is not supported in streaming", once per query start
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream": "error",
    # "Query ... terminated with error" and the whole Python traceback inside it: Floe reports a
    # failed query itself, in one line (service.failures)
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution": "fatal",
    # "Current batch is falling behind", at every start (the first batch starts the Python workers): each batch
    # line gives its duration, and lag and freshness (with their alert rules) say whether a table falls behind
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor": "error",
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
    """Settings for a small local-mode Spark: no UI, few shuffle partitions, loopback only."""
    return {
        **_COMMON_CONF,
        "spark.master": f"local[{cores}]",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(cores),
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
    }


def base_spark_conf(master: str) -> dict[str, str]:
    """Floe's settings for a session on ``master``: loopback only in local mode.

    On a cluster the driver must be reachable from other hosts, so its
    address is left to Spark (this host's name) unless configured, and the
    shuffle is left at Spark's own partition count.
    """
    if not master.startswith("local"):
        return {**_COMMON_CONF, "spark.master": master}
    return {**local_spark_conf(local_cores(master)), "spark.master": master}


def local_cores(master: str) -> int:
    """The task slots of a ``local``/``local[N]``/``local[*]``/``local[N,retries]`` master."""
    inside = master.partition("[")[2].rstrip("]").split(",")[0]
    if inside == "*":
        return os.cpu_count() or 1
    return int(inside) if inside else 1


_COMMON_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
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
        fields = (
            f'"ts": "{timestamp}", "level": "%p", "logger": "spark.%c{{1}}", "message": "%enc{{{message}}}{{JSON}}"'
        )
        optional = f'%notEmpty{{, "error": "%enc{{{error}}}{{JSON}}"}}'
        if debug:
            optional += f'%notEmpty{{, "exception": "%enc{{{trace}}}{{JSON}}"}}'
        pattern = f"{{{fields}{optional}}}%n"
    else:
        tail = f"%n{trace}" if debug else "%n"
        pattern = f"{timestamp} %-7p spark.%c{{1}}: %enc{{{message}}}{{CRLF}}%notEmpty{{  error: {error}}}{tail}"
    return [
        "appender.stderr.layout.type = PatternLayout",
        f"appender.stderr.layout.pattern = {pattern}",
        "appender.stderr.layout.alwaysWriteExceptions = false",
    ]


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
    conf: Mapping[str, str] | None = None,
    extra_jars: tuple[str, ...] = (),
):  # -> pyspark.sql.SparkSession (imported lazily: pyspark is heavy)
    """A SparkSession with the Kafka source on its classpath, logging as Floe does."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    settings = {**base_spark_conf(conf.get("spark.master", "local[2]")), **conf}
    log_option = f"-Dlog4j2.configurationFile=file:{_log_config_file(*_floe_log_style())}"
    settings["spark.driver.extraJavaOptions"] = " ".join(
        part
        for part in (settings.get("spark.driver.extraJavaOptions"), log_option, class_archive.java_options())
        if part
    )
    jars = [*jar_paths("spark-kafka"), *extra_jars]
    builder = SparkSession.builder.appName(app_name).config("spark.jars", ",".join(jars))
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = _get_or_create_shielded(builder)
    _route_pyspark_loggers()
    return session


def _get_or_create_shielded(builder):  # -> pyspark.sql.SparkSession
    """``builder.getOrCreate()``, leaving this process's SIGTERM and SIGINT handlers in place.

    Two things would take a stop signal away from Floe's graceful stop
    (:func:`runtime.signals.install_stop_signals`): a SparkContext created in
    the main thread replaces the SIGINT handler with its own (it cancels every
    job and raises KeyboardInterrupt), so the session is created in a helper
    thread, where pyspark installs none; and the JVM it launches would die of
    a SIGTERM sent to Floe's process group, so it is launched ignoring both
    signals. The main thread waits, still able to take a signal meanwhile.
    """
    outcome: dict[str, object] = {}

    def create() -> None:
        try:
            with _gateway_ignoring_stop_signals():
                outcome["session"] = builder.getOrCreate()
        except BaseException as error:  # noqa: BLE001 - re-raised in the calling thread below
            outcome["error"] = error

    thread = threading.Thread(target=create, name="floe-spark-start")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["session"]


_GATEWAY_LAUNCH = threading.Lock()


@contextmanager
def _gateway_ignoring_stop_signals() -> Iterator[None]:
    """While it lasts, the JVM pyspark launches (``java_gateway.launch_gateway``) ignores SIGTERM and SIGINT.

    pyspark gives no way to add to its ``preexec_fn`` (it already ignores
    SIGINT there), so its ``Popen`` is wrapped for the launch. The JVM still
    ends when this process does: pyspark's gateway server exits when its
    stdin, a pipe from this process, closes; SIGKILL to the group ends it at once.
    """
    from pyspark import java_gateway

    with _GATEWAY_LAUNCH:
        original = java_gateway.Popen

        def popen(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **{**kwargs, "preexec_fn": _also_ignoring_stop_signals(kwargs.get("preexec_fn"))})

        java_gateway.Popen = popen  # type: ignore[misc,assignment]  # py4j's launcher, patched for this launch only
        try:
            yield
        finally:
            java_gateway.Popen = original  # type: ignore[misc]  # put back as it was


def _also_ignoring_stop_signals(preexec: Callable[[], None] | None) -> Callable[[], None]:
    def run() -> None:
        if preexec is not None:
            preexec()
        ignore_stop_signals()

    return run


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


FLOE_PACKAGES = ("table", "commit", "ingest", "compaction", "service", "runtime")
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


# What executor tasks run: Floe's writers and rewriter, and through them its dependencies.
_PROBED_MODULES = ("table.io", "commit.catalog.sql.catalog", "ingest.tasks.indexed_writer", "compaction.rewriter")


_EXECUTOR_CHECK_TAG = "floe-executor-check"


class ExecutorSetupError(RuntimeError):
    """Spark's executors cannot run Floe's code; the message says what to do."""


def ship_floe_packages(session) -> Path:
    """Send Floe's own packages to every executor, as ``spark.submit.pyFiles`` would.

    The zip holds only Floe's source; the workers must already have its
    dependencies (pyarrow, fastavro, ...) in the Python that runs the tasks.
    """
    import zipfile

    archive = _private_temp_dir() / f"floe-packages-{os.getpid()}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in FLOE_PACKAGES:
            for source in sorted((_SOURCE_ROOT / package).rglob("*.py")):
                zf.write(source, source.relative_to(_SOURCE_ROOT).as_posix())
    session.sparkContext.addPyFile(str(archive))
    return archive


def verify_executors(session, timeout_s: float = 120.0) -> list[str]:
    """Run one small task per executor slot that imports Floe; the hosts that ran them.

    Fails with :class:`ExecutorSetupError` saying how executors get Floe's code
    when an executor cannot import it, or when no executor starts in time.
    """
    context = session.sparkContext
    slots = max(context.defaultParallelism, 1)

    modules = _PROBED_MODULES

    def probe(_: object) -> tuple[str, str]:
        import importlib
        import socket

        try:
            for name in modules:
                importlib.import_module(name)
        except ImportError as missing:
            return socket.gethostname(), f"{type(missing).__name__}: {missing}"
        return socket.gethostname(), ""

    # A tag, not a job group: the tag is removed afterwards, so the caller's later jobs keep their group.
    context.addJobTag(_EXECUTOR_CHECK_TAG)
    timer = threading.Timer(timeout_s, context.cancelJobsWithTag, (_EXECUTOR_CHECK_TAG,))
    timer.start()
    try:
        results = context.parallelize(range(slots), slots).map(probe).collect()
    except Exception as error:  # noqa: BLE001 - any failure here means the executors are not usable
        raise ExecutorSetupError(
            _executor_advice(
                f"the check job failed or no executor started within {timeout_s:.0f}s ({_first_line_of(error)})"
            )
        ) from None
    finally:
        timer.cancel()
        context.removeJobTag(_EXECUTOR_CHECK_TAG)
    failures = sorted({f"{host}: {problem}" for host, problem in results if problem})
    if failures:
        raise ExecutorSetupError(_executor_advice("; ".join(failures)))
    return sorted({host for host, _ in results})


def _executor_advice(problem: str) -> str:
    return (
        f"Spark executors cannot run Floe ({problem}); use the Floe image as the executor image "
        "(Kubernetes), install Floe in the same Python on every worker (spark.pyspark.python), or set "
        "spark.ship_floe: true when the workers have Floe's dependencies (docs/spark-clusters.md)"
    )


def _first_line_of(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
