"""Value types shared by the config sections, and the base class of every section.

They accept what operators write and what environment overrides produce
(always strings): durations like ``1h30m``, comma-separated lists, YAML
scalars in property maps, paths relative to the config file.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainSerializer, ValidationInfo

from ingest.tasks.routing import route_text
from service.config.problems import invalid, show


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, and values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


def _upper_cased(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


UpperCased = BeforeValidator(_upper_cased)
"""For upper-case choices (``INFO``, ``SASL_SSL``): any case is accepted, so ``info`` is not an error."""

# ----------------------------------------------------------------------------- durations

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HINT = "a duration like '500ms', '60s', '5m', '1h30m', '3d' or a number of seconds"


def parse_duration(value: Any) -> timedelta:
    """``"1h30m"``, ``"60s"``, ``90`` (seconds) → timedelta; never negative."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*)+", value):
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value))
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", value):
        seconds = float(value)
    else:
        raise invalid(("", f"expected {_DURATION_HINT}, got {show(value)}"))
    if seconds < 0:
        raise invalid(("", f"expected a duration that is not negative, got {show(value)}"))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact form: ``timedelta(hours=1, minutes=30)`` → ``"1h30m"``."""
    millis = round(value.total_seconds() * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _positive_duration(value: timedelta) -> timedelta:
    if value.total_seconds() <= 0:
        raise invalid(("", f"expected a duration greater than 0, got {format_duration(value)!r}"))
    return value


NonNegativeDuration = Annotated[
    timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration, return_type=str)
]
"""A duration that may be zero; dumped in the form it is written in."""
Duration = Annotated[NonNegativeDuration, AfterValidator(_positive_duration)]
"""A positive duration: ``60s``, ``5m``, ``1h30m``, ``3d``, or seconds."""

# ----------------------------------------------------------------------------- lists and properties


def comma_list(value: Any) -> Any:
    """``"a,b"`` → ``["a", "b"]`` for list-of-string keys (environment overrides are strings)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _stringify(value: Any) -> Any:
    """Property values as Iceberg and Kafka want them: strings (YAML ``true`` → ``"true"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _route_value(value: Any) -> Any:
    """A route value as ingest matches it (YAML ``5`` → ``"5"``, ``true`` → ``"true"``); anything else is left
    for the string check to refuse (records' floats route nowhere)."""
    text = route_text(value)
    return value if text is None else text


StringList = Annotated[list[str], BeforeValidator(comma_list)]
RouteValues = Annotated[list[Annotated[str, BeforeValidator(_route_value)]], BeforeValidator(comma_list)]
Properties = dict[str, Annotated[str, BeforeValidator(_stringify)]]

# ----------------------------------------------------------------------------- paths and names


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Relative to the config file's directory; checked to exist when loading asks for it."""
    context = info.context or {}
    base = context.get("base_dir")
    path = value if value.is_absolute() or base is None else Path(base) / value
    if context.get("check_files") and not path.exists():
        raise invalid(("", f"file not found: {str(path)!r}"))
    return path


ConfigPath = Annotated[Path, AfterValidator(_resolve_path), PlainSerializer(str, return_type=str)]


def _location(value: str) -> str:
    """Warehouse and checkpoint locations: an absolute path or a URI, never relative."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", value) or value.startswith("/"):
        return value.rstrip("/") or "/"
    raise invalid(("", f"expected an absolute path or a URI like s3://bucket/path, got {show(value)}"))


Location = Annotated[str, AfterValidator(_location)]

_TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")


def _topic_name(value: str) -> str:
    if not _TOPIC.match(value):
        raise invalid(("", f"expected a Kafka topic name (letters, digits, '.', '_', '-'), got {show(value)}"))
    return value


TopicName = Annotated[str, AfterValidator(_topic_name)]
