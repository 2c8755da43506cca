"""How configuration problems are reported: one ``key.path: message`` line each.

A validator only knows the value it checks, not where that value sits in the
file, so it raises :func:`invalid` with paths *relative* to that value; the
loader (:mod:`service.config.messages`) prefixes pydantic's location. The
message helpers keep the wording of recurring rules identical everywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr
from pydantic_core import PydanticCustomError

Problem = tuple[str, str]
"""(key path relative to the validated value, message); ``""`` is the value itself."""


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid configuration ({source}):\n" + "\n".join(f"  {p}" for p in problems))


def invalid(*problems: Problem) -> PydanticCustomError:
    """The error to raise from a validator; carries every problem so none is hidden behind the first."""
    summary = "; ".join(f"{path}: {message}" if path else message for path, message in problems)
    return PydanticCustomError("floe", "{summary}", {"summary": summary, "problems": list(problems)})


def raise_all(problems: Sequence[Problem]) -> None:
    """Raise :func:`invalid` when there is anything to report."""
    if problems:
        raise invalid(*problems)


def show(value: Any) -> str:
    """A short rendering of an offending value for a message; secrets stay masked."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
    elif isinstance(value, SecretStr):
        return "<redacted>"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def render_path(loc: Sequence[Any]) -> str:
    """``("tables", 0, "key")`` → ``tables[0].key``; ``("properties", "a.b")`` → ``properties['a.b']``."""
    out = ""
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.isdigit() and out):
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z0-9_\-]+", str(part)):
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def join_path(base: str, rel: str) -> str:
    """``base`` followed by the relative path ``rel`` (``key``, ``[0]`` or ``""``)."""
    if not base or not rel:
        return base or rel
    return base + rel if rel.startswith("[") else f"{base}.{rel}"


def unknown_key(allowed: Sequence[str]) -> str:
    """Unknown keys are errors (a typo must not fall back to a default), so name the accepted ones."""
    return "unknown key" + (f" (expected one of: {', '.join(allowed)})" if allowed else "")


def required_when(setting: str, value: str) -> str:
    return f"required when {setting} is {value!r} (got nothing)"


def only_used_when(setting: str, allowed: str, actual: str) -> str:
    """A key that the current ``setting`` ignores: an error, since the user expected it to matter."""
    return f"only used when {setting} is {allowed} ({setting} is {actual!r})"
