"""Pydantic validation errors rendered as Floe's problem lines, naming path, expectation and value::

    tables[0].key: required when mode is 'upsert' (got nothing)
    kafka.max_offsets_per_trigger: expected an integer, got 'ten'

Pydantic's own rendering is never shown: it can echo secret inputs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from runtime.logging import is_secret_key
from service.config.environment import EnvOverride
from service.config.introspection import keys_at
from service.config.model import FloeConfig
from service.config.problems import Problem, join_path, render_path, show, unknown_key

_TOP_LEVEL = "(top level)"

_MESSAGES: dict[str, str] = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "path_type": "expected a file path",
}
_BOUNDS = {
    "greater_than": "greater than {gt}",
    "greater_than_equal": "at least {ge}",
    "less_than": "less than {lt}",
    "less_than_equal": "at most {le}",
}
_LENGTHS = {"too_short": "at least {min_length}", "too_long": "at most {max_length}"}


def render_errors(exc: ValidationError, overrides: Sequence[EnvOverride] = ()) -> list[str]:
    """One ``path: message`` line per problem, secrets never shown, sorted by path."""
    sources = {render_path(o.path): o.variable for o in overrides}
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        for path, message in _error_lines(error):
            lines.append(f"{path}: {message}" + _env_note(path, sources))
    return sorted(dict.fromkeys(lines), key=_path_sort_key)


def _path_sort_key(line: str) -> list[Any]:
    path = line.split(": ", 1)[0]
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", path) if p]


def _env_note(path: str, sources: dict[str, str]) -> str:
    """Which variable set the value, since the file alone would not explain the problem."""
    for source_path, variable in sources.items():
        if path == source_path or path.startswith((source_path + ".", source_path + "[")):
            return f" (from {variable})"
    return ""


def _error_lines(error: Mapping[str, Any]) -> list[Problem]:
    """Floe's own errors carry several problems relative to where pydantic found them."""
    loc = tuple(error["loc"])
    if error["type"] == "floe":
        base = render_path(loc)
        return [(join_path(base, rel) or _TOP_LEVEL, message) for rel, message in error["ctx"]["problems"]]
    return [(render_path(loc) or _TOP_LEVEL, _describe(error, loc))]


def _describe(error: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return "required (got nothing)"
    if kind == "extra_forbidden":
        return unknown_key(keys_at(FloeConfig, loc[:-1]))
    secret = any(isinstance(part, str) and is_secret_key(part) for part in loc)
    got = "<redacted>" if secret else show(error.get("input"))
    if kind in _MESSAGES:
        return f"{_MESSAGES[kind]}, got {got}"
    if kind in ("literal_error", "enum"):
        return f"expected one of {ctx.get('expected')}, got {got}"
    if kind in _BOUNDS:
        return f"expected a number {_BOUNDS[kind].format(**ctx)}, got {got}"
    if kind in _LENGTHS:
        unit = "character(s)" if isinstance(error.get("input"), str) else "item(s)"
        return f"expected {_LENGTHS[kind].format(**ctx)} {unit}, got {got}"
    if kind == "value_error":
        return f"{ctx.get('error')}, got {got}"
    message = str(error.get("msg", kind))
    return f"{message[:1].lower()}{message[1:]}, got {got}"
