"""Typed errors of the table format layer.

Every error that concerns a file names it, and every error that concerns a
field names the field, so that an operator can find the bad input.
"""

from __future__ import annotations

from typing import Optional


class TableError(Exception):
    """Base of every error raised by ``table``."""


class SchemaError(TableError):
    """A schema, type or field is invalid, or an evolution is not allowed."""


class ValidationError(TableError):
    """A value or argument breaks a rule of the spec."""


class MalformedFileError(TableError):
    """A metadata file, manifest, manifest list or data file cannot be parsed.

    ``path`` is the file, ``field`` the field (a dotted path) that is wrong.
    """

    def __init__(self, path: str, field: Optional[str], reason: str) -> None:
        self.path = path
        self.field = field
        self.reason = reason
        where = f"field {field!r} of {path}" if field else path
        super().__init__(f"{where}: {reason}")


class NotFoundError(TableError):
    """A snapshot, ref, schema, spec or file that was asked for does not exist."""
