"""The Markdown reference of every config key, generated from the models so it cannot drift."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from service.config.fields import format_duration, parse_duration
from service.config.introspection import is_model, key_of, unwrap
from service.config.model import FloeConfig

Row = tuple[str, str, str, str]  # key path, type, default, description

_SIMPLE_NAMES = {
    str: "string",
    int: "integer",
    bool: "boolean",
    float: "number",
    Path: "file path",
    SecretStr: "secret string",
}


def render_config_reference() -> str:
    """A Markdown table of every key: path, type, default, description (for the README)."""
    lines = [
        "| key | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{path}` | {kind} | {default} | {text} |" for path, kind, default, text in _reference_rows(FloeConfig, "")
    ]
    return "\n".join(lines) + "\n"


def _reference_rows(model: type[BaseModel], prefix: str) -> Iterator[Row]:
    """A row per key, sections followed by their own keys (``tables[].mode`` for list items)."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{key_of(name, info)}"
        inner = unwrap(info.annotation)
        description = _cell(info.description or "")
        if is_model(inner):
            default = "unset" if info.default is None else _default_text(info, section=True)
            yield path, "section", default, description
            yield from _reference_rows(inner, f"{path}.")
        elif typing.get_origin(inner) is list and is_model(typing.get_args(inner)[0]):
            item = unwrap(typing.get_args(inner)[0])
            kind = f"list of {item.__name__.removesuffix('Config').lower() or 'item'}"
            yield path, kind, _default_text(info), description
            yield from _reference_rows(item, f"{path}[].")
        else:
            yield path, _cell(_type_name(info)), _default_text(info), description


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type_name(info: FieldInfo) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "type_name" in extra:
        return str(extra["type_name"])
    return _annotation_name(info.annotation, info.metadata)


def _annotation_name(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    if annotation is timedelta or any(isinstance(m, BeforeValidator) and m.func is parse_duration for m in metadata):
        return "duration"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _annotation_name(args[0], [*metadata, *args[1:]])
    if origin in (Union, types.UnionType):
        return " or ".join(_annotation_name(a) for a in args if a is not type(None))
    if origin is Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_annotation_name(args[0])}"
    if origin is dict:
        return f"map of {_annotation_name(args[0])} to {_annotation_name(args[1])}"
    return _SIMPLE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default_text(info: FieldInfo, section: bool = False) -> str:
    if info.is_required():
        return "**required**"
    if section:
        return ""
    value = info.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    if isinstance(value, (list, dict)) and not value:
        return "empty"
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"
