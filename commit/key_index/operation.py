"""Committing an index change in the same metadata swap as its snapshot.

:class:`WithKeyIndex` wraps a snapshot operation (an ingest batch's row
delta, a compactor's rewrite). Each attempt reads the index that the
attempt's base metadata names, rebases the change on it
(:func:`commit.key_index.manifest.apply_change`), writes the new manifest
and has the snapshot's metadata point at it (``floe.key-index``). So a lost
race rebases on the winner's index, and a failed or crashed commit leaves
the table naming the previous one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from commit.key_index.catch_up import CatchUpImpossible, catch_up, foreign_deletes
from commit.key_index.manifest import (
    KEY_INDEX_PROPERTY,
    IndexChange,
    IndexManifest,
    KeyIndexStale,
    apply_change,
    check_manifest_for,
    describes_snapshot,
    empty_manifest,
    retire,
)
from commit.key_index.store import current_manifest, index_location, manifest_path, remap_path, write_manifest
from commit.snapshot_producer import Attempt, Produced, SnapshotOperation, WrappingOperation
from table.metadata import now_ms


@dataclass(frozen=True)
class KeyIndexUpdate:
    """What a commit does to the table's key index: ``changes`` applied in order.

    ``rebuilt``: the first change holds a whole new index built from the
    table at ``rebuilt_from`` (None: the table had no snapshot); whatever
    index the table named is replaced. Otherwise the current index must
    describe the attempt's parent, or :class:`KeyIndexStale` is raised.
    """

    changes: tuple[IndexChange, ...]
    key_ids: tuple[int, ...]
    buckets: int
    location: str
    table: str
    rebuilt: bool = False
    rebuilt_from: int | None = None

    @property
    def paths(self) -> list[str]:
        """Every index file the update brings (deleted when its commit fails for sure)."""
        return [path for change in self.changes for path in change.paths]


class WithKeyIndex(WrappingOperation):
    """``inner``, plus moving the table's key index to ``update`` applied on the current index."""

    def __init__(self, inner: SnapshotOperation, update: KeyIndexUpdate) -> None:
        super().__init__(inner)
        self.update = update
        self.obsolete: list[str] = []
        """Retired index files old enough to delete once the last attempt has landed."""
        self.manifest: IndexManifest | None = None
        """The manifest the last attempt wrote."""

    def produce(self, attempt: Attempt) -> Produced:
        produced = self.inner.produce(attempt)
        current = current_manifest(attempt.io, attempt.base)
        manifest = self._starting_point(attempt, current)
        obsolete: list[str] = []
        if self.update.rebuilt and current is not None:
            obsolete = sorted(_files_of(current))
            manifest = replace(manifest, retired=current.retired)
        since = manifest.snapshot_id
        for change in self.update.changes:
            manifest, dropped = apply_change(manifest, change, attempt.snapshot_id)
            obsolete.extend(dropped)
        try:
            caught = _caught_up(attempt, manifest, since, self.update.location)
        except CatchUpImpossible as impossible:
            raise KeyIndexStale(f"table {self.update.table}: {impossible}") from impossible
        previous = _previous_manifest(attempt)
        manifest, self.obsolete = retire(caught.manifest, obsolete + caught.obsolete + previous, now_ms())
        self.manifest = manifest
        produced = replace(produced, files=(*produced.files, *caught.written))
        return _pointing_at(attempt, produced, manifest, self.update.location)

    def _starting_point(self, attempt: Attempt, current: IndexManifest | None) -> IndexManifest:
        update = self.update
        parent = None if attempt.parent is None else attempt.parent.snapshot_id
        if update.rebuilt:
            start = empty_manifest(update.key_ids, update.buckets, update.rebuilt_from)
        elif current is None:
            raise KeyIndexStale(f"table {update.table} has no key index; it is built before the first batch")
        else:
            check_manifest_for(current, update.key_ids, update.table)
            start = current
        if not describes_snapshot(start, attempt.base, parent):
            raise KeyIndexStale(
                f"table {update.table}: the key index describes snapshot {start.snapshot_id}, and snapshots since "
                f"changed data files (head {parent}); it is rebuilt before the next batch"
            )
        return start


class WithRemaps(WrappingOperation):
    """A rewrite (``inner``) that registers its position maps as remaps of the table's key index.

    ``maps`` pairs each position map file with the data files it rewrote. A
    table without an index, or whose index is stale (it is rebuilt before
    the next upsert batch), gets no remap. Each map is copied into the
    index's directory once (the compactor's work files are not kept).
    """

    def __init__(self, inner: SnapshotOperation, maps: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        super().__init__(inner)
        self.maps = list(maps)
        self._copies: dict[str, str] = {}
        self.obsolete: list[str] = []
        self.registered = False

    def produce(self, attempt: Attempt) -> Produced:
        produced = self.inner.produce(attempt)
        current = current_manifest(attempt.io, attempt.base)
        parent = None if attempt.parent is None else attempt.parent.snapshot_id
        self.registered = False
        if current is None or not self.maps or not describes_snapshot(current, attempt.base, parent):
            return produced
        location = index_location(attempt.base)
        try:
            caught = _caught_up(attempt, current, current.snapshot_id, location)
        except CatchUpImpossible:
            return produced  # the index stays as it is: stale once this lands, rebuilt by the next batch
        remaps = tuple((self._copy(attempt, location, source), old) for source, old in self.maps)
        manifest, more = apply_change(caught.manifest, IndexChange(remaps=remaps), attempt.snapshot_id)
        manifest, self.obsolete = retire(manifest, caught.obsolete + more + _previous_manifest(attempt), now_ms())
        self.registered = True
        produced = replace(produced, files=(*produced.files, *caught.written, *(path for path, _ in remaps)))
        return _pointing_at(attempt, produced, manifest, location)

    def _copy(self, attempt: Attempt, location: str, source: str) -> str:
        copy = self._copies.get(source)
        if copy is None:
            copy = self._copies[source] = attempt.track(remap_path(location))
            attempt.io.write_bytes(copy, attempt.io.read_bytes(source))
        return copy


@dataclass(frozen=True)
class _CaughtUp:
    manifest: IndexManifest
    obsolete: list[str]
    written: tuple[str, ...]


def _caught_up(attempt: Attempt, manifest: IndexManifest, since: int | None, location: str) -> _CaughtUp:
    """``manifest`` with tombstones for what other writers deleted after ``since`` (:mod:`.catch_up`)."""
    added = foreign_deletes(attempt.io, attempt.base, since, attempt.parent)
    caught = catch_up(attempt.io, attempt.base, manifest, location, added)
    if not caught:
        return _CaughtUp(manifest, [], ())
    written = tuple(attempt.track(change.segment.path) for change in caught)
    segments = IndexChange(tuple(c.segment for c in caught), tuple(p for c in caught for p in c.replaced))
    snapshot = manifest.snapshot_id if manifest.snapshot_id is not None else attempt.snapshot_id
    manifest, dropped = apply_change(manifest, segments, snapshot)
    return _CaughtUp(manifest, dropped, written)


def _pointing_at(attempt: Attempt, produced: Produced, manifest: IndexManifest, location: str) -> Produced:
    """``produced`` with ``manifest`` written and the table property pointing at it."""
    path = attempt.track(manifest_path(location, attempt.snapshot_id))
    write_manifest(attempt.io, path, manifest)
    return replace(
        produced, properties={**produced.properties, KEY_INDEX_PROPERTY: path}, files=(*produced.files, path)
    )


def _previous_manifest(attempt: Attempt) -> list[str]:
    """The manifest the new one replaces: retired with the other files it no longer needs."""
    path = attempt.base.properties.get(KEY_INDEX_PROPERTY)
    return [path] if path else []


def _files_of(manifest: IndexManifest) -> set[str]:
    return {s.path for s in manifest.segments} | {r.path for r in manifest.remaps}
