"""Typed errors of the catalog and the commit path.

Every message names the table or namespace and the reason, so an operator can
act on it without a stack trace. The commit errors tell a caller exactly what
it may do next: :class:`CommitConflict` means reload and retry,
:class:`CommitStateUnknown` means reload and *check* (the swap may have
happened), and never anything in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from table.properties import Property, PropertyError

T = TypeVar("T")


class CatalogError(Exception):
    """Base of every error raised by the catalog."""


class InvalidArgument(CatalogError, ValueError):
    """A name, location or property breaks a rule of the catalog."""


def commit_property(prop: Property[T], properties: Mapping[str, str]) -> T:
    """A table property the commit path reads; a malformed value is an
    :class:`InvalidArgument` that names the property, the value and the rule."""
    try:
        return prop.read(properties)
    except PropertyError as error:
        raise InvalidArgument(str(error)) from None


class CatalogDatabaseError(CatalogError):
    """The catalog database failed or could not be reached.

    ``operation`` names what was being done (and on which table or namespace);
    ``reason`` is the database's own message. URIs in it never hold a password.
    """

    def __init__(self, operation: str, reason: str) -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"catalog database error during {operation}: {reason}")


class NoSuchCatalog(CatalogError):
    """A catalog that must already exist (to be inspected, say) is not there."""

    def __init__(self, display_uri: str, reason: str) -> None:
        self.display_uri = display_uri
        super().__init__(f"no Floe catalog at {display_uri}: {reason}")


class NoSuchNamespace(CatalogError):
    """The namespace does not exist."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(f"namespace {namespace!r} does not exist")


class NamespaceAlreadyExists(CatalogError):
    """A namespace of that name already exists (perhaps only through a child)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(f"namespace {namespace!r} already exists")


class NamespaceNotEmpty(CatalogError):
    """The namespace still holds tables, views or child namespaces."""

    def __init__(self, namespace: str, reason: str) -> None:
        self.namespace = namespace
        super().__init__(f"namespace {namespace!r} is not empty: {reason}")


class NoSuchTable(CatalogError):
    """The table does not exist in the catalog."""

    def __init__(self, table: str, reason: str = "it is not in the catalog") -> None:
        self.table = table
        super().__init__(f"table {table!r} does not exist: {reason}")


class TableAlreadyExists(CatalogError):
    """A table or view of that name already exists."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(f"table {table!r} already exists (as a table or a view)")


class CommitFailed(CatalogError):
    """A commit did not (or may not have) moved the table's metadata pointer."""

    def __init__(self, table: str, message: str) -> None:
        self.table = table
        super().__init__(message)


class CommitConflict(CommitFailed):
    """Another writer moved the pointer first; nothing was changed.

    ``current_location`` is where the pointer is now, so the caller can rebase
    on it without guessing.
    """

    def __init__(self, table: str, expected_location: str, current_location: str | None) -> None:
        self.expected_location = expected_location
        self.current_location = current_location
        super().__init__(
            table,
            f"commit to table {table!r} conflicts: expected metadata {expected_location!r}, "
            f"but the catalog now points to {current_location!r}",
        )


class CommitStateUnknown(CommitFailed):
    """The database failed during or after the swap; it may or may not have happened.

    The caller must reload the pointer and compare it with ``new_location``
    before doing anything else; in particular it must not delete the new
    metadata file, which may now be the table's current metadata.
    """

    def __init__(self, table: str, expected_location: str, new_location: str, reason: str) -> None:
        self.expected_location = expected_location
        self.new_location = new_location
        super().__init__(
            table,
            f"commit to table {table!r} ({expected_location!r} -> {new_location!r}) has an unknown outcome: {reason}",
        )


class CommitNotApplied(CommitFailed):
    """The catalog could not report the outcome, and a reload proved the commit did not land.

    The files the commit wrote have been deleted; the table is as it was.
    The caller may start the operation again from the start.
    """
