"""Namespace and table names as the JDBC catalog stores them.

Iceberg Java's ``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` keep a
multi-level namespace as one string, its levels joined with ".". To read and
write the same rows, Floe does the same, and so must refuse a level that
itself contains "." (it could not be split back). Lengths are checked here,
before any SQL runs, because PostgreSQL enforces the VARCHAR limits of the
shared schema while SQLite silently does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from commit.errors import InvalidArgument

Namespace = tuple[str, ...]
NamespaceLike: TypeAlias = str | Sequence[str]

NAME_MAX_LENGTH = 255  # VARCHAR(255): catalog_name, table_namespace, table_name, keys
LOCATION_MAX_LENGTH = 1000  # VARCHAR(1000): metadata locations and property values
LIKE_ESCAPE = "!"


@dataclass(frozen=True)
class TableIdentifier:
    """A table's namespace (one level at least) and name."""

    namespace: Namespace
    name: str

    def __str__(self) -> str:
        return f"{namespace_to_string(self.namespace)}.{self.name}"

    @property
    def namespace_string(self) -> str:
        """The namespace as stored in ``iceberg_tables.table_namespace``."""
        return namespace_to_string(self.namespace)


TableIdentifierLike: TypeAlias = str | Sequence[str] | TableIdentifier


def to_namespace(value: NamespaceLike) -> Namespace:
    """A validated namespace from ``"a.b"`` or ``("a", "b")``."""
    if isinstance(value, str):
        _check_characters(value, "namespace")
    levels = tuple(value.split(".")) if isinstance(value, str) else tuple(value)
    if not levels:
        raise InvalidArgument("a namespace needs at least one level")
    for level in levels:
        _check_level(level, levels)
    check_name_length(namespace_to_string(levels), "namespace")
    return levels


def to_table_identifier(value: TableIdentifierLike) -> TableIdentifier:
    """A validated identifier from ``"a.b.t"``, ``("a", "b", "t")`` or an identifier."""
    if isinstance(value, TableIdentifier):
        parts: Sequence[str] = (*value.namespace, value.name)
    elif isinstance(value, str):
        _check_characters(value, "table identifier")
        parts = value.split(".")
    else:
        parts = tuple(value)
    if len(parts) < 2:
        raise InvalidArgument(f"table identifier {'.'.join(parts)!r} needs a namespace and a name")
    name = parts[-1]
    _check_level(name, parts)
    check_name_length(name, "table name")
    return TableIdentifier(to_namespace(tuple(parts[:-1])), name)


def namespace_to_string(namespace: Namespace) -> str:
    """The stored form of a namespace: its levels joined with "."."""
    return ".".join(namespace)


def namespace_from_string(text: str) -> Namespace:
    """Inverse of :func:`namespace_to_string`; "" (Java's empty namespace) is ``()``."""
    return tuple(text.split(".")) if text else ()


def like_children_pattern(namespace: Namespace) -> str:
    """A LIKE pattern (escape ``!``) matching every name strictly below ``namespace``.

    ``_`` and ``%`` are legal in names, so they are escaped; SQLite's LIKE is
    also case-insensitive, so callers must still filter the matches with
    :func:`is_at_or_below`.
    """
    text = namespace_to_string(namespace)
    for special in (LIKE_ESCAPE, "_", "%"):
        text = text.replace(special, LIKE_ESCAPE + special)
    return text + ".%"


def is_at_or_below(candidate: Namespace, namespace: Namespace) -> bool:
    """Whether ``candidate`` is ``namespace`` itself or one of its descendants."""
    return candidate[: len(namespace)] == namespace


def child_namespaces(parent: Namespace, stored: Iterable[str]) -> list[Namespace]:
    """The direct children of ``parent`` implied by stored namespace strings, sorted.

    A stored ``a.b.c`` implies the namespaces ``a`` and ``a.b``, as in Java.
    """
    depth = len(parent) + 1
    children = {
        ns[:depth] for ns in map(namespace_from_string, stored) if len(ns) >= depth and is_at_or_below(ns, parent)
    }
    return sorted(children)


def check_name_length(text: str, what: str) -> None:
    """Refuse names longer than the schema's VARCHAR(255)."""
    if len(text) > NAME_MAX_LENGTH:
        raise InvalidArgument(f"{what} {text[:40]!r}... is longer than {NAME_MAX_LENGTH} characters")


def check_location(location: str, what: str) -> None:
    """Refuse empty locations and those longer than the schema's VARCHAR(1000)."""
    if not location:
        raise InvalidArgument(f"{what} must not be empty")
    if len(location) > LOCATION_MAX_LENGTH:
        raise InvalidArgument(f"{what} {location[:60]!r}... is longer than {LOCATION_MAX_LENGTH} characters")


def _check_characters(text: str, what: str) -> None:
    """Names become directories under the warehouse: refuse what could leave it, or hide in a log.

    ``/`` and ``\\`` (path separators), ``..`` (a parent directory, or an empty
    level) and control characters are not allowed anywhere in a name.
    """
    for ch in text:
        if ch in "/\\":
            raise InvalidArgument(
                f"{what} {text!r} contains {ch!r}, which is not allowed in a name (names become directories)"
            )
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise InvalidArgument(
                f"{what} {text!r} contains the control character U+{ord(ch):04X}, which is not allowed in a name"
            )
    if ".." in text:
        raise InvalidArgument(f"{what} {text!r} contains '..', which is not allowed (levels are separated by one '.')")


def _check_level(level: str, parts: Sequence[str]) -> None:
    if not isinstance(level, str) or not level:
        raise InvalidArgument(f"name {'.'.join(map(str, parts))!r} has an empty level")
    _check_characters(level, "name level")
    if "." in level:
        raise InvalidArgument(
            f"level {level!r} of {tuple(parts)!r} contains '.', which the catalog uses to join levels"
        )
