"""Why an operation cannot be committed on top of the current table.

A :class:`ValidationException` is final for that commit: retrying the same
change cannot succeed, so the commit loop does not retry it (only a lost
compare-and-swap is retried). Each subclass names the files at fault, so the
caller can rebase its change, or an operator can see what collided.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def _listed(paths: Iterable[str], limit: int = 10) -> str:
    items = sorted(paths)
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


class ValidationException(Exception):
    """The change does not apply to the table as it now is."""


class InvalidStartingSnapshot(ValidationException):
    """The snapshot a validation starts from is not in the branch's history (any more)."""

    def __init__(self, snapshot_id: int, reason: str) -> None:
        self.snapshot_id = snapshot_id
        super().__init__(f"cannot validate from snapshot {snapshot_id}: {reason}")


class MissingFiles(ValidationException):
    """Files the operation removes or replaces are no longer live in the table."""

    def __init__(self, action: str, paths: Iterable[str]) -> None:
        self.paths = frozenset(paths)
        super().__init__(
            f"cannot {action}: {len(self.paths)} file(s) are no longer in the table: {_listed(self.paths)}"
        )


class MissingReferencedDataFiles(ValidationException):
    """Data files that new position deletes point at were removed since the operation began."""

    def __init__(self, removed_by: Mapping[str, int]) -> None:
        self.removed_by = dict(removed_by)  # data file path -> id of the snapshot that removed it (-1: unknown)
        self.paths = frozenset(self.removed_by)
        super().__init__(
            f"position deletes refer to {len(self.paths)} data file(s) that are no longer in the table: "
            f"{_listed(self.paths)}"
        )


class ConflictingDataFiles(ValidationException):
    """Data files matching the conflict filter were added since the starting snapshot."""

    def __init__(self, added_by: Mapping[str, int], filter_text: str) -> None:
        self.added_by = dict(added_by)  # path -> snapshot id
        self.paths = frozenset(self.added_by)
        super().__init__(
            f"{len(self.paths)} conflicting data file(s) matching {filter_text} were added concurrently: "
            f"{_listed(self.paths)}"
        )


class ConflictingDeleteFiles(ValidationException):
    """Delete files matching the conflict filter (or hitting removed files) were added since the start."""

    def __init__(self, added_by: Mapping[str, int], filter_text: str) -> None:
        self.added_by = dict(added_by)
        self.paths = frozenset(self.added_by)
        super().__init__(
            f"{len(self.paths)} conflicting delete file(s) matching {filter_text} were added concurrently: "
            f"{_listed(self.paths)}"
        )


class ReplacedFilesTooNew(ValidationException):
    """A rewrite would give its new files an older data sequence number than files it replaces.

    Equality deletes committed between the two numbers never applied to the
    replaced files but would apply to the new ones: rows would vanish.
    """

    def __init__(self, data_sequence_number: int, paths: Iterable[str]) -> None:
        self.data_sequence_number = data_sequence_number
        self.paths = frozenset(paths)
        super().__init__(
            f"cannot give the new files data sequence number {data_sequence_number}: "
            f"replaced files are newer (was the rewrite planned on a later snapshot?): {_listed(self.paths)}"
        )


class RewriteConflict(ValidationException):
    """Rows of the replaced files were deleted since the rewrite started.

    ``deleted_positions`` maps each replaced data file to the sorted row
    positions deleted since the starting snapshot, read from the
    ``position_delete_files``: a compactor translates them to positions in
    its new files and retries with those as carried-over deletes.
    ``equality_delete_files`` is set only when the new files do not keep the
    starting sequence number (then later equality deletes would not apply).
    """

    def __init__(
        self,
        deleted_positions: Mapping[str, Sequence[int]],
        position_delete_files: Iterable[str] = (),
        equality_delete_files: Iterable[str] = (),
        starting_snapshot_id: int | None = None,
    ) -> None:
        self.deleted_positions = {path: list(pos) for path, pos in deleted_positions.items()}
        self.position_delete_files = frozenset(position_delete_files)
        self.equality_delete_files = frozenset(equality_delete_files)
        self.starting_snapshot_id = starting_snapshot_id
        parts = []
        if self.deleted_positions:
            counts = ", ".join(f"{p} ({len(v)} row(s))" for p, v in sorted(self.deleted_positions.items()))
            parts.append(f"rows of replaced files were deleted by position: {counts}")
        if self.equality_delete_files:
            parts.append(f"equality deletes added: {_listed(self.equality_delete_files)}")
        super().__init__(
            f"rewrite since snapshot {starting_snapshot_id} conflicts with concurrent deletes; " + "; ".join(parts)
        )


class DuplicateDeletionVectors(ValidationException):
    """A deletion vector would be added for a data file that already has a live one (committed
    since the writer read the table): a v3 table allows one per data file, so the writer must
    merge with the new one and try again."""

    def __init__(self, data_files: Mapping[str, str]) -> None:
        self.data_files = dict(data_files)  # data file -> the live DV's Puffin file
        super().__init__(
            f"{len(self.data_files)} data file(s) already have a deletion vector this commit does not replace: "
            f"{_listed(self.data_files)}"
        )
