"""``FLOE_*`` environment overrides, so a deployment can inject secrets and per-environment values.

A variable ``FLOE_<PATH>`` overrides the key at ``<PATH>``: the path is
lower-cased, ``__`` (double underscore) separates levels, and a number
selects a list item: ``FLOE_KAFKA__BOOTSTRAP_SERVERS``,
``FLOE_CATALOG__PASSWORD``, ``FLOE_TABLES__0__MODE``. Values are strings,
converted by the model's lax rules (``"10"`` → 10, ``"true"`` → true);
list-of-string keys accept a comma-separated string. Overrides change or add
keys and change list items; they cannot add list items.

A variable without ``__`` is an override only when it names a top-level key
(``FLOE_CHECKPOINT_LOCATION``); other ``FLOE_*`` variables, like
``FLOE_JARS_DIR``, belong to other parts of Floe and are ignored here. Map
keys containing dots (Kafka or table properties) cannot be set this way.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from service.config.model import FloeConfig
from service.config.problems import ConfigError, render_path

ENV_PREFIX = "FLOE_"
ENV_NESTING = "__"


class EnvOverride(NamedTuple):
    variable: str
    path: tuple[str, ...]
    value: str


def env_overrides(environ: Mapping[str, str]) -> list[EnvOverride]:
    """The ``FLOE_*`` variables that override config keys (see the module docstring)."""
    top_level = set(FloeConfig.model_fields)
    found = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        rest = variable[len(ENV_PREFIX) :].lower()
        if ENV_NESTING not in rest and rest not in top_level:
            continue  # FLOE_JARS_DIR and friends: not configuration keys
        found.append(EnvOverride(variable, tuple(rest.split(ENV_NESTING)), environ[variable]))
    return found


def apply_env_overrides(data: dict[str, Any], overrides: Sequence[EnvOverride]) -> dict[str, Any]:
    """A copy of ``data`` with each override set; ConfigError when a path cannot be followed."""
    data = copy.deepcopy(data)
    problems = []
    for override in overrides:
        problem = _set_path(data, override)
        if problem:
            problems.append(f"{override.variable}: {problem}")
    if problems:
        raise ConfigError("environment", problems)
    return data


def _set_path(data: dict[str, Any], override: EnvOverride) -> str | None:
    """Set ``override.value`` at its path in ``data``; or why the path cannot be followed."""
    path = override.path
    if any(not part for part in path):
        return f"empty key segment in {override.variable!r} (use single '__' between keys)"
    node: Any = data
    for depth in range(len(path)):
        index, problem = _slot(node, path, depth)
        if problem is not None:
            return problem
        if depth == len(path) - 1:
            node[index] = override.value
        else:
            node = node[index]
    return None


def _slot(node: Any, path: tuple[str, ...], depth: int) -> tuple[Any, str | None]:
    """The index of ``path[depth]`` in ``node`` (adding a missing section on the way); or why there is none."""
    part, where = path[depth], render_path(path[: depth + 1])
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            return None, f"{where}: no such list item (the list has {len(node)} items)"
        return int(part), None
    if not isinstance(node, dict):
        return None, f"{render_path(path[:depth])}: is a value, not a section"
    if depth < len(path) - 1 and not isinstance(node.get(part), (dict, list)):
        if node.get(part) is not None:
            return None, f"{where}: is a value, not a section"
        if path[depth + 1].isdigit():
            return None, f"{where}: no such list in the file (an override can change list items, not add them)"
        node[part] = {}
    return part, None
