"""Writing metadata versions and swapping them into the catalog, retrying only lost races.

The lower half of the commit loop, shared by every commit: the snapshot
producer (:mod:`commit.snapshot_producer`), snapshot expiry and table set-up
hand a :class:`MetadataCommitter` a function that builds the new metadata from
a fresh load, and it writes the next ``<version>-<uuid>.metadata.json``,
compare-and-swaps the catalog pointer and, when the catalog cannot tell
whether the swap happened, reloads until it can (spec: "Metastore Tables").

:class:`CommitFiles` tracks every file a commit writes, recorded before the
file is, so that a failed or superseded attempt's files can be deleted and a
half-written one is never forgotten.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from commit.catalog.base import SERVER_WRITTEN, Catalog, LoadedTable
from commit.errors import CatalogDatabaseError, CommitConflict, CommitNotApplied, CommitStateUnknown
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.retry import RetryPolicy
from table.errors import TableError
from table.io import FileIO
from table.metadata import TableMetadata

log = logging.getLogger(__name__)


class CommitFiles:
    """Every file one commit wrote (manifests, manifest lists, metadata), in order.

    A path is recorded before its file is written, so a half-written file is
    never forgotten. Deleting forgets only the files that were deleted.
    """

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._paths: dict[str, None] = {}

    def add(self, path: str) -> str:
        self._paths[path] = None
        return path

    def paths(self) -> list[str]:
        return list(self._paths)

    def delete_except(self, keep: Iterable[str]) -> list[str]:
        """Delete every recorded file not in ``keep``; the paths that could not be deleted."""
        kept = set(keep)
        failed = []
        for path in [p for p in self._paths if p not in kept]:
            try:
                self.io.delete(path)
                del self._paths[path]
            except TableError as e:
                log.warning("could not delete uncommitted file %s: %s", path, e)
                failed.append(path)
        return failed

    def delete_all_after(self, error: BaseException) -> None:
        """Delete everything after a failed commit, noting on ``error`` what could not go."""
        failed = self.delete_except(())
        if failed:
            error.add_note(f"files left behind by the failed commit (delete them): {failed}")


@dataclass(frozen=True)
class PendingCommit:
    """A written metadata file about to be swapped in (handed to the before-commit hook)."""

    attempt: int
    base_location: str
    base: TableMetadata
    new_location: str
    metadata: TableMetadata


@dataclass(frozen=True)
class CommittedMetadata:
    """The result of a successful swap: from which base, to which file."""

    base_location: str
    base: TableMetadata
    location: str
    metadata: TableMetadata
    attempts: int
    settled_unknown: bool = False  # the swap's outcome had to be checked by reloading


BeforeCommit = Callable[[PendingCommit], None]
BuildMetadata = Callable[[LoadedTable, int], TableMetadata | None]
Landed = Callable[[TableMetadata], bool]


class MetadataCommitter:
    """Writes each attempt's metadata file and swaps it in, retrying only lost races.

    ``build(loaded, attempt)`` makes the new metadata from a fresh load of
    the table, or None when there is nothing (left) to change;
    ``landed(metadata)`` tells from a reloaded table whether this commit is
    in it (used only when the swap's outcome is unknown).
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: TableIdentifierLike,
        files: CommitFiles,
        *,
        before_commit: BeforeCommit | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        unit_random: Callable[[], float] = random.random,
    ) -> None:
        self.catalog = catalog
        self.identifier = to_table_identifier(identifier)
        self.files = files
        self._before_commit = before_commit
        self._sleep = sleep
        self._clock = clock
        self._random = unit_random

    def commit(self, build: BuildMetadata, landed: Landed) -> CommittedMetadata | None:
        """Commit; None when ``build`` found nothing to change."""
        loaded = self.catalog.load_table(self.identifier)
        backoff = RetryPolicy.for_commits(loaded.metadata.properties).backoff(self._clock, self._random)
        # Read before any swap: a bad status-check property must fail the commit
        # while it is still certain that nothing landed, not while settling.
        checks = RetryPolicy.for_status_checks(loaded.metadata.properties)
        attempt = 1
        while True:
            updated = build(loaded, attempt)
            if updated is None:
                return None
            location, metadata = self._prepare(loaded, updated, attempt)
            try:
                committed_location, committed = self._swap(loaded, location, metadata)
            except CommitConflict as conflict:
                delay_ms = backoff.next_delay_ms()
                if delay_ms is None:
                    conflict.add_note(f"gave up after {attempt} attempt(s)")
                    raise
                log.info(
                    "commit to %s lost the race (attempt %d); retrying in %.0f ms", self.identifier, attempt, delay_ms
                )
                self._sleep(delay_ms / 1000.0)
            except CommitStateUnknown as unknown:
                return self._settle(unknown, checks, loaded, location, metadata, attempt, landed)
            else:
                self._delete_dropped_metadata(loaded.metadata, committed)
                return CommittedMetadata(
                    loaded.metadata_location, loaded.metadata, committed_location, committed, attempt
                )
            loaded = self.catalog.load_table(self.identifier)
            attempt += 1

    def _prepare(self, loaded: LoadedTable, updated: TableMetadata, attempt: int) -> tuple[str, TableMetadata]:
        """The attempt, staged by the catalog (its metadata file written, or :data:`SERVER_WRITTEN` where
        the catalog writes it), then shown to the before-commit hook."""
        staged = self.catalog.stage(loaded, updated, self.files)
        location, metadata = staged.metadata_location, staged.metadata
        if self._before_commit is not None:
            self._before_commit(PendingCommit(attempt, loaded.metadata_location, loaded.metadata, location, metadata))
        return location, metadata

    def _swap(self, loaded: LoadedTable, location: str, metadata: TableMetadata) -> tuple[str, TableMetadata]:
        """The compare-and-swap, by the catalog; the committed location and metadata."""
        committed = self.catalog.commit(self.identifier, loaded, LoadedTable(location, metadata, loaded.io))
        return committed.metadata_location, committed.metadata

    def _delete_dropped_metadata(self, base: TableMetadata, committed: TableMetadata) -> None:
        """After a commit: delete the metadata files that left the log, if the table asks for it.

        The commit has landed, so nothing here may fail it (a caller would
        then clean up files the table now points to): a failure is only
        logged, and the file is an orphan for orphan-file removal.
        """
        try:
            dropped = base.metadata_files_dropped_by(committed)
        except Exception as error:  # noqa: BLE001 - the commit landed; see the docstring
            log.warning(
                "could not tell which old metadata files to delete after a commit",
                extra={"table": str(self.identifier), "error": str(error)},
            )
            return
        for path in dropped:
            try:
                self.files.io.delete(path)
            except (OSError, TableError) as error:
                log.warning(
                    "could not delete an old metadata file after a commit",
                    extra={"table": str(self.identifier), "path": path, "error": str(error)},
                )

    def _settle(
        self,
        unknown: CommitStateUnknown,
        checks: RetryPolicy,
        loaded: LoadedTable,
        location: str,
        metadata: TableMetadata,
        attempt: int,
        landed: Landed,
    ) -> CommittedMetadata:
        """Reload until the outcome is known: landed (success) or not (:class:`CommitNotApplied`).

        Anything else that goes wrong here leaves the outcome unknown, and
        ``unknown`` is raised: the caller must then keep every file it wrote.
        """
        current = self._reload_for_check(unknown, checks)
        try:
            logged = {e.metadata_file for e in current.metadata.metadata_log}
            applied = current.metadata_location == location or location in logged or landed(current.metadata)
        except Exception as e:
            unknown.add_note(f"the outcome could not be checked: {e!r}")
            raise unknown from e
        if applied:
            log.warning("commit to %s had an unknown outcome; a reload shows it landed", self.identifier)
            if location == SERVER_WRITTEN:  # the REST server's file: the reload found it
                location, metadata = current.metadata_location, current.metadata
            return CommittedMetadata(loaded.metadata_location, loaded.metadata, location, metadata, attempt, True)
        raise CommitNotApplied(
            str(self.identifier),
            f"commit to table {self.identifier} did not land: the catalog reported an unknown outcome "
            f"({unknown}), and a reload shows the table at {current.metadata_location!r} without it",
        ) from unknown

    def _reload_for_check(self, unknown: CommitStateUnknown, checks: RetryPolicy) -> LoadedTable:
        """Reload the table, retrying failures per ``commit.status-check.*``; give up with ``unknown``."""
        backoff = checks.backoff(self._clock, self._random)
        while True:
            try:
                return self.catalog.load_table(self.identifier)
            except (CatalogDatabaseError, TableError) as e:
                delay_ms = backoff.next_delay_ms()
                if delay_ms is None:
                    unknown.add_note(
                        f"the outcome could not be checked: reloading failed {backoff.attempts} time(s), last: {e}"
                    )
                    raise unknown from e
                self._sleep(delay_ms / 1000.0)
            except Exception as e:
                unknown.add_note(f"the outcome could not be checked: {e!r}")
                raise unknown from e


def commit_metadata_change(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    build: BuildMetadata,
    landed: Landed,
    *,
    what: str,
    io: FileIO | None = None,
    files: CommitFiles | None = None,
    keep: Callable[[CommittedMetadata], Iterable[str] | None] | None = None,
    before_commit: BeforeCommit | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CommittedMetadata | None:
    """Commit ``build`` (a schema, a spec, expired snapshots, a snapshot); None when it found nothing to change.

    ``files`` records what the attempts write (default: a new record over
    ``io``). After success the files ``keep`` names stay (default: the new
    metadata file; None from ``keep``: all of them) and the rest, from lost
    attempts, are deleted; after a failure everything is deleted; after an
    unknown outcome nothing (any of them may be the table's now). Failures
    carry a note: ``commit of a <what> to table <identifier>``.
    """
    ident = to_table_identifier(identifier)
    if files is None:
        files = CommitFiles(io or catalog.load_table(ident).io)
    committer = MetadataCommitter(catalog, ident, files, before_commit=before_commit, sleep=sleep)
    try:
        committed = committer.commit(build, landed)
    except CommitStateUnknown:
        raise  # it may have landed: every file may be part of the table
    except Exception as error:
        error.add_note(f"commit of a {what} to table {ident}")
        files.delete_all_after(error)
        raise
    kept = () if committed is None else (keep(committed) if keep else (committed.location,))
    if kept is not None:
        files.delete_except(kept)
    return committed
