"""Reading a config: strict YAML, then ``FLOE_*`` overrides, then validation of the whole tree.

Every problem surfaces as one :class:`ConfigError` before any work starts, so
an operator fixes them all in one round instead of one per restart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from service.config.environment import apply_env_overrides, env_overrides
from service.config.messages import render_errors
from service.config.model import FloeConfig
from service.config.problems import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """YAML loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _read_yaml(path: Path) -> dict[str, Any]:
    """The file's top-level mapping (``{}`` when empty); ConfigError naming the line when it is not one."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the config file: {exc.strerror or exc}"]) from None
    data = _parse_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), [f"expected a mapping of sections at the top level, got {type(data).__name__}"])
    return data


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(source, [f"{where}{problem}"]) from None


def load_config(
    path: str | os.PathLike[str],
    environ: Mapping[str, str] = os.environ,
    *,
    check_files: bool = True,
) -> FloeConfig:
    """Read ``path``, apply ``FLOE_*`` overrides from ``environ``, validate.

    Raises :class:`ConfigError` with one line per problem. ``check_files``
    also requires every referenced file (secrets, Avro schemas) to exist, which
    is what ``floe check`` inside the container wants; pass False to check a
    config away from its deployment.
    """
    path = Path(path)
    overrides = env_overrides(environ)
    data = apply_env_overrides(_read_yaml(path), overrides)
    context = {"base_dir": path.resolve().parent, "check_files": check_files}
    try:
        return FloeConfig.model_validate(data, context=context)
    except ValidationError as exc:
        # "from None": the pydantic error's own rendering could show secret inputs.
        raise ConfigError(str(path), render_errors(exc, overrides)) from None


def parse_config(data: Mapping[str, Any], *, base_dir: Path | None = None) -> FloeConfig:
    """Validate an already-parsed mapping (tests, embedded demo defaults); ConfigError on problems."""
    try:
        return FloeConfig.model_validate(dict(data), context={"base_dir": base_dir, "check_files": False})
    except ValidationError as exc:
        raise ConfigError("mapping", render_errors(exc, [])) from None
