"""A table whose columns follow a registry subject's versions: at start-up, and before every batch.

Producers register a schema before they write with it, so by the time a batch's offsets are planned every
writer schema in it is a version of its subject: asking for the subject's versions before the batch is
written finds them all. Each new version is folded into the table's schema (:mod:`.fold`); one the table
cannot take is refused, and its records go to the dead letters with the reason (the decoder is told).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ingest.driver.writer_schemas.avro_types import avro_struct
from ingest.driver.writer_schemas.fold import Folded, WriterSchemaRefused, first_schema, fold
from ingest.driver.writer_schemas.json_schema_types import json_schema_struct
from ingest.driver.writer_schemas.protobuf_types import protobuf_struct
from ingest.driver.writer_schemas.unmappable import UnmappableSchema
from ingest.tasks.decoding import ConfluentFormat, SchemaRegistryClient
from ingest.tasks.decoding.registry import RegisteredSchema, SubjectVersion
from table.schema import Schema
from table.types import StructType

SCHEMA_CHANGE = "floe.schema-change"
"""Snapshot summary entry: the writer schema versions (ids) that changed the table before this snapshot, and how."""


@dataclass(frozen=True)
class VersionFolded:
    """What one version did to the table: its changes, or why it was refused."""

    version: SubjectVersion
    changes: str = ""
    refused: str = ""

    def note(self) -> str:
        """``schema id 7 (version 3 of orders-value): add column note (string)``."""
        where = f"schema id {self.version.schema_id} (version {self.version.version} of {self.version.subject})"
        return f"{where} refused: {self.refused}" if self.refused else f"{where}: {self.changes}"


@dataclass(frozen=True)
class SubjectFold:
    """The table's schema after some versions, and what each did."""

    folded: Folded | None
    versions: tuple[VersionFolded, ...]

    @property
    def changed(self) -> tuple[VersionFolded, ...]:
        return tuple(v for v in self.versions if v.changes and v.changes != "no change")

    def taken_ids(self) -> tuple[int, ...]:
        return tuple(v.version.schema_id for v in self.versions if not v.refused)

    def refused_ids(self) -> tuple[tuple[int, str], ...]:
        """Each refused schema id with the reason its records carry to the dead letters."""
        return tuple((v.version.schema_id, v.note()) for v in self.versions if v.refused)


def fold_versions(start: Folded | None, versions: Sequence[SubjectVersion], key: Sequence[str]) -> SubjectFold:
    """``start`` (None: a table not created yet) folded with each version in turn. Pure."""
    current: Folded | None = start
    done: list[VersionFolded] = []
    for version in versions:
        try:
            writer = writer_struct(version.schema)
            current = (
                first_schema(writer, key, version.schema_id)
                if current is None
                else fold(current.schema, current.last_column_id, writer, version.schema_id)
            )
            done.append(VersionFolded(version, changes="created" if start is None and not done else current.summary()))
        except UnmappableSchema as exc:
            done.append(VersionFolded(version, refused=str(exc)))
        except WriterSchemaRefused as exc:
            done.append(VersionFolded(version, refused=exc.detail))
    return SubjectFold(current, tuple(done))


def writer_struct(schema: RegisteredSchema) -> StructType:
    """The columns of one registered writer schema, by its kind."""
    if schema.kind == "AVRO":
        return avro_struct(_parsed(schema.text))
    if schema.kind == "JSON":
        return json_schema_struct(_parsed(schema.text))
    if schema.kind == "PROTOBUF":
        return protobuf_struct(schema.text)
    raise UnmappableSchema("", f"a {schema.kind} schema, which Floe does not map")


def _parsed(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UnmappableSchema("", f"the schema is not valid JSON: {exc}") from None


def with_versions(fmt: ConfluentFormat, fold_: SubjectFold) -> ConfluentFormat:
    """``fmt`` told which schema ids the table now takes, and which it refuses and why."""
    return replace(
        fmt,
        schema_ids=tuple(sorted({*fmt.schema_ids, *fold_.taken_ids()})),
        refused_ids=tuple(sorted({*fmt.refused_ids, *fold_.refused_ids()})),
    )


class SubjectFollower:
    """Follows one table's subject on the driver: the versions it has seen, and what is new."""

    def __init__(self, fmt: ConfluentFormat, key: Sequence[str]) -> None:
        assert fmt.subject is not None and fmt.registry_url is not None
        self.subject = fmt.subject
        self._registry = SchemaRegistryClient(fmt.registry_url, fmt.registry_timeout)
        self._key = tuple(key)
        self._seen: set[int] = set()

    @staticmethod
    def of(fmt: object, key: Sequence[str]) -> SubjectFollower | None:
        """The follower of a format that follows a subject, else None."""
        if isinstance(fmt, ConfluentFormat) and fmt.subject is not None and fmt.registry_url is not None:
            return SubjectFollower(fmt, key)
        return None

    def new_versions(self) -> list[SubjectVersion]:
        """The subject's versions not seen before, oldest first (one request, and one per new version)."""
        fresh = [v for v in self._registry.versions(self.subject) if v not in self._seen]
        return [self._registry.version(self.subject, v) for v in fresh]

    def saw(self, versions: Sequence[SubjectVersion]) -> None:
        self._seen.update(v.version for v in versions)

    def fold_into(self, schema: Schema, last_column_id: int, versions: Sequence[SubjectVersion]) -> SubjectFold:
        return fold_versions(Folded(schema, last_column_id, ()), versions, self._key)


def reader_schema_columns(text: str, key: Sequence[str]) -> Schema:
    """The columns of a table made from one Avro reader schema (JSON text)."""
    return first_schema(avro_struct(json.loads(text)), key, -1).schema


def key_columns(fmt: ConfluentFormat, subject: str) -> tuple[str, ...]:
    """The key columns a Kafka key's subject names: the fields of its latest version, a record; () when the
    subject has no version."""
    assert fmt.registry_url is not None
    registry = SchemaRegistryClient(fmt.registry_url, fmt.registry_timeout)
    versions = registry.versions(subject)
    if not versions:
        return ()
    latest = registry.version(subject, versions[-1])
    return tuple(f.name for f in writer_struct(latest.schema).fields)


def start_fold(fmt: ConfluentFormat, key: Sequence[str]) -> SubjectFold:
    """Every version of the format's subject folded from nothing: the schema a table following it starts from."""
    follower = SubjectFollower(fmt, key)
    return fold_versions(None, follower.new_versions(), key)
