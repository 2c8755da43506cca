"""Removing files from a snapshot by rewriting only the manifests that list them.

A removed file stays in the new snapshot's manifests as a DELETED entry (with
its original sequence numbers), so that readers of the snapshot's changes see
what was removed; every other live entry of that manifest is carried as
EXISTING. Manifests without a removed file are kept as they are. What was
found and rewritten is remembered per manifest, so a retry on a new base
reads and rewrites only manifests it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from commit.snapshot_producer import Attempt
from table.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile


def filtered_entries(
    entries: Iterable[ManifestEntry], removed: frozenset[str], snapshot_id: int
) -> Iterator[ManifestEntry]:
    """A manifest's entries with ``removed`` files marked DELETED by ``snapshot_id``.

    Deletions recorded by earlier snapshots are dropped: they belong to
    those snapshots' changes, not to this one.
    """
    for entry in entries:
        if entry.status == ManifestEntryStatus.DELETED:
            continue
        if entry.data_file.location_key in removed:
            yield replace(entry, status=ManifestEntryStatus.DELETED, snapshot_id=snapshot_id)
        else:
            yield replace(entry, status=ManifestEntryStatus.EXISTING)


class ManifestFilter:
    """Removes the files at ``paths`` from the manifests of one ``content``.

    A path is a :attr:`~table.manifest.DataFile.location_key`: a deletion
    vector is named by its Puffin file and offset, as the file holds others.
    """

    def __init__(self, content: ManifestContent, paths: Iterable[str]) -> None:
        self.content = content
        self.paths = frozenset(paths)
        self._found: dict[str, dict[str, ManifestEntry]] = {}  # manifest -> live entries to remove
        self._rewritten: dict[str, ManifestFile] = {}  # manifest -> its rewrite

    def locate(self, attempt: Attempt, manifests: Sequence[ManifestFile]) -> dict[str, ManifestEntry]:
        """Path -> live entry of each file to remove that ``manifests`` hold."""
        found: dict[str, ManifestEntry] = {}
        for manifest in manifests:
            found.update(self._scan(attempt, manifest))
        return found

    def missing(self, attempt: Attempt, manifests: Sequence[ManifestFile]) -> set[str]:
        """The paths to remove that no live entry of ``manifests`` holds."""
        if not self.paths:
            return set()
        return set(self.paths - self.locate(attempt, manifests).keys())

    def apply(self, attempt: Attempt, manifests: Sequence[ManifestFile]) -> list[ManifestFile]:
        """``manifests`` with each one that holds a file to remove replaced by its rewrite."""
        return [self._rewrite(attempt, m) if self._scan(attempt, m) else m for m in manifests]

    def _scan(self, attempt: Attempt, manifest: ManifestFile) -> dict[str, ManifestEntry]:
        key = manifest.manifest_path
        if key not in self._found:
            self._found[key] = {}
            if self._may_hold(manifest):
                self._found[key] = {
                    e.data_file.location_key: e
                    for e in attempt.read_entries(manifest)
                    if e.status != ManifestEntryStatus.DELETED and e.data_file.location_key in self.paths
                }
        return self._found[key]

    def _may_hold(self, manifest: ManifestFile) -> bool:
        live = manifest.added_files_count + manifest.existing_files_count
        return bool(self.paths) and manifest.content == self.content and live > 0

    def _rewrite(self, attempt: Attempt, manifest: ManifestFile) -> ManifestFile:
        key = manifest.manifest_path
        if key not in self._rewritten:
            entries = filtered_entries(attempt.read_entries(manifest), self.paths, attempt.snapshot_id)
            self._rewritten[key] = attempt.write_manifest(manifest.partition_spec_id, manifest.content, entries)
        return self._rewritten[key]
