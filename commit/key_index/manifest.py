"""The key index's manifest: which segments and remaps make up one version of the index.

The table property :data:`KEY_INDEX_PROPERTY` names the manifest of the
current version, and it changes only in the same metadata swap as the
snapshot it describes (:mod:`commit.key_index.operation`), so the table and
its index never disagree. A commit that lost a race rebases its change on
the winner's manifest (:func:`apply_change`): its deltas are appended, the
segments its new bases merged are replaced, its remaps are numbered after
the winner's. Everything here is pure data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from table.errors import ValidationError
from table.metadata import MAIN_BRANCH, TableMetadata

KEY_INDEX_PROPERTY = "floe.key-index"
"""Table property: the path of the current index manifest."""
FORMAT = "floe-key-index"
FORMAT_VERSION = 1


class KeyIndexConflict(ValidationError):
    """The index changed under a commit in a way its change cannot be rebased on: redo the batch."""


class KeyIndexStale(ValidationError):
    """The index does not describe the table's head: another writer changed data files since."""


@dataclass(frozen=True)
class SegmentRef:
    """One segment file of one bucket. A base holds every live key of its bucket
    with the remaps up to ``folded_remaps`` applied; a delta holds one batch's changes."""

    bucket: int
    path: str
    rows: int
    size_bytes: int
    base: bool
    folded_remaps: int = 0


@dataclass(frozen=True)
class RemapRef:
    """A compactor's position map, applied to entries that point at one of its ``old_files``."""

    remap_id: int
    path: str
    old_files: tuple[str, ...]


@dataclass(frozen=True)
class IndexChange:
    """What one commit does to the index: new segments, the segments they replace, new remaps."""

    segments: tuple[SegmentRef, ...] = ()
    replaced: tuple[str, ...] = ()
    remaps: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (position map path, old files)

    @property
    def paths(self) -> list[str]:
        """Every file the change brings (deleted when its commit fails for sure)."""
        return [s.path for s in self.segments] + [path for path, _ in self.remaps]


@dataclass(frozen=True)
class IndexManifest:
    """One version of the index of a table's ``main``."""

    key_ids: tuple[int, ...]
    buckets: int
    snapshot_id: int | None = None
    segments: tuple[SegmentRef, ...] = ()
    remaps: tuple[RemapRef, ...] = ()
    next_remap_id: int = 1
    retired: tuple[tuple[str, int], ...] = ()
    """Files a newer version no longer names, with when (ms): deleted once :data:`RETIRED_GRACE_MS` has
    passed, so that a reader still working on an older version (a batch in flight, a check) finds them."""

    def bucket(self, bucket: int) -> list[SegmentRef]:
        """The bucket's segments, oldest first (its base, if any, first)."""
        return [s for s in self.segments if s.bucket == bucket]

    def pending_remaps(self, bucket: int) -> list[RemapRef]:
        """The remaps the bucket's base has not folded in, in commit order."""
        folded = _folded(self.bucket(bucket))
        return [r for r in self.remaps if r.remap_id > folded]

    @property
    def entries(self) -> int:
        """Rows over every segment (live keys plus superseded entries and tombstones)."""
        return sum(s.rows for s in self.segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format-version": FORMAT_VERSION,
            "key-field-ids": list(self.key_ids),
            "buckets": self.buckets,
            "snapshot-id": self.snapshot_id,
            "next-remap-id": self.next_remap_id,
            "segments": [
                {
                    "bucket": s.bucket,
                    "path": s.path,
                    "rows": s.rows,
                    "size-bytes": s.size_bytes,
                    "base": s.base,
                    "folded-remaps": s.folded_remaps,
                }
                for s in self.segments
            ],
            "remaps": [{"id": r.remap_id, "path": r.path, "old-files": list(r.old_files)} for r in self.remaps],
            "retired": [{"path": path, "at-ms": at} for path, at in self.retired],
        }


def manifest_from_json(obj: Any, where: str) -> IndexManifest:
    """Parse :meth:`IndexManifest.to_json`; a file that is not one is named in the error."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValidationError(f"{where} is not a Floe key index manifest")
    if obj.get("format-version") != FORMAT_VERSION:
        raise ValidationError(f"{where}: key index format version {obj.get('format-version')!r} is not supported")
    try:
        return IndexManifest(
            key_ids=tuple(int(i) for i in obj["key-field-ids"]),
            buckets=int(obj["buckets"]),
            snapshot_id=None if obj["snapshot-id"] is None else int(obj["snapshot-id"]),
            segments=tuple(
                SegmentRef(
                    int(s["bucket"]),
                    str(s["path"]),
                    int(s["rows"]),
                    int(s["size-bytes"]),
                    bool(s["base"]),
                    int(s["folded-remaps"]),
                )
                for s in obj["segments"]
            ),
            remaps=tuple(RemapRef(int(r["id"]), str(r["path"]), tuple(r["old-files"])) for r in obj["remaps"]),
            next_remap_id=int(obj["next-remap-id"]),
            retired=tuple((str(r["path"]), int(r["at-ms"])) for r in obj.get("retired", ())),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValidationError(f"{where}: malformed key index manifest: {e!r}") from e


def encode_manifest(manifest: IndexManifest) -> bytes:
    return json.dumps(manifest.to_json(), separators=(",", ":"), sort_keys=True).encode()


# ---------------------------------------------------------------------------
# Changes
# ---------------------------------------------------------------------------


def apply_change(current: IndexManifest, change: IndexChange, snapshot_id: int) -> tuple[IndexManifest, list[str]]:
    """``current`` with ``change`` applied, as of ``snapshot_id``; and the files it no longer uses.

    A new base replaces exactly the segments it merged: if its bucket holds a
    segment it did not merge (written since), the change cannot be rebased
    (:class:`KeyIndexConflict`). Remaps commute with a batch's entries (a
    remap moves only entries that still point at a rewritten file, and a
    batch's entries point at its new files), so they are simply appended.
    """
    held = {s.path for s in current.segments}
    missing = sorted(set(change.replaced) - held)
    if missing:
        raise KeyIndexConflict(f"key index segments {missing} were replaced by a concurrent commit")
    replaced = set(change.replaced)
    segments = [s for s in current.segments if s.path not in replaced]
    for new in change.segments:
        if new.base:
            newer = [s.path for s in segments if s.bucket == new.bucket]
            if newer:
                raise KeyIndexConflict(f"key index bucket {new.bucket} gained segments {newer} after it was merged")
    segments.extend(change.segments)
    remaps = list(current.remaps)
    next_id = current.next_remap_id
    for path, old_files in change.remaps:
        remaps.append(RemapRef(next_id, path, tuple(old_files)))
        next_id += 1
    ordered = tuple(sorted(segments, key=lambda s: (s.bucket, not s.base)))  # stable: deltas keep their order
    kept, dropped = _drop_folded(remaps, ordered, current.buckets)
    manifest = replace(current, snapshot_id=snapshot_id, segments=ordered, remaps=tuple(kept), next_remap_id=next_id)
    return manifest, sorted(replaced) + [r.path for r in dropped]


RETIRED_GRACE_MS = 15 * 60 * 1000


def retire(
    manifest: IndexManifest, paths: Iterable[str], now_ms: int, grace_ms: int = RETIRED_GRACE_MS
) -> tuple[IndexManifest, list[str]]:
    """``manifest`` remembering ``paths`` as retired now; and the retired files old enough to delete."""
    retired = [*manifest.retired, *((p, now_ms) for p in paths)]
    expired = [p for p, at in retired if now_ms - at >= grace_ms]
    kept = tuple((p, at) for p, at in retired if now_ms - at < grace_ms)
    return replace(manifest, retired=kept), expired


def empty_manifest(key_ids: Sequence[int], buckets: int, snapshot_id: int | None = None) -> IndexManifest:
    if buckets <= 0:
        raise ValidationError(f"a key index needs at least one bucket, got {buckets}")
    return IndexManifest(tuple(key_ids), buckets, snapshot_id)


def _folded(segments: Iterable[SegmentRef]) -> int:
    bases = [s.folded_remaps for s in segments if s.base]
    return bases[0] if bases else 0


def _drop_folded(
    remaps: list[RemapRef], segments: Sequence[SegmentRef], buckets: int
) -> tuple[list[RemapRef], list[RemapRef]]:
    """Remaps every bucket has folded in are no longer needed."""
    per_bucket = dict.fromkeys(range(buckets), 0)
    for s in segments:
        if s.base:
            per_bucket[s.bucket] = s.folded_remaps
    everywhere = min(per_bucket.values()) if per_bucket else 0
    return [r for r in remaps if r.remap_id > everywhere], [r for r in remaps if r.remap_id <= everywhere]


# ---------------------------------------------------------------------------
# Does the index describe the table?
# ---------------------------------------------------------------------------


def describes(manifest: IndexManifest, metadata: TableMetadata, branch: str = MAIN_BRANCH) -> bool:
    """Whether ``manifest`` is the index of ``branch``'s head in ``metadata``."""
    head = metadata.snapshot_for_ref(branch)
    return describes_snapshot(manifest, metadata, None if head is None else head.snapshot_id)


def describes_snapshot(manifest: IndexManifest, metadata: TableMetadata, head_id: int | None) -> bool:
    """Whether ``manifest`` is the index of snapshot ``head_id`` (None: no snapshot yet).

    It is when it was written for that snapshot, or for an ancestor and every
    snapshot since changed no data file (a maintenance commit that only
    removed delete files, a foreign delete-only commit: a key whose row a
    foreign delete removed keeps an entry, and deleting it again is harmless;
    or a batch of transaction markers, which changed no file at all).
    """
    if manifest.snapshot_id == head_id:
        return True
    if head_id is None:
        return False
    for snapshot in metadata.ancestors_of(head_id):
        if snapshot.snapshot_id == manifest.snapshot_id:
            return True
        if _changes_data(snapshot.summary):
            return False
    return manifest.snapshot_id is None  # every snapshot since the table was created left data files alone


def _changes_data(summary: Mapping[str, str]) -> bool:
    if summary.get("changed-partition-count") == "0":
        return False  # no file added or removed: a commit of Kafka offsets only (transaction markers)
    counts = [summary.get("added-data-files"), summary.get("deleted-data-files")]
    if summary.get("operation") in ("append", "overwrite", "replace") and all(c is None for c in counts):
        return True  # a writer that keeps no counts: assume the worst
    return any(c not in (None, "0") for c in counts)


def check_manifest_for(manifest: IndexManifest, key_ids: Sequence[int], table: str) -> None:
    """The index must be keyed by the table's key columns."""
    if tuple(key_ids) != manifest.key_ids:
        raise KeyIndexConflict(
            f"table {table}: key index is keyed by field ids {list(manifest.key_ids)}, the table's key is "
            f"{list(key_ids)}; rebuild it with `floe index rebuild {table}`"
        )
