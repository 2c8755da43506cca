"""Structured JSON-lines logging with secret redaction.

A container's log collector parses one JSON object per line, so every record
becomes ``{"ts", "level", "logger", "message", ...extra fields}``. Secrets can
reach a log record from anywhere (a config dump, an exception message that
quotes a URI, a JAAS string), so redaction runs on the finished record, not at
the call sites: values under secret-looking keys are masked, and so are
``user:password@`` in URIs and ``password="..."``-style pairs inside text.

This module is ``runtime.logging``; absolute imports elsewhere still get the
standard library's :mod:`logging`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from datetime import datetime, timezone
from typing import Any, Mapping, Optional, TextIO, Union

MASK = "***"

# Keys whose values are secrets, matched after lowercasing and turning "." and
# "-" into "_": "sasl.jaas.config", "ssl.key.password", "FLOE_CATALOG__PASSWORD".
_SECRET_KEY = re.compile(
    r"(password|passwd|passphrase|secret|token|credential|jaas|api_?key|private_?key|keystore_key|authorization)"
)
# key=value pairs, and key: "value" pairs (JSON, Python reprs), in free text
# whose key is secret. An unquoted value after ":" is left alone, so that
# messages like "catalog.password: expected a string" stay readable.
_SECRET_NAME = r"""["']?[\w.\-]*(?:password|passwd|passphrase|secret|token|credential|api[_\-.]?key|private[_\-.]?key)[\w.\-]*["']?"""
_SECRET_PAIR = re.compile(
    rf"""(?P<key>{_SECRET_NAME})"""
    r"""(?:(?P<sep>\s*=\s*)(?P<value>"[^"]*"|'[^']*'|[^\s,;&}\]]+)"""
    r"""|(?P<colon>\s*:\s*)(?P<quoted>"[^"]*"|'[^']*'))""",
    re.IGNORECASE,
)
# scheme://user:password@host -> scheme://user:***@host
_URI_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):(?P<password>[^@\s/]+)@")
_BEARER = re.compile(r"(?P<head>\bBearer\s+)[A-Za-z0-9._~+/\-]+=*", re.IGNORECASE)

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
_RESERVED_OUTPUT = ("ts", "level", "logger", "message", "exception")
_HANDLER_MARK = "_floe_json_handler"


def is_secret_key(name: str) -> bool:
    """Whether values stored under ``name`` are secrets (case and separators ignored).

    Keys ending in ``_file`` name where a secret is kept (``password_file``),
    not the secret, so they are not secret keys.
    """
    normal = re.sub(r"[.\-\s]", "_", str(name).lower())
    return bool(_SECRET_KEY.search(normal)) and not normal.endswith("_file")


def redact_text(text: str) -> str:
    """``text`` with URI passwords, secret key=value pairs and bearer tokens masked."""
    text = _URI_USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _SECRET_PAIR.sub(_mask_pair, text)
    return _BEARER.sub(lambda m: f"{m['head']}{MASK}", text)


def _mask_pair(match: re.Match[str]) -> str:
    value = match["value"] if match["sep"] is not None else match["quoted"]
    separator = match["sep"] if match["sep"] is not None else match["colon"]
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match['key']}{separator}{quote}{MASK}{quote}"


def redact(value: Any, key: Optional[str] = None) -> Any:
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
    argument), then redacted; ``extra`` fields are redacted by key and content;
    exception text is rendered and redacted too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(_safe_message(record))
        record.args = None
        for name in _extra_names(record):
            setattr(record, name, redact(getattr(record, name), name))
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        record.exc_info = None  # the redacted exc_text replaces the live exception
        return True


def _safe_message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a bad format string must not lose the record
        return f"{record.msg!s} (unformattable args)"


def _extra_names(record: logging.LogRecord) -> list[str]:
    return [name for name in record.__dict__ if name not in _RECORD_ATTRS and not name.startswith("_")]


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
        for name in _extra_names(record):
            out = f"extra.{name}" if name in _RESERVED_OUTPUT else name
            entry[out] = redact(getattr(record, name), name)
        exception = record.exc_text or (
            "".join(traceback.format_exception(*record.exc_info)).rstrip() if record.exc_info else None
        )
        if exception:
            entry["exception"] = redact_text(exception)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _timestamp(created: float) -> str:
    """RFC 3339 UTC with milliseconds, the form log stores index directly."""
    moment = datetime.fromtimestamp(created, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def configure_logging(level: Union[str, int] = "INFO", stream: Optional[TextIO] = None) -> logging.Handler:
    """Send every log record, redacted, as JSON lines to ``stream`` (default stderr).

    Replaces a handler installed by an earlier call (so re-configuration does
    not duplicate lines) and plain ``basicConfig`` stream handlers on the root
    logger; other handlers (a test runner's capture) stay. Returns the handler.
    """
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False) or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(RedactionFilter())
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(_level(level))
    logging.getLogger("py4j").setLevel(max(logging.WARNING, root.level))  # Spark's gateway chatter
    return handler


def _level(level: Union[str, int]) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ValueError(f"log level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {level!r}")
    return value
