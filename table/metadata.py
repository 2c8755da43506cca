"""Table metadata (spec "Table Metadata", "Snapshots", Appendix C).

The metadata file is the root of an Iceberg table: it lists the schemas,
partition specs, sort orders, snapshots and refs. :class:`TableMetadata` is
immutable; every change returns new metadata, so the commit layer can build
the next version from the one it read and retry from scratch on conflict.
Reading and writing metadata files is :mod:`table.metadata_json`'s job.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

from table import properties as props
from table.errors import JsonFieldError, NotFoundError, TableError, ValidationError
from table.partitioning import PARTITION_FIELD_ID_START, PartitionField, PartitionSpec
from table.schema import MAX_FIELD_ID, Schema, assign_fresh_ids
from table.sort_order import SortField, SortOrder

FORMAT_VERSION = 2  # what Floe creates unless a table asks for another
SUPPORTED_FORMAT_VERSIONS = (2, 3)
ROW_LINEAGE_VERSION = 3  # spec "Row Lineage": from v3 every snapshot assigns row ids
MAIN_BRANCH = "main"
BRANCH = "branch"
TAG = "tag"
OPERATIONS = frozenset({"append", "replace", "overwrite", "delete"})
INITIAL_SPEC_ID = 0
INITIAL_SCHEMA_ID = 0
INITIAL_SORT_ORDER_ID = 1


def now_ms() -> int:
    """Wall-clock milliseconds, as metadata timestamps are kept."""
    return int(time.time() * 1000)


# --------------------------------------------------------------------------
# Snapshots, refs and log entries
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """One table state: a manifest list plus its lineage and summary."""

    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int
    timestamp_ms: int
    manifest_list: str
    summary: Mapping[str, str]
    schema_id: int | None = None
    first_row_id: int | None = None  # v3: the table's next-row-id when this snapshot was committed
    added_rows: int | None = None  # v3: row ids this snapshot assigned (an upper bound)

    def __post_init__(self) -> None:
        object.__setattr__(self, "summary", dict(self.summary))
        if (self.first_row_id is None) != (self.added_rows is None):
            raise ValidationError(f"snapshot {self.snapshot_id}: first-row-id and added-rows go together")
        if (
            self.first_row_id is not None
            and self.added_rows is not None
            and (self.first_row_id < 0 or self.added_rows < 0)
        ):
            raise ValidationError(
                f"snapshot {self.snapshot_id}: first-row-id {self.first_row_id} and added-rows "
                f"{self.added_rows} must not be negative"
            )
        operation = self.summary.get("operation")
        if operation not in OPERATIONS:
            raise ValidationError(
                f"snapshot {self.snapshot_id}: summary operation must be one of {sorted(OPERATIONS)}, got {operation!r}"
            )

    @property
    def operation(self) -> str:
        return self.summary["operation"]

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"snapshot-id": self.snapshot_id}
        if self.parent_snapshot_id is not None:
            obj["parent-snapshot-id"] = self.parent_snapshot_id
        obj["sequence-number"] = self.sequence_number
        obj["timestamp-ms"] = self.timestamp_ms
        obj["summary"] = {"operation": self.operation, **self.summary}
        obj["manifest-list"] = self.manifest_list
        if self.schema_id is not None:
            obj["schema-id"] = self.schema_id
        if self.first_row_id is not None:
            obj["first-row-id"] = self.first_row_id
            obj["added-rows"] = self.added_rows
        return obj


@dataclass(frozen=True)
class SnapshotRef:
    """A named branch or tag (spec "Snapshot Reference") with its retention settings."""

    snapshot_id: int
    type: str = BRANCH
    min_snapshots_to_keep: int | None = None
    max_snapshot_age_ms: int | None = None
    max_ref_age_ms: int | None = None

    def __post_init__(self) -> None:
        if self.type not in (BRANCH, TAG):
            raise ValidationError(f"ref type must be {BRANCH!r} or {TAG!r}, got {self.type!r}")
        for name in ("min_snapshots_to_keep", "max_snapshot_age_ms", "max_ref_age_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValidationError(f"ref {name} must be positive, got {value}")
        if self.type == TAG and (self.min_snapshots_to_keep is not None or self.max_snapshot_age_ms is not None):
            raise ValidationError("tags do not take min_snapshots_to_keep or max_snapshot_age_ms")

    @property
    def is_branch(self) -> bool:
        return self.type == BRANCH

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"snapshot-id": self.snapshot_id, "type": self.type}
        for key, value in (
            ("min-snapshots-to-keep", self.min_snapshots_to_keep),
            ("max-snapshot-age-ms", self.max_snapshot_age_ms),
            ("max-ref-age-ms", self.max_ref_age_ms),
        ):
            if value is not None:
                obj[key] = value
        return obj


@dataclass(frozen=True)
class SnapshotLogEntry:
    """The current snapshot became ``snapshot_id`` at ``timestamp_ms``."""

    timestamp_ms: int
    snapshot_id: int

    def to_json(self) -> dict[str, Any]:
        return {"timestamp-ms": self.timestamp_ms, "snapshot-id": self.snapshot_id}


@dataclass(frozen=True)
class MetadataLogEntry:
    """A previous metadata file and the last-updated-ms it carried."""

    timestamp_ms: int
    metadata_file: str

    def to_json(self) -> dict[str, Any]:
        return {"timestamp-ms": self.timestamp_ms, "metadata-file": self.metadata_file}


class InvalidMetadataError(JsonFieldError, ValidationError):
    """Table metadata breaks a rule of the spec; ``field`` is the JSON field at fault."""

    subject = "table metadata"


# --------------------------------------------------------------------------
# Table metadata
# --------------------------------------------------------------------------


_T = TypeVar("_T")


@dataclass(frozen=True)
class TableMetadata:
    """Format v2 or v3 table metadata. Lists are tuples; treat the dicts as read-only.

    ``next_row_id`` is v3's row lineage counter (spec "Row Lineage"): None
    in v2, and moved forward by every snapshot added to a v3 table.

    ``refs`` always holds the ``main`` branch when there is a current
    snapshot, as the spec requires even when a file omits ``refs``.
    """

    table_uuid: uuid.UUID
    location: str
    last_sequence_number: int
    last_updated_ms: int
    last_column_id: int
    schemas: tuple[Schema, ...]
    current_schema_id: int
    partition_specs: tuple[PartitionSpec, ...]
    default_spec_id: int
    last_partition_id: int
    sort_orders: tuple[SortOrder, ...]
    default_sort_order_id: int
    properties: Mapping[str, str] = field(default_factory=dict)
    current_snapshot_id: int | None = None
    snapshots: tuple[Snapshot, ...] = ()
    snapshot_log: tuple[SnapshotLogEntry, ...] = ()
    metadata_log: tuple[MetadataLogEntry, ...] = ()
    refs: Mapping[str, SnapshotRef] = field(default_factory=dict)
    statistics: tuple[Mapping[str, Any], ...] = ()
    partition_statistics: tuple[Mapping[str, Any], ...] = ()
    format_version: int = FORMAT_VERSION
    next_row_id: int | None = None

    def __post_init__(self) -> None:
        for name in ("schemas", "partition_specs", "sort_orders", "snapshots", "snapshot_log", "metadata_log"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "statistics", tuple(self.statistics))
        object.__setattr__(self, "partition_statistics", tuple(self.partition_statistics))
        object.__setattr__(self, "properties", dict(self.properties))
        refs = dict(self.refs)
        if self.current_snapshot_id is not None and MAIN_BRANCH not in refs:
            refs[MAIN_BRANCH] = SnapshotRef(self.current_snapshot_id, BRANCH)
        object.__setattr__(self, "refs", refs)
        _validate(self)

    # -- lookup ---------------------------------------------------------------

    @cached_property
    def _snapshots_by_id(self) -> dict[int, Snapshot]:
        return {s.snapshot_id: s for s in self.snapshots}

    def schema(self) -> Schema:
        """The current schema."""
        return self.schema_by_id(self.current_schema_id)

    def schema_by_id(self, schema_id: int) -> Schema:
        return _by_id(self.schemas, lambda s: s.schema_id, schema_id, "schema")

    def spec(self) -> PartitionSpec:
        """The default partition spec, used by writers."""
        return self.spec_by_id(self.default_spec_id)

    def spec_by_id(self, spec_id: int) -> PartitionSpec:
        return _by_id(self.partition_specs, lambda s: s.spec_id, spec_id, "partition spec")

    def sort_order(self) -> SortOrder:
        """The default sort order."""
        return self.sort_order_by_id(self.default_sort_order_id)

    def sort_order_by_id(self, order_id: int) -> SortOrder:
        return _by_id(self.sort_orders, lambda o: o.order_id, order_id, "sort order")

    def snapshot_by_id(self, snapshot_id: int) -> Snapshot:
        snapshot = self._snapshots_by_id.get(snapshot_id)
        if snapshot is None:
            raise NotFoundError(f"table {self.location} has no snapshot {snapshot_id}")
        return snapshot

    def current_snapshot(self) -> Snapshot | None:
        """The snapshot of the main branch; None for a table without one."""
        return None if self.current_snapshot_id is None else self.snapshot_by_id(self.current_snapshot_id)

    def snapshot_for_ref(self, name: str) -> Snapshot | None:
        """The snapshot a branch or tag points at; None if there is no such ref."""
        ref = self.refs.get(name)
        return None if ref is None else self.snapshot_by_id(ref.snapshot_id)

    def snapshot_as_of(self, timestamp_ms: int) -> Snapshot:
        """The snapshot that was current at ``timestamp_ms`` (time travel, via the snapshot log)."""
        current = None
        for entry in self.snapshot_log:
            if entry.timestamp_ms <= timestamp_ms:
                current = entry.snapshot_id
        if current is None:
            raise NotFoundError(f"table {self.location} has no snapshot at or before {timestamp_ms}")
        return self.snapshot_by_id(current)

    def ancestors_of(self, snapshot_id: int) -> Iterator[Snapshot]:
        """The snapshot, then its parent, and so on until a parent is missing (expired)."""
        snapshot: Snapshot | None = self.snapshot_by_id(snapshot_id)
        while snapshot is not None:
            yield snapshot
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else self._snapshots_by_id.get(parent)

    @property
    def next_sequence_number(self) -> int:
        return self.last_sequence_number + 1

    @property
    def tracks_row_lineage(self) -> bool:
        """Whether snapshots must assign row ids (v3 and later)."""
        return self.format_version >= ROW_LINEAGE_VERSION

    def upgrade_format_version(self, version: int) -> TableMetadata:
        """This table at a higher format version (spec Appendix E); upgrading to v3 starts row ids at 0.

        Existing snapshots are left as they are: their data files get row ids
        from the first snapshot committed after the upgrade.
        """
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise ValidationError(f"format-version {version} is not supported; Floe writes {SUPPORTED_FORMAT_VERSIONS}")
        if version < self.format_version:
            raise ValidationError(f"format-version cannot go down from {self.format_version} to {version}")
        if version == self.format_version:
            return self
        next_row_id = 0 if version >= ROW_LINEAGE_VERSION and self.next_row_id is None else self.next_row_id
        return replace(self, format_version=version, next_row_id=next_row_id)

    # -- snapshots and refs ---------------------------------------------------

    def add_snapshot(self, snapshot: Snapshot) -> TableMetadata:
        """Add a snapshot without pointing any ref at it (see :meth:`set_branch`)."""
        if snapshot.snapshot_id in self._snapshots_by_id:
            raise ValidationError(f"snapshot {snapshot.snapshot_id} already exists")
        if snapshot.sequence_number <= self.last_sequence_number:
            raise ValidationError(
                f"snapshot {snapshot.snapshot_id} has sequence number {snapshot.sequence_number}, "
                f"not above the last sequence number {self.last_sequence_number}"
            )
        return replace(
            self,
            snapshots=(*self.snapshots, snapshot),
            last_sequence_number=snapshot.sequence_number,
            last_updated_ms=snapshot.timestamp_ms,
            next_row_id=self._next_row_id_after(snapshot),
        )

    def _next_row_id_after(self, snapshot: Snapshot) -> int | None:
        """v3: the snapshot must start at the table's next row id; the counter moves past its rows."""
        if not self.tracks_row_lineage:
            if snapshot.first_row_id is not None:
                raise ValidationError(f"snapshot {snapshot.snapshot_id}: first-row-id needs format-version 3")
            return self.next_row_id
        if snapshot.first_row_id is None or snapshot.added_rows is None:
            raise ValidationError(f"snapshot {snapshot.snapshot_id}: a v3 snapshot needs first-row-id and added-rows")
        assert self.next_row_id is not None
        if snapshot.first_row_id < self.next_row_id:
            raise ValidationError(
                f"snapshot {snapshot.snapshot_id}: first-row-id {snapshot.first_row_id} is behind the "
                f"table's next-row-id {self.next_row_id}"
            )
        return snapshot.first_row_id + snapshot.added_rows

    def set_branch(self, name: str, snapshot_id: int, *, timestamp_ms: int | None = None) -> TableMetadata:
        """Point branch ``name`` at a snapshot, keeping the branch's retention settings."""
        existing = self.refs.get(name)
        if existing is not None and not existing.is_branch:
            raise ValidationError(f"ref {name!r} is a tag, not a branch")
        ref = SnapshotRef(snapshot_id, BRANCH) if existing is None else replace(existing, snapshot_id=snapshot_id)
        return self.set_ref(name, ref, timestamp_ms=timestamp_ms)

    def set_ref(self, name: str, ref: SnapshotRef, *, timestamp_ms: int | None = None) -> TableMetadata:
        """Create or replace a ref. Moving ``main`` changes the current snapshot and logs it.

        The log entry is stamped ``timestamp_ms``, else the snapshot's own
        timestamp when it is newer than the last update (it was just added,
        as Java does), else now (a rollback).
        """
        snapshot = self.snapshot_by_id(ref.snapshot_id)
        if name == MAIN_BRANCH and not ref.is_branch:
            raise ValidationError(f"ref {MAIN_BRANCH!r} must be a branch")
        if self.refs.get(name) == ref:
            return self
        refs = {**self.refs, name: ref}
        if name != MAIN_BRANCH:
            return replace(self, refs=refs)
        if timestamp_ms is None:
            just_added = snapshot.timestamp_ms >= self.last_updated_ms
            timestamp_ms = snapshot.timestamp_ms if just_added else max(now_ms(), self.last_updated_ms)
        return replace(
            self,
            refs=refs,
            current_snapshot_id=ref.snapshot_id,
            snapshot_log=(*self.snapshot_log, SnapshotLogEntry(timestamp_ms, ref.snapshot_id)),
            last_updated_ms=max(self.last_updated_ms, timestamp_ms),
        )

    def remove_ref(self, name: str) -> TableMetadata:
        if name not in self.refs:
            raise NotFoundError(f"table {self.location} has no ref {name!r}")
        refs = {k: v for k, v in self.refs.items() if k != name}
        current = None if name == MAIN_BRANCH else self.current_snapshot_id
        return replace(self, refs=refs, current_snapshot_id=current)

    def remove_snapshots(self, snapshot_ids: Iterable[int]) -> TableMetadata:
        """Drop snapshots, the refs and statistics that point at them, and the log before them."""
        removed = set(snapshot_ids) & set(self._snapshots_by_id)
        if not removed:
            return self
        refs = {k: r for k, r in self.refs.items() if r.snapshot_id not in removed}
        main = refs.get(MAIN_BRANCH)
        return replace(
            self,
            snapshots=tuple(s for s in self.snapshots if s.snapshot_id not in removed),
            refs=refs,
            current_snapshot_id=None if main is None else main.snapshot_id,
            snapshot_log=_trim_snapshot_log(self.snapshot_log, removed),
            statistics=tuple(s for s in self.statistics if s.get("snapshot-id") not in removed),
            partition_statistics=tuple(s for s in self.partition_statistics if s.get("snapshot-id") not in removed),
        )

    # -- schemas, specs, sort orders ------------------------------------------

    def add_schema(self, schema: Schema, last_column_id: int, *, make_current: bool = False) -> TableMetadata:
        """Add a schema (reusing the id of an identical one, else the next free id)."""
        if last_column_id < self.last_column_id:
            raise ValidationError(f"last column id {last_column_id} is below the current {self.last_column_id}")
        _check_field_ids(schema, last_column_id)
        existing = next((s for s in self.schemas if s.same_columns(schema)), None)
        if existing is None:
            existing = schema.with_schema_id(max(s.schema_id for s in self.schemas) + 1)
            updated = replace(self, schemas=(*self.schemas, existing), last_column_id=last_column_id)
        else:
            updated = replace(self, last_column_id=last_column_id)
        return updated.set_current_schema(existing.schema_id) if make_current else updated

    def set_current_schema(self, schema_id: int) -> TableMetadata:
        self.schema_by_id(schema_id)
        return replace(self, current_schema_id=schema_id)

    def add_partition_spec(self, spec: PartitionSpec, *, make_default: bool = False) -> TableMetadata:
        """Add a spec (reusing the id of one with the same fields, else the next free id)."""
        spec.partition_type(self.schema())  # the current schema must have every source column
        existing = next((s for s in self.partition_specs if tuple(s.fields) == tuple(spec.fields)), None)
        updated = self
        if existing is None:
            existing = PartitionSpec(max(s.spec_id for s in self.partition_specs) + 1, tuple(spec.fields))
            updated = replace(
                self,
                partition_specs=(*self.partition_specs, existing),
                last_partition_id=max(self.last_partition_id, existing.last_assigned_field_id),
            )
        return updated.set_default_spec(existing.spec_id) if make_default else updated

    def set_default_spec(self, spec_id: int) -> TableMetadata:
        self.spec_by_id(spec_id)
        return replace(self, default_spec_id=spec_id)

    def add_sort_order(self, order: SortOrder, *, make_default: bool = False) -> TableMetadata:
        """Add a sort order (reusing the id of one with the same fields, else the next free id)."""
        order.check_compatible(self.schema())
        existing = next((o for o in self.sort_orders if o.fields == order.fields), None)
        updated = self
        if existing is None:
            existing = SortOrder(max(o.order_id for o in self.sort_orders) + 1, order.fields)
            updated = replace(self, sort_orders=(*self.sort_orders, existing))
        return updated.set_default_sort_order(existing.order_id) if make_default else updated

    def set_default_sort_order(self, order_id: int) -> TableMetadata:
        self.sort_order_by_id(order_id)
        return replace(self, default_sort_order_id=order_id)

    # -- properties, logs, timestamps -----------------------------------------

    def set_properties(self, updates: Mapping[str, str]) -> TableMetadata:
        for key, value in updates.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValidationError(f"table property {key!r} must map a string to a string, got {value!r}")
        return replace(self, properties={**self.properties, **updates})

    def remove_properties(self, keys: Iterable[str]) -> TableMetadata:
        gone = set(keys)
        return replace(self, properties={k: v for k, v in self.properties.items() if k not in gone})

    def with_metadata_log(
        self, previous_file: str, max_entries: int | None = None, *, timestamp_ms: int
    ) -> TableMetadata:
        """Record the metadata file this version replaces, keeping the newest entries.

        ``timestamp_ms`` is the last-updated-ms of that previous metadata.
        ``max_entries`` defaults to the table property
        ``write.metadata.previous-versions-max`` (100); at least one is kept.
        """
        if max_entries is None:
            max_entries = props.METADATA_PREVIOUS_VERSIONS_MAX.read(self.properties)
        log = (*self.metadata_log, MetadataLogEntry(timestamp_ms, previous_file))
        return replace(self, metadata_log=log[-max(1, max_entries) :])

    def metadata_files_dropped_by(self, newer: TableMetadata) -> list[str]:
        """Previous metadata files this version's log names and ``newer``'s no longer does,
        when ``newer`` has ``write.metadata.delete-after-commit.enabled``: the files to
        delete after committing ``newer`` (Iceberg Java does the same); otherwise none."""
        if not props.METADATA_DELETE_AFTER_COMMIT.read(newer.properties):
            return []
        kept = {e.metadata_file for e in newer.metadata_log}
        return [e.metadata_file for e in self.metadata_log if e.metadata_file not in kept]

    def with_last_updated_ms(self, timestamp_ms: int | None = None) -> TableMetadata:
        """Stamp the metadata just before writing it (default: now)."""
        return replace(self, last_updated_ms=now_ms() if timestamp_ms is None else timestamp_ms)

    # -- JSON -----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The Appendix C JSON object, fields in Iceberg Java's order."""
        return {
            "format-version": self.format_version,
            "table-uuid": str(self.table_uuid),
            "location": self.location,
            "last-sequence-number": self.last_sequence_number,
            "last-updated-ms": self.last_updated_ms,
            "last-column-id": self.last_column_id,
            "current-schema-id": self.current_schema_id,
            "schemas": [s.to_json() for s in self.schemas],
            "default-spec-id": self.default_spec_id,
            "partition-specs": [s.to_json() for s in self.partition_specs],
            "last-partition-id": self.last_partition_id,
            "default-sort-order-id": self.default_sort_order_id,
            "sort-orders": [o.to_json() for o in self.sort_orders],
            "properties": dict(self.properties),
            # v2 readers (Java included) expect -1, not null, for "no snapshot"
            "current-snapshot-id": -1 if self.current_snapshot_id is None else self.current_snapshot_id,
            "refs": {name: ref.to_json() for name, ref in self.refs.items()},
            "snapshots": [s.to_json() for s in self.snapshots],
            "statistics": [dict(s) for s in self.statistics],
            "partition-statistics": [dict(s) for s in self.partition_statistics],
            "snapshot-log": [e.to_json() for e in self.snapshot_log],
            "metadata-log": [e.to_json() for e in self.metadata_log],
            **({} if self.next_row_id is None else {"next-row-id": self.next_row_id}),
        }


def _by_id(items: Iterable[_T], key: Callable[[_T], int], wanted: int, what: str) -> _T:
    found = next((item for item in items if key(item) == wanted), None)
    if found is None:
        raise NotFoundError(f"no {what} with id {wanted}")
    return found


def _check_field_ids(schema: Schema, last_column_id: int) -> None:
    if schema.highest_field_id > last_column_id:
        raise ValidationError(
            f"schema has field id {schema.highest_field_id}, above the last column id {last_column_id}"
        )
    if schema.highest_field_id > MAX_FIELD_ID:
        raise ValidationError(f"schema uses field id {schema.highest_field_id}; ids above {MAX_FIELD_ID} are reserved")


def _trim_snapshot_log(log: tuple[SnapshotLogEntry, ...], removed: set[int]) -> tuple[SnapshotLogEntry, ...]:
    """Drop everything up to the last entry of a removed snapshot, so the log never skips one."""
    kept: list[SnapshotLogEntry] = []
    for entry in log:
        if entry.snapshot_id in removed:
            kept.clear()
        else:
            kept.append(entry)
    return tuple(kept)


def _validate(md: TableMetadata) -> None:
    """Raise :class:`InvalidMetadataError` on the first broken cross-field rule."""
    problem = next(_problems(md), None)
    if problem is not None:
        raise InvalidMetadataError(*problem)


def _problems(md: TableMetadata) -> Iterator[tuple[str, str]]:
    if md.format_version not in SUPPORTED_FORMAT_VERSIONS:
        yield (
            "format-version",
            f"only format versions {list(SUPPORTED_FORMAT_VERSIONS)} are supported, got {md.format_version}",
        )
    elif md.tracks_row_lineage and (md.next_row_id is None or md.next_row_id < 0):
        yield "next-row-id", f"a v{md.format_version} table needs a non-negative next-row-id, got {md.next_row_id}"
    elif not md.tracks_row_lineage and md.next_row_id is not None:
        yield "next-row-id", f"a v{md.format_version} table has no row lineage, got {md.next_row_id}"
    yield from _id_problems("schemas", [s.schema_id for s in md.schemas], md.current_schema_id, "current-schema-id")
    yield from _id_problems(
        "partition-specs", [s.spec_id for s in md.partition_specs], md.default_spec_id, "default-spec-id"
    )
    yield from _id_problems(
        "sort-orders", [o.order_id for o in md.sort_orders], md.default_sort_order_id, "default-sort-order-id"
    )
    highest_column = max((s.highest_field_id for s in md.schemas), default=0)
    if highest_column > md.last_column_id:
        yield "last-column-id", f"{md.last_column_id} is below field id {highest_column} used by a schema"
    highest_partition = max((f.field_id for s in md.partition_specs for f in s.fields), default=0)
    if highest_partition > md.last_partition_id:
        yield "last-partition-id", f"{md.last_partition_id} is below partition field id {highest_partition}"
    yield from _snapshot_problems(md)


def _id_problems(list_field: str, ids: list[int], current: int, current_field: str) -> Iterator[tuple[str, str]]:
    if not ids:
        yield list_field, "must not be empty"
    duplicates = _duplicates(ids)
    if duplicates:
        yield list_field, f"ids {duplicates} are used more than once"
    if ids and current not in ids:
        yield current_field, f"{current} is not among the ids of {list_field} {sorted(set(ids))}"


def _duplicates(ids: list[int]) -> list[int]:
    return sorted(i for i, n in Counter(ids).items() if n > 1)


def _snapshot_problems(md: TableMetadata) -> Iterator[tuple[str, str]]:
    ids = [s.snapshot_id for s in md.snapshots]
    duplicates = _duplicates(ids)
    if duplicates:
        yield "snapshots", f"snapshot ids {duplicates} are used more than once"
    for i, snapshot in enumerate(md.snapshots):
        if snapshot.sequence_number > md.last_sequence_number:
            yield (
                f"snapshots[{i}].sequence-number",
                f"{snapshot.sequence_number} is above last-sequence-number {md.last_sequence_number}",
            )
    known = set(ids)
    if md.current_snapshot_id is not None and md.current_snapshot_id not in known:
        yield "current-snapshot-id", f"snapshot {md.current_snapshot_id} is not in snapshots"
    for name, ref in md.refs.items():
        if ref.snapshot_id not in known:
            yield f"refs.{name}.snapshot-id", f"snapshot {ref.snapshot_id} is not in snapshots"
    main = md.refs.get(MAIN_BRANCH)
    if main is not None and main.snapshot_id != md.current_snapshot_id:
        yield "current-snapshot-id", f"{md.current_snapshot_id} differs from the main branch's {main.snapshot_id}"
    if main is not None and not main.is_branch:
        yield f"refs.{MAIN_BRANCH}.type", "main must be a branch"


# --------------------------------------------------------------------------
# Table creation
# --------------------------------------------------------------------------


def new_table_metadata(
    schema: Schema,
    spec: PartitionSpec,
    sort_order: SortOrder,
    location: str,
    properties: Mapping[str, str] | None = None,
    table_uuid: uuid.UUID | None = None,
    *,
    timestamp_ms: int | None = None,
) -> TableMetadata:
    """Metadata of a new, empty table, as Iceberg Java creates it.

    Column ids are reassigned 1.. (:func:`assign_fresh_ids`); the spec and
    sort order are rebound to the new ids through their source column names;
    partition field ids restart at 1000.
    """
    properties = dict(properties or {})
    version = properties.pop("format-version", str(FORMAT_VERSION))
    if version not in {str(v) for v in SUPPORTED_FORMAT_VERSIONS}:
        raise ValidationError(
            f"table property format-version must be one of {[str(v) for v in SUPPORTED_FORMAT_VERSIONS]}, "
            f"got {version!r}"
        )
    fresh_schema = assign_fresh_ids(schema).with_schema_id(INITIAL_SCHEMA_ID)
    fresh_spec = _rebind_spec(spec, schema, fresh_schema)
    fresh_spec.partition_type(fresh_schema)  # every transform must accept its source type
    fresh_order = _rebind_sort_order(sort_order, schema, fresh_schema)
    fresh_order.check_compatible(fresh_schema)
    return TableMetadata(
        table_uuid=table_uuid or uuid.uuid4(),
        location=location.rstrip("/"),
        last_sequence_number=0,
        last_updated_ms=now_ms() if timestamp_ms is None else timestamp_ms,
        last_column_id=fresh_schema.highest_field_id,
        schemas=(fresh_schema,),
        current_schema_id=fresh_schema.schema_id,
        partition_specs=(fresh_spec,),
        default_spec_id=fresh_spec.spec_id,
        last_partition_id=fresh_spec.last_assigned_field_id,
        sort_orders=(fresh_order,),
        default_sort_order_id=fresh_order.order_id,
        properties=properties,
        format_version=int(version),
        next_row_id=0 if int(version) >= ROW_LINEAGE_VERSION else None,
    )


def _fresh_source_id(source_id: int, old: Schema, fresh: Schema, what: str) -> int:
    try:
        return fresh.find_field(old.find_column_name(source_id)).field_id
    except TableError as e:
        raise ValidationError(f"{what} refers to source column id {source_id}, which the schema lacks") from e


def _rebind_spec(spec: PartitionSpec, old: Schema, fresh: Schema) -> PartitionSpec:
    fields = tuple(
        PartitionField(
            _fresh_source_id(f.source_id, old, fresh, f"partition field {f.name!r}"),
            PARTITION_FIELD_ID_START + position,
            f.transform,
            f.name,
        )
        for position, f in enumerate(spec.fields)
    )
    return PartitionSpec(INITIAL_SPEC_ID, fields)


def _rebind_sort_order(order: SortOrder, old: Schema, fresh: Schema) -> SortOrder:
    if order.is_unsorted:
        return SortOrder(0, ())
    fields = tuple(
        SortField(_fresh_source_id(f.source_id, old, fresh, "sort field"), f.transform, f.direction, f.null_order)
        for f in order.fields
    )
    return SortOrder(INITIAL_SORT_ORDER_ID, fields)


# --------------------------------------------------------------------------
# File names
# --------------------------------------------------------------------------


def is_gzip_metadata_name(path: str) -> bool:
    """Java's two gzip namings: ``*.gz.metadata.json`` and the older ``*.metadata.json.gz``."""
    return path.endswith((".gz.metadata.json", ".metadata.json.gz"))


def metadata_file_name(version: int, compressed: bool = False) -> str:
    """The metastore-table file name of metadata version ``version`` (spec "Metastore Tables")."""
    if version < 0:
        raise ValidationError(f"metadata version must not be negative, got {version}")
    suffix = ".gz.metadata.json" if compressed else ".metadata.json"
    return f"{version:05d}-{uuid.uuid4()}{suffix}"


_VERSIONED_NAME = re.compile(r"^(\d+)-[^/]*\.metadata\.json(\.gz)?$")
_HADOOP_NAME = re.compile(r"^v(\d+)(\.gz)?\.metadata\.json(\.gz)?$")


def parse_metadata_version(path: str) -> int:
    """The version in ``<V>-<uuid>.metadata.json`` or ``v<V>.metadata.json``; -1 for other names.

    Like Iceberg Java, a name without a version is not an error: the next
    commit simply writes version 0 under a fresh uuid.
    """
    name = path.rstrip("/").rsplit("/", 1)[-1]
    match = _VERSIONED_NAME.match(name) or _HADOOP_NAME.match(name)
    return int(match.group(1)) if match else -1
