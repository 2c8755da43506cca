"""A metadata change as the REST catalog protocol states it: requirements and updates.

Floe builds every commit as a whole new :class:`TableMetadata` from a base
(``MetadataCommitter``'s ``build``). A SQL catalog swaps in a file holding
that metadata; a REST catalog instead takes the difference, as a list of
updates (``add-snapshot``, ``set-snapshot-ref``, ``set-properties``, ...),
and applies it on the server, which writes the metadata file itself.

The requirements make the server's apply a compare-and-swap on what the
change depends on, as Iceberg Java's ``UpdateRequirements`` does: the table's
UUID always, each changed ref's snapshot at the base (so a snapshot is never
rebased onto a newer parent), and the schema, spec and sort-order ids that
added or selected ones build on. Floe's exactly-once and fencing checks read
the base; a requirement failing (409) makes the committer reload and
re-validate, as a lost compare-and-swap does.

Pure: no I/O. Fields are written with the OpenAPI specification's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from table.metadata import TableMetadata


class UnsupportedChange(ValueError):
    """The change touches metadata that Floe does not send through REST."""


@dataclass(frozen=True)
class RestCommit:
    """The body of a commit-table request, without the identifier."""

    requirements: tuple[dict[str, Any], ...]
    updates: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"requirements": list(self.requirements), "updates": list(self.updates)}


def commit_for(base: TableMetadata, new: TableMetadata) -> RestCommit:
    """The requirements and updates that turn ``base`` into ``new`` on a REST server."""
    if new.table_uuid != base.table_uuid:
        raise UnsupportedChange(f"table UUID changed from {base.table_uuid} to {new.table_uuid}")
    requirements: list[dict[str, Any]] = [{"type": "assert-table-uuid", "uuid": str(base.table_uuid)}]
    updates: list[dict[str, Any]] = []
    if new.partition_statistics != base.partition_statistics:
        raise UnsupportedChange("partition statistics files are not sent through REST")
    for part in (
        _format,
        _location,
        _schemas,
        _specs,
        _sort_orders,
        _added_snapshots,
        _refs,
        _removed_snapshots,
        _properties,
        _statistics,
    ):
        more_requirements, more_updates = part(base, new)
        requirements += more_requirements
        updates += more_updates
    return RestCommit(tuple(requirements), tuple(updates))


Part = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _format(base: TableMetadata, new: TableMetadata) -> Part:
    if new.format_version == base.format_version:
        return [], []
    return [], [{"action": "upgrade-format-version", "format-version": new.format_version}]


def _location(base: TableMetadata, new: TableMetadata) -> Part:
    return ([], []) if new.location == base.location else ([], [{"action": "set-location", "location": new.location}])


def _schemas(base: TableMetadata, new: TableMetadata) -> Part:
    known = {s.schema_id for s in base.schemas}
    added = [s for s in new.schemas if s.schema_id not in known]
    requirements: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    if added:
        requirements.append({"type": "assert-last-assigned-field-id", "last-assigned-field-id": base.last_column_id})
        updates += [{"action": "add-schema", "schema": s.to_json()} for s in added]
    if new.current_schema_id != base.current_schema_id:
        requirements.append({"type": "assert-current-schema-id", "current-schema-id": base.current_schema_id})
        updates.append({"action": "set-current-schema", "schema-id": new.current_schema_id})
    _no_removals("schema", known, {s.schema_id for s in new.schemas})
    return requirements, updates


def _specs(base: TableMetadata, new: TableMetadata) -> Part:
    known = {s.spec_id for s in base.partition_specs}
    added = [s for s in new.partition_specs if s.spec_id not in known]
    requirements: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    if added:
        requirements.append(
            {"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": base.last_partition_id}
        )
        updates += [{"action": "add-spec", "spec": s.to_json()} for s in added]
    if new.default_spec_id != base.default_spec_id:
        requirements.append({"type": "assert-default-spec-id", "default-spec-id": base.default_spec_id})
        updates.append({"action": "set-default-spec", "spec-id": new.default_spec_id})
    _no_removals("partition spec", known, {s.spec_id for s in new.partition_specs})
    return requirements, updates


def _sort_orders(base: TableMetadata, new: TableMetadata) -> Part:
    known = {o.order_id for o in base.sort_orders}
    updates: list[dict[str, Any]] = [
        {"action": "add-sort-order", "sort-order": o.to_json()} for o in new.sort_orders if o.order_id not in known
    ]
    requirements: list[dict[str, Any]] = []
    if new.default_sort_order_id != base.default_sort_order_id:
        requirements.append(
            {"type": "assert-default-sort-order-id", "default-sort-order-id": base.default_sort_order_id}
        )
        updates.append({"action": "set-default-sort-order", "sort-order-id": new.default_sort_order_id})
    _no_removals("sort order", known, {o.order_id for o in new.sort_orders})
    return requirements, updates


def _added_snapshots(base: TableMetadata, new: TableMetadata) -> Part:
    """Added snapshots in order, before the refs that may point at them."""
    known = {s.snapshot_id for s in base.snapshots}
    return [], [
        {"action": "add-snapshot", "snapshot": s.to_json()} for s in new.snapshots if s.snapshot_id not in known
    ]


def _removed_snapshots(base: TableMetadata, new: TableMetadata) -> Part:
    """Expired snapshots in one removal, after the refs that pointed at them are gone."""
    removed = sorted({s.snapshot_id for s in base.snapshots} - {s.snapshot_id for s in new.snapshots})
    return [], [{"action": "remove-snapshots", "snapshot-ids": removed}] if removed else []


def _refs(base: TableMetadata, new: TableMetadata) -> Part:
    """Each changed or removed ref, asserted at its base snapshot (None: it must not exist yet)."""
    requirements: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for name in sorted(set(base.refs) | set(new.refs)):
        before, after = base.refs.get(name), new.refs.get(name)
        if before == after:
            continue
        requirements.append(
            {
                "type": "assert-ref-snapshot-id",
                "ref": name,
                "snapshot-id": None if before is None else before.snapshot_id,
            }
        )
        if after is None:
            updates.append({"action": "remove-snapshot-ref", "ref-name": name})
        else:
            updates.append({"action": "set-snapshot-ref", "ref-name": name, **after.to_json()})
    return requirements, updates


def _properties(base: TableMetadata, new: TableMetadata) -> Part:
    changed = {k: v for k, v in new.properties.items() if base.properties.get(k) != v}
    removed = sorted(set(base.properties) - set(new.properties))
    updates: list[dict[str, Any]] = []
    if changed:
        updates.append({"action": "set-properties", "updates": changed})
    if removed:
        updates.append({"action": "remove-properties", "removals": removed})
    return [], updates


def _statistics(base: TableMetadata, new: TableMetadata) -> Part:
    """Statistics files follow their snapshots: a removed snapshot's go with it on the server."""
    kept = {s.snapshot_id for s in new.snapshots}
    before = {s["snapshot-id"]: dict(s) for s in base.statistics if s["snapshot-id"] in kept}
    after = {s["snapshot-id"]: dict(s) for s in new.statistics}
    updates: list[dict[str, Any]] = [
        {"action": "set-statistics", "statistics": after[i]} for i in sorted(after) if before.get(i) != after[i]
    ]
    updates += [{"action": "remove-statistics", "snapshot-id": i} for i in sorted(set(before) - set(after))]
    return [], updates


def _no_removals(what: str, before: set[int], after: set[int]) -> None:
    if before - after:
        raise UnsupportedChange(f"removing a {what} ({sorted(before - after)}) is not sent through REST")
