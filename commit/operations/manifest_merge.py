"""Manifest merging: keep the number of manifests per snapshot small (``ManifestMergeManager``).

Every append adds at least one manifest; without merging, planning a scan
would read thousands of tiny manifests. Manifests of the same content (data
or deletes) and partition spec are bin-packed, in list order, into bins of
about ``commit.manifest.target-size-bytes``; a bin of several manifests is
rewritten as one. Packing runs from the end of the list so that the bin left
under-filled is the first one, which holds the newest manifests and will be
merged again by the next commit.

The first bin (the one holding the list's first manifest, normally this
commit's new one) is merged only once it has
``commit.manifest.min-count-to-merge`` manifests: otherwise each commit would
rewrite the whole recent bin. Older bins always merge, so that a few large
manifests never stop the small ones behind them from being merged.

:func:`plan_merge` and :func:`merged_entries` are pure; :class:`ManifestMerger`
writes the merged manifests through a callback and keeps them across commit
retries: a bin made of the same manifests is not rewritten twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from commit.errors import commit_property
from table import properties as props
from table.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile

_T = TypeVar("_T")


@dataclass(frozen=True)
class MergeSettings:
    """The table's manifest merge properties (Java's defaults)."""

    enabled: bool = True
    min_count_to_merge: int = 100
    target_size_bytes: int = 8 * 1024 * 1024

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> MergeSettings:
        return cls(
            enabled=commit_property(props.MANIFEST_MERGE_ENABLED, properties),
            min_count_to_merge=commit_property(props.MANIFEST_MIN_MERGE_COUNT, properties),
            target_size_bytes=commit_property(props.MANIFEST_TARGET_SIZE, properties),
        )


@dataclass(frozen=True)
class Bin:
    """Manifests of one content and spec that end up together: merged into one, or kept as they are."""

    content: ManifestContent
    spec_id: int
    manifests: tuple[ManifestFile, ...]
    merge: bool


def pack_end(items: Sequence[_T], weight: Callable[[_T], int], target: int) -> list[list[_T]]:
    """Consecutive bins of total weight at most ``target`` (an item heavier alone gets its own),
    filled from the end, order kept: Java's ``ListPacker(target, 1, false).packEnd``."""
    bins: list[list[_T]] = []
    current: list[_T] = []
    current_weight = 0
    for item in reversed(items):
        w = weight(item)
        if current and current_weight + w <= target:
            current.append(item)
            current_weight += w
            continue
        if current:
            bins.append(current)
        current, current_weight = [item], w
    if current:
        bins.append(current)
    return [list(reversed(b)) for b in reversed(bins)]


def plan_merge(manifests: Sequence[ManifestFile], settings: MergeSettings) -> list[Bin]:
    """How to merge a snapshot's manifests: data bins, then delete bins, each by spec id descending."""
    if not settings.enabled:
        return [Bin(m.content, m.partition_spec_id, (m,), False) for m in manifests]
    bins: list[Bin] = []
    for content in (ManifestContent.DATA, ManifestContent.DELETES):
        of_content = [m for m in manifests if m.content == content]
        if of_content:
            bins.extend(_plan_content(content, of_content, settings))
    return bins


def _plan_content(content: ManifestContent, manifests: list[ManifestFile], settings: MergeSettings) -> Iterator[Bin]:
    first = manifests[0].manifest_path
    by_spec: dict[int, list[ManifestFile]] = {}
    for m in manifests:
        by_spec.setdefault(m.partition_spec_id, []).append(m)
    for spec_id in sorted(by_spec, reverse=True):
        for packed in pack_end(by_spec[spec_id], lambda m: m.manifest_length, settings.target_size_bytes):
            holds_first = any(m.manifest_path == first for m in packed)
            too_few = holds_first and len(packed) < settings.min_count_to_merge
            yield Bin(content, spec_id, tuple(packed), merge=len(packed) > 1 and not too_few)


def merged_entries(entries: Iterable[ManifestEntry], snapshot_id: int) -> Iterator[ManifestEntry]:
    """The entries of a merged manifest written by snapshot ``snapshot_id``.

    Files this snapshot adds or deletes keep that status; other live files
    become EXISTING (with the sequence numbers they inherited); deletions by
    earlier snapshots are dropped, their snapshots already recorded them.
    """
    for entry in entries:
        ours = entry.snapshot_id == snapshot_id
        if entry.status == ManifestEntryStatus.DELETED:
            if ours:
                yield entry
        elif entry.status == ManifestEntryStatus.ADDED and ours:
            yield entry
        else:
            yield replace(entry, status=ManifestEntryStatus.EXISTING)


WriteMerged = Callable[[Bin, Iterator[ManifestEntry]], ManifestFile]
ReadEntries = Callable[[ManifestFile], Iterable[ManifestEntry]]


class ManifestMerger:
    """Merges a snapshot's manifests, reusing what it merged in earlier attempts.

    ``read`` streams a manifest's entries (with inherited sequence numbers);
    ``write`` writes one merged manifest for a bin from its entries.
    """

    def __init__(self, settings: MergeSettings, snapshot_id: int) -> None:
        self.settings = settings
        self.snapshot_id = snapshot_id
        self._merged: dict[tuple[str, ...], ManifestFile] = {}

    def merge(self, manifests: Sequence[ManifestFile], read: ReadEntries, write: WriteMerged) -> list[ManifestFile]:
        result: list[ManifestFile] = []
        for b in plan_merge(manifests, self.settings):
            result.extend([self._merged_manifest(b, read, write)] if b.merge else b.manifests)
        return result

    def _merged_manifest(self, b: Bin, read: ReadEntries, write: WriteMerged) -> ManifestFile:
        key = tuple(m.manifest_path for m in b.manifests)
        if key not in self._merged:
            entries = (e for m in b.manifests for e in read(m))
            self._merged[key] = write(b, merged_entries(entries, self.snapshot_id))
        return self._merged[key]
