"""Typed errors of the table format layer.

Every error that concerns a file names it, and every error that concerns a
field names the field, so that an operator can find the bad input.
"""

from __future__ import annotations


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

    def __init__(self, path: str, field: str | None, reason: str) -> None:
        self.path = path
        self.field = field
        self.reason = reason
        where = f"field {field!r} of {path}" if field else path
        super().__init__(f"{where}: {reason}")


ROOT_FIELD = "(root)"
"""The ``field`` of a :class:`JsonFieldError` about the whole object."""


class JsonFieldError(TableError):
    """A JSON object is invalid at ``field``, a dotted path inside it.

    The path is kept apart from the reason so that the parser of an enclosing
    object can root it there (:meth:`field_within`), and the final error names
    the full location, e.g. ``partition-specs[0].fields[2].transform``.
    ``subject`` names the kind of object in the message.
    """

    subject = "JSON object"

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{self.subject} {field}: {reason}")

    def field_within(self, at: str) -> str:
        """This error's field as a path inside the object found at ``at``."""
        if not at:
            return self.field
        return at if self.field == ROOT_FIELD else f"{at}.{self.field}"


class NotFoundError(TableError):
    """A snapshot, ref, schema, spec or file that was asked for does not exist."""
