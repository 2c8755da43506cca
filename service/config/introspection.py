"""Walking the model tree by its type annotations.

Both the "unknown key" hints and the config reference need the section model
behind a field, which is wrapped in ``Annotated``, ``Optional`` and lists.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional down to the type that holds keys."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = next((a for a in args if _holds_keys(a)), args[0])
        else:
            return annotation


def is_model(annotation: Any) -> bool:
    """Whether ``annotation`` is (once unwrapped) a section model."""
    inner = unwrap(annotation)
    return isinstance(inner, type) and issubclass(inner, BaseModel)


def key_of(name: str, info: FieldInfo) -> str:
    """The key a field is written with in the file (its alias, if any)."""
    return info.alias or name


def keys_at(root: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys the model at ``loc`` below ``root`` accepts; empty when ``loc`` is not a model."""
    current: Any = root
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model = unwrap(current)
    return [key_of(name, info) for name, info in model.model_fields.items()] if is_model(model) else []


def _holds_keys(annotation: Any) -> bool:
    return typing.get_origin(unwrap(annotation)) in (list, dict) or is_model(annotation)


def _step(annotation: Any, part: Any) -> Any:
    """The annotation one key or index below ``annotation``; None when there is none."""
    inner = unwrap(annotation)
    origin = typing.get_origin(inner)
    if is_model(inner) and isinstance(part, str):
        by_key = {key_of(name, info): info for name, info in inner.model_fields.items()}
        return by_key[part].annotation if part in by_key else None
    if origin is list and isinstance(part, int):
        return typing.get_args(inner)[0]
    if origin is dict:
        return typing.get_args(inner)[1]
    return None
