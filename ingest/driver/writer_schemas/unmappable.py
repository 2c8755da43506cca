"""The one error of mapping a writer schema, in any format, to Iceberg columns."""

from __future__ import annotations


class UnmappableSchema(ValueError):
    """A writer schema (Avro, JSON Schema...) with a type Iceberg cannot hold; ``path`` is the field's dotted path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"field {path or '(value)'}: {reason}")
        self.path = path
        self.reason = reason
