"""Logging for every Floe process: one line per record, secrets redacted.

Two formats (``log_format``): ``json``, one object per line
``{"ts", "level", "logger", "message", ...extra fields}``, for a container's
log collector; and ``text``, ``<ts> <LEVEL> <logger>: <message> key=value...``,
for a person at a terminal (the default when stderr is one).

Secrets can reach a log record from anywhere (a config dump, an exception
message that quotes a URI, a JAAS string), so redaction runs on the finished
record, not at the call sites: values under secret-looking keys are masked,
and so are ``user:password@`` in URIs and ``password="..."``-style pairs
inside text.

A failure is one line too: a record with an exception carries ``error``, the
cause in one line (:func:`summarize_error`: for an error that crossed Spark's
JVM, the Python exception buried in its text). The traceback is added only
when the level is DEBUG.

This module is ``runtime.logging``; absolute imports elsewhere still get the
standard library's :mod:`logging`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

MASK = "***"

# The words that make a key secret, in a mapping or in free text: regular
# expressions without backslashes (Spark's log4j2 configuration, a .properties
# file, uses them too).
SECRET_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "jaas",
    "api[_.-]?key",
    "private[_.-]?key",
    "keystore[_.-]?key",
    "authorization",
)
# Keys whose values are secrets, matched after lowercasing and turning "." and
# "-" into "_": "sasl.jaas.config", "ssl.key.password", "FLOE_CATALOG__PASSWORD".
_SECRET_KEY = re.compile("|".join(SECRET_WORDS))
# key=value pairs, and key: "value" pairs (JSON, Python reprs), in free text
# whose key is secret. An unquoted value after ":" is left alone, so that
# messages like "catalog.password: expected a string" stay readable.
_SECRET_NAME = rf"""["']?[\w.\-]*(?:{"|".join(SECRET_WORDS)})[\w.\-]*["']?"""
_SECRET_PAIR = re.compile(
    rf"""(?P<key>{_SECRET_NAME})"""
    r"""(?:(?P<sep>\s*=\s*)(?P<value>"[^"]*"|'[^']*'|[^\s,;&}\]]+)"""
    r"""|(?P<colon>\s*:\s*)(?P<quoted>"[^"]*"|'[^']*'))""",
    re.IGNORECASE,
)
# scheme://user:password@host -> scheme://user:***@host
_URI_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):(?P<password>[^@\s/]+)@")
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/\-]+=*", re.IGNORECASE)

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
_RESERVED_OUTPUT = ("ts", "level", "logger", "message", "error", "exception")
_HANDLER_MARK = "_floe_json_handler"


def is_secret_key(name: str) -> bool:
    """Whether values stored under ``name`` are secrets (case and separators ignored).

    Keys ending in ``_file`` name where a secret is kept (``password_file``),
    not the secret, so they are not secret keys.
    """
    normal = re.sub(r"[.\-\s]", "_", str(name).lower())
    return bool(_SECRET_KEY.search(normal)) and not normal.endswith("_file")


def redact_text(text: str) -> str:
    """``text`` with URI passwords, secret key=value pairs and bearer or basic credentials masked."""
    text = _URI_USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _SECRET_PAIR.sub(_mask_pair, text)
    return _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)


def _mask_pair(match: re.Match[str]) -> str:
    value = match["value"] if match["sep"] is not None else match["quoted"]
    separator = match["sep"] if match["sep"] is not None else match["colon"]
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match['key']}{separator}{quote}{MASK}{quote}"


def redact(value: Any, key: str | None = None) -> Any:
    """A copy of ``value`` (nested dicts, lists, strings) with every secret masked.

    ``key`` is the name the value is stored under; a secret key masks the
    whole value, whatever its type.
    """
    if key is not None and is_secret_key(key) and value not in (None, "", {}, []):
        return MASK
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


class RedactionFilter(logging.Filter):
    """Rewrites each record so that no handler downstream can emit a secret.

    The message is rendered with its arguments first (a secret may be an
    argument), then redacted; ``extra`` fields are redacted by key and content.
    An exception becomes its one-line summary (``record.floe_error``) and, with
    ``tracebacks``, its redacted traceback text; without, the traceback is dropped.
    """

    def __init__(self, tracebacks: bool = True) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(_safe_message(record))
        record.args = None
        for name in _extra_names(record):
            setattr(record, name, redact(getattr(record, name), name))
        if record.exc_info and record.exc_info[1] is not None:
            record.floe_error = redact_text(summarize_error(record.exc_info[1]))
            if self.tracebacks and not record.exc_text:
                record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if not self.tracebacks:
            record.exc_text = None
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        record.exc_info = None  # the summary and the redacted exc_text replace the live exception
        return True


# A line of a Python traceback's tail: ``package.module.SomeError: message``; or of a Java one's causes:
# ``Caused by: org.apache.kafka.common.errors.TopicAuthorizationException: ...``.
_EXCEPTION_LINE = re.compile(
    r"^(?:Caused by: )?(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)): (?P<text>.+)$"
)
# Exceptions that only wrap the cause on its way through Spark and py4j.
_WRAPPERS = frozenset(
    {
        "Py4JJavaError",
        "PythonException",
        "StreamingQueryException",
        "SparkException",
        "SparkRuntimeException",
        "IllegalStateException",
        "RuntimeException",
        "ExecutionException",
        "CapturedException",
        "Py4JError",
    }
)
_SUMMARY_CHARS = 500
# librdkafka's error as confluent-kafka prints it: KafkaError{code=_TRANSPORT,val=-195,str="..."}
_KAFKA_ERROR = re.compile(r'KafkaError\{code=(?P<code>\w+),val=-?\d+,str="(?P<text>.*?)"\}')


def summarize_error(error: BaseException) -> str:
    """The cause of ``error`` in one line: ``Type: message``.

    An error that crossed Spark's JVM (a failed task or streaming query)
    carries the Python traceback of its cause as text, dozens of times over;
    the first exception line in that text that is not a wrapper is the cause.
    """
    text = str(error)
    for line in text.splitlines():
        found = _EXCEPTION_LINE.match(line.strip().lstrip(": "))  # py4j writes ": java.Exception: ..."
        if found and found["name"] not in _WRAPPERS:
            return _clip(f"{found['name']}: {found['text']}")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return _clip(f"{type(error).__name__}: {first}" if first else type(error).__name__)


def _clip(text: str) -> str:
    text = _KAFKA_ERROR.sub(lambda m: f"{m['text']} ({m['code']})", text)
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def _safe_message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string must not lose the record
        return f"{record.msg!s} (unformattable args)"


def _extra_names(record: logging.LogRecord) -> list[str]:
    return [name for name in record.__dict__ if name not in _RECORD_ATTRS and not name.startswith("_")]


def _output_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of a record, redacted, under their output names."""
    fields = {}
    for name in _extra_names(record):
        if name == "floe_error":
            continue
        fields[f"extra.{name}" if name in _RESERVED_OUTPUT else name] = redact(getattr(record, name), name)
    return fields


def _record_error(record: logging.LogRecord) -> str | None:
    summary = getattr(record, "floe_error", None)
    if summary is None and record.exc_info and record.exc_info[1] is not None:
        summary = summarize_error(record.exc_info[1])
    return None if summary is None else redact_text(str(summary))


def _record_traceback(record: logging.LogRecord) -> str | None:
    text = record.exc_text or (
        "".join(traceback.format_exception(*record.exc_info)).rstrip() if record.exc_info else None
    )
    return None if not text else redact_text(text)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``extra`` fields become top-level keys.

    An extra field named like a standard output key (``ts``, ``level``, ...)
    is kept as ``extra.<name>`` instead of overwriting it. Values that JSON
    cannot carry are written as their ``str()``. The output is redacted again
    as a last line of defence, so this formatter is safe without the filter.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(_safe_message(record)),
        }
        entry.update(_output_fields(record))
        error = _record_error(record)
        if error:
            entry["error"] = error
        exception = _record_traceback(record)
        if exception:
            entry["exception"] = exception
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <message> [key=value ...] [error: ...]``, one line per record
    (the traceback, at DEBUG, on the lines after it)."""

    def format(self, record: logging.LogRecord) -> str:
        message = " | ".join(redact_text(_safe_message(record)).splitlines())  # one record, one line
        parts = [f"{_timestamp(record.created)} {record.levelname:<7} {record.name}: {message}"]
        for name, value in _output_fields(record).items():
            parts.append(f"{name}={_text_value(value)}")
        error = _record_error(record)
        if error:
            parts.append(f"error: {error}")
        line = "  ".join(parts[:1]) + ("  " + " ".join(parts[1:]) if len(parts) > 1 else "")
        exception = _record_traceback(record)
        return f"{line}\n{exception}" if exception else line


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return json.dumps(text, ensure_ascii=False) if (not text or any(c.isspace() for c in text)) else text


LogFormat = str
"""``text``, ``json``, or ``auto`` (text on a terminal, JSON otherwise)."""
LOG_FORMATS = ("auto", "text", "json")


def _timestamp(created: float) -> str:
    """RFC 3339 UTC with milliseconds, the form log stores index directly."""
    moment = datetime.fromtimestamp(created, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class LogSettingError(ValueError):
    """A log level or format Floe does not know; ``setting`` says which, for the caller to name its source."""

    def __init__(self, setting: str, value: object, allowed: tuple[str, ...]) -> None:
        self.setting, self.value, self.allowed = setting, value, allowed
        super().__init__(f"{setting}: expected one of {', '.join(allowed)}, got {value!r}")

    def reason(self) -> str:
        """The message without the setting's name: ``expected one of ..., got 'LOUD'``."""
        return f"expected one of {', '.join(self.allowed)}, got {self.value!r}"


def configure_logging(
    level: str | int = "INFO", stream: TextIO | None = None, log_format: LogFormat = "auto"
) -> logging.Handler:
    """Send every log record, redacted, to ``stream`` (default stderr) in ``log_format``.

    Tracebacks are logged only at DEBUG; otherwise a failure is its one-line
    ``error``. Replaces a handler installed by an earlier call (so
    re-configuration does not duplicate lines) and plain ``basicConfig``
    stream handlers on the root logger; other handlers (a test runner's
    capture) stay. Returns the handler.
    """
    if log_format not in LOG_FORMATS:
        raise LogSettingError("log format", log_format, LOG_FORMATS)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False) or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    target = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(target)
    setattr(handler, _HANDLER_MARK, True)
    numeric = _level(level)
    handler.addFilter(RedactionFilter(tracebacks=numeric <= logging.DEBUG))
    handler.setFormatter(TextFormatter() if _wants_text(log_format, target) else JsonFormatter())
    root.addHandler(handler)
    root.setLevel(numeric)
    for chatty in ("py4j", "confluent_kafka", "floe.librdkafka"):  # Spark's gateway, the Kafka clients
        logging.getLogger(chatty).setLevel(max(logging.WARNING, numeric))
    # py4j repeats, as an error with the whole traceback, every failure a Floe component reports itself
    logging.getLogger("py4j.clientserver").setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.CRITICAL)
    return handler


def floe_handlers() -> list[logging.Handler]:
    """The handlers :func:`configure_logging` installed on the root logger."""
    return [h for h in logging.getLogger().handlers if getattr(h, _HANDLER_MARK, False)]


def _wants_text(log_format: LogFormat, stream: TextIO) -> bool:
    if log_format != "auto":
        return log_format == "text"
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    if level.strip().upper() not in LOG_LEVELS:
        raise LogSettingError("log level", level, LOG_LEVELS)
    return int(logging.getLevelName(level.strip().upper()))
