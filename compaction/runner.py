"""One compaction run of one table: lease, plan, rewrite, commit, maintain, report.

A run holds the table's lease (``compaction:<table>``) from start to end, so
that one compactor works on a table at a time; a run that cannot take it is
skipped. The lease is renewed in the background; if it is lost the run stops
between groups (the catalog's compare-and-swap keeps the table correct
either way: the lease only keeps compactors from wasting work on each other).

A stop request (the service sets ``stop`` on SIGTERM) is honoured between
groups and, through the rewriter's checks, inside the group being written:
that group is abandoned and its files deleted. Groups already rewritten are
committed when partial progress is on (they are finished work); with it off,
the run's single commit is abandoned too. The run then ends ``interrupted``.

Every outcome is counted in :class:`~compaction.metrics.CompactionMetrics`
and logged as structured records (``extra=``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from commit.catalog.base import Catalog, Leases
from commit.errors import CatalogError
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.metadata_committer import BeforeCommit
from commit.operations.errors import ValidationException
from compaction.committer import BatchCommit, CommitContext, GroupCommit, GroupResult, RewriteCommitter, RewrittenGroup
from compaction.maintenance import MaintenanceOptions
from compaction.maintenance.dangling_deletes import remove_dangling_deletes
from compaction.maintenance.expire_snapshots import ExpiryPolicy, expire_snapshots
from compaction.maintenance.orphan_files import remove_orphan_files
from compaction.metrics import CompactionMetrics
from compaction.options import RewriteOptions
from compaction.planner import FileGroup, RewritePlan, plan_table_rewrite, split_for_commits
from compaction.rewriter import (
    GroupExecutor,
    GroupRewrite,
    GroupRewriteTask,
    InProcessExecutor,
    RewriteStatus,
    SparkExecutor,
)
from table.errors import TableError
from table.io import FileIO
from table.locations import data_location, metadata_location
from table.metadata import Snapshot, TableMetadata, now_ms
from table.parquet.projection import DEFAULT_BATCH_SIZE
from table.parquet.writer import WriterOptions
from table.scan import TableScan

log = logging.getLogger(__name__)

LEASE_TTL_MS_DEFAULT = 10 * 60 * 1000


class RunResult(str, Enum):
    """The ``result`` label of ``floe_compaction_runs_total``."""

    SUCCESS = "success"
    PARTIAL = "partial"
    FAILED = "failed"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class CompactionOptions:
    """How a run rewrites (Iceberg's ``rewrite_data_files`` option strings) and maintains."""

    rewrite: Mapping[str, str] = field(default_factory=dict)
    maintenance: MaintenanceOptions = field(default_factory=MaintenanceOptions)
    lease_ttl_ms: int = LEASE_TTL_MS_DEFAULT
    batch_size: int = DEFAULT_BATCH_SIZE  # rows per read batch: also how often a group checks for stop
    max_carry_rounds: int = 10


@dataclass
class RunReport:
    """What one run did."""

    table: str
    run_id: str
    result: RunResult = RunResult.SUCCESS
    planned_groups: int = 0
    groups: list[GroupCommit] = field(default_factory=list)
    snapshot_ids: list[int] = field(default_factory=list)
    delete_files_removed: int = 0
    maintenance: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def count(self, result: GroupResult) -> int:
        return sum(1 for g in self.groups if g.result == result)

    @property
    def deletes_carried_over(self) -> int:
        return sum(g.deletes_carried_over for g in self.groups)


# --------------------------------------------------------------------------
# The lease
# --------------------------------------------------------------------------


class LeaseKeeper:
    """Holds a lease while a run lasts: renews it every third of its TTL, sets ``lost`` if it lapses."""

    def __init__(self, leases: Leases, name: str, holder: str, ttl_ms: int) -> None:
        self.leases = leases
        self.name = name
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.lost = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        if not self.leases.acquire_lease(self.name, self.holder, self.ttl_ms):
            return False
        self._thread = threading.Thread(target=self._renew, name=f"lease-{self.name}", daemon=True)
        self._thread.start()
        return True

    def release(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.leases.release_lease(self.name, self.holder)

    def _renew(self) -> None:
        while not self._done.wait(self.ttl_ms / 3000.0):
            try:
                renewed = self.leases.renew_lease(self.name, self.holder, self.ttl_ms)
            except CatalogError as e:  # the lease may still be valid: try again next period
                log.warning("could not renew lease", extra={"lease": self.name, "error": str(e)})
                continue
            if not renewed:
                log.error("lease lapsed; stopping the run", extra={"lease": self.name, "holder": self.holder})
                self.lost.set()
                return


class _AnySet:
    """A stop check that fires when any of its events is set."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


class CompactionRunner:
    """Runs one compaction of ``identifier`` per :meth:`run` call (see the module docstring).

    ``spark``: rewrite groups as Spark tasks on this SparkSession, else in
    this process. ``before_commit`` is passed to every rewrite commit (tests
    and benchmarks use it to race ingest against the compactor).
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: TableIdentifierLike,
        options: CompactionOptions | None,
        metrics: CompactionMetrics,
        spark: Any = None,
        *,
        stop: threading.Event | None = None,
        holder: str | None = None,
        before_commit: BeforeCommit | None = None,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.catalog = catalog
        self.identifier = to_table_identifier(identifier)
        self.table = str(self.identifier)
        self.options = options or CompactionOptions()
        self.metrics = metrics
        self.spark = spark
        self.stop = stop or threading.Event()
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.before_commit = before_commit
        self.clock_ms = clock_ms
        metrics.init_table(self.table)

    @property
    def lease_name(self) -> str:
        return f"compaction:{self.table}"

    def run(self) -> RunReport:
        """One run; a report for every outcome but unexpected errors, which are counted and raised."""
        report = RunReport(self.table, uuid.uuid4().hex)
        if not self.catalog.table_exists(self.identifier):  # floe ingest creates it: a compactor may start first
            report.result = RunResult.SKIPPED
            self.metrics.run_skipped(self.table)
            log.warning(
                "compaction skipped: the table does not exist (floe ingest creates it when it starts)",
                extra=self.log_fields(report),
            )
            return report
        lease = LeaseKeeper(self.catalog.leases, self.lease_name, self.holder, self.options.lease_ttl_ms)
        if not lease.acquire():
            report.result = RunResult.SKIPPED
            self.metrics.run_skipped(self.table)
            log.info("compaction skipped: another holder has the lease", extra=self.log_fields(report))
            return report
        started = time.monotonic()
        self.metrics.run_started(self.table)
        log.info("compaction run started", extra=self.log_fields(report, holder=self.holder))
        try:
            _Run(self, report, lease).execute()
        except BaseException as error:
            report.result = RunResult.FAILED
            report.errors.append(f"{type(error).__name__}: {error}")
            log.exception("compaction run failed", extra=self.log_fields(report))
            raise
        finally:
            report.duration_s = time.monotonic() - started
            self.metrics.run_finished(self.table, report.result.value, report.duration_s)
            lease.release()
        log.info("compaction run finished", extra=self._summary(report))
        return report

    def log_fields(self, report: RunReport, **more: Any) -> dict[str, Any]:
        return {"table": self.table, "run_id": report.run_id, **more}

    def _summary(self, report: RunReport) -> dict[str, Any]:
        return self.log_fields(
            report,
            result=report.result.value,
            duration_s=round(report.duration_s, 3),
            planned_groups=report.planned_groups,
            **{f"groups_{r.value}": report.count(r) for r in GroupResult},
            commits=len(report.snapshot_ids),
            deletes_carried_over=report.deletes_carried_over,
            delete_files_removed=report.delete_files_removed,
        )


class _Run:
    """The state of one leased run."""

    def __init__(self, runner: CompactionRunner, report: RunReport, lease: LeaseKeeper) -> None:
        self.runner = runner
        self.report = report
        self.lease = lease
        self.halt = _AnySet(runner.stop, lease.lost)
        self.budget_exceeded = False
        self.map_paths: list[str] = []

    def execute(self) -> None:
        runner = self.runner
        loaded = runner.catalog.load_table(runner.identifier)
        metadata, io = loaded.metadata, loaded.io
        options = RewriteOptions.parse(runner.options.rewrite, metadata.properties)
        start = metadata.current_snapshot()
        try:
            if start is not None:
                plan = plan_table_rewrite(metadata, TableScan(io, metadata).plan_files(), options)
                self._rewrite(plan, metadata, start, io, options)
        finally:
            io.delete_many(self.map_paths)  # already gone unless a commit raised midway
        if not self.halt.is_set():  # a stopping service has seconds, not minutes
            self._maintain()
            self._observe_health(options)
        self.report.result = self._result()

    # -- rewriting -----------------------------------------------------------------

    def _rewrite(
        self, plan: RewritePlan, metadata: TableMetadata, start: Snapshot, io: FileIO, options: RewriteOptions
    ) -> None:
        self.report.planned_groups = len(plan.groups)
        log.info(
            "rewrite planned",
            extra=self.runner.log_fields(
                self.report,
                starting_snapshot_id=start.snapshot_id,
                groups=len(plan.groups),
                files=plan.total_files,
                bytes=plan.total_bytes,
                output_spec_id=plan.output_spec_id,
            ),
        )
        if not plan.groups:
            return
        work = _Work(self.runner, self.report.run_id, metadata, io, plan, options)
        committer = RewriteCommitter(work.commit_context(start, io))
        executor = self._executor(options, io)
        failed_batches = 0
        for batch in _batches(plan, options):
            if self.halt.is_set():
                break
            failed_batches += 0 if self._run_batch(batch, work, executor, committer) else 1
            if options.partial_progress_enabled and failed_batches > options.partial_progress_max_failed_commits:
                self.budget_exceeded = True
                self.report.errors.append(
                    f"{failed_batches} failed commits: more than partial-progress.max-failed-commits"
                )
                break

    def _run_batch(
        self,
        batch: Sequence[tuple[int, FileGroup]],
        work: _Work,
        executor: GroupExecutor,
        committer: RewriteCommitter,
    ) -> bool:
        """Rewrite and commit one batch; False when it should have committed and did not."""
        tasks = [work.task(group_id, group) for group_id, group in batch]
        self.map_paths.extend(t.position_map_path for t in tasks)
        ready = self._collect(executor.run(tasks), dict(batch))
        if self.halt.is_set() and not work.options.partial_progress_enabled:
            self._abandon(ready, committer)  # all or nothing: the run's one commit is off
            return True
        if not ready:
            return self.halt.is_set()
        outcome = committer.commit(ready)
        self._record_commit(outcome)
        return outcome.committed

    def _executor(self, options: RewriteOptions, io: FileIO) -> GroupExecutor:
        if self.runner.spark is None:
            return InProcessExecutor(self.halt)
        return SparkExecutor(self.runner.spark, options.max_concurrent_file_group_rewrites, self.halt, io)

    def _collect(self, rewrites: Sequence[GroupRewrite], groups: Mapping[int, FileGroup]) -> list[RewrittenGroup]:
        """Count rewrites that did not finish; the ones ready to commit."""
        ready = []
        for rewrite in rewrites:
            if rewrite.status == RewriteStatus.REWRITTEN:
                group = groups[rewrite.group_id]
                ready.append(RewrittenGroup(group, rewrite))
                log.info(
                    "file group rewritten",
                    extra=self.runner.log_fields(
                        self.report,
                        group_id=rewrite.group_id,
                        files_in=len(group.tasks),
                        bytes_in=group.total_bytes,
                        files_out=len(rewrite.added_files),
                        rows=rewrite.rows_written,
                        duration_s=round(rewrite.duration_s, 3),
                    ),
                )
            elif rewrite.status == RewriteStatus.ABANDONED:
                self._record(GroupCommit(rewrite.group_id, GroupResult.ABANDONED, error="stopped while writing"))
            elif rewrite.status == RewriteStatus.FAILED:
                assert rewrite.error is not None
                log.error(
                    "file group rewrite failed",
                    extra=self.runner.log_fields(
                        self.report,
                        group_id=rewrite.group_id,
                        error=rewrite.error.message,
                        error_type=rewrite.error.error_type,
                        traceback=rewrite.error.traceback,
                    ),
                )
                self._record(GroupCommit(rewrite.group_id, GroupResult.FAILED, error=rewrite.error.message))
        return ready

    def _abandon(self, ready: Sequence[RewrittenGroup], committer: RewriteCommitter) -> None:
        for group in ready:
            committer.discard(group.rewrite)
            self._record(GroupCommit(group.group_id, GroupResult.ABANDONED, error="stopped before the commit"))

    def _record_commit(self, outcome: BatchCommit) -> None:
        removed = len(outcome.removed_delete_files)
        for group in outcome.groups:
            self._record(group, delete_files_removed=removed if group.result == GroupResult.COMMITTED else 0)
            if group.result == GroupResult.COMMITTED:
                removed = 0  # counted once, on the batch's first committed group
        if outcome.snapshot_id is not None:
            self.report.snapshot_ids.append(outcome.snapshot_id)
            self.report.delete_files_removed += len(outcome.removed_delete_files)

    def _record(self, group: GroupCommit, delete_files_removed: int = 0) -> None:
        table, metrics = self.runner.table, self.runner.metrics
        self.report.groups.append(group)
        metrics.group_finished(table, group.result.value)
        if group.result == GroupResult.COMMITTED:
            metrics.files_rewritten(
                table,
                data_files=group.data_files_replaced,
                data_bytes=group.bytes_replaced,
                files_added=group.files_added,
                delete_files_removed=delete_files_removed,
                deletes_carried_over=group.deletes_carried_over,
            )
        elif group.error:
            self.report.errors.append(f"group {group.group_id} {group.result.value}: {group.error}")

    # -- maintenance ---------------------------------------------------------------

    def _maintain(self) -> None:
        runner = self.runner
        settings = runner.options.maintenance
        steps: list[tuple[str, bool, Callable[[], Any]]] = [
            ("remove_dangling_deletes", settings.remove_dangling_deletes, self._remove_dangling_deletes),
            ("expire_snapshots", settings.expire_snapshots, self._expire_snapshots),
            ("remove_orphan_files", settings.remove_orphans, self._remove_orphans),
        ]
        for name, enabled, step in steps:
            if not enabled or self.halt.is_set():
                continue
            try:
                self.report.maintenance[name] = step()
            except (CatalogError, TableError, ValidationException) as error:
                self.report.errors.append(f"{name}: {type(error).__name__}: {error}")
                log.exception("maintenance step failed", extra=runner.log_fields(self.report, step=name))

    def _remove_dangling_deletes(self) -> int:
        runner = self.runner
        result = remove_dangling_deletes(runner.catalog, runner.identifier)
        removed = len(result.removed)
        if removed:
            runner.metrics.files_rewritten(
                runner.table, data_files=0, data_bytes=0, files_added=0, delete_files_removed=removed
            )
            self.report.delete_files_removed += removed
        return removed

    def _expire_snapshots(self) -> int:
        runner = self.runner
        settings = runner.options.maintenance
        policy = ExpiryPolicy(settings.expire_older_than_ms, settings.retain_last)
        result = expire_snapshots(runner.catalog, runner.identifier, policy, clock_ms=runner.clock_ms)
        return len(result.expired_snapshot_ids)

    def _remove_orphans(self) -> int:
        runner = self.runner
        window = runner.options.maintenance.orphan_older_than_ms
        return len(remove_orphan_files(runner.catalog, runner.identifier, window, clock_ms=runner.clock_ms).deleted)

    # -- the end ---------------------------------------------------------------------

    def _observe_health(self, options: RewriteOptions) -> None:
        runner = self.runner
        loaded = runner.catalog.load_table(runner.identifier)
        tasks = TableScan(loaded.io, loaded.metadata).plan_files()
        runner.metrics.observe_table_health(runner.table, tasks, options.min_file_size_bytes, loaded.metadata)

    def _result(self) -> RunResult:
        report = self.report
        if self.runner.stop.is_set():
            return RunResult.INTERRUPTED
        if self.lease.lost.is_set():
            report.errors.append("the lease lapsed during the run")
            return RunResult.FAILED
        if self.budget_exceeded:
            return RunResult.FAILED
        if not report.errors:
            return RunResult.SUCCESS
        did_something = report.count(GroupResult.COMMITTED) > 0 or bool(report.maintenance)
        return RunResult.PARTIAL if did_something else RunResult.FAILED


def _batches(plan: RewritePlan, options: RewriteOptions) -> list[tuple[tuple[int, FileGroup], ...]]:
    """(group id, group) in job order, in commit batches: several with partial progress, else one."""
    numbered = list(enumerate(plan.groups))
    if options.partial_progress_enabled:
        return split_for_commits(numbered, options.partial_progress_max_commits)
    return [tuple(numbered)]


class _Work:
    """Turns planned groups into rewrite tasks and a commit context for one run."""

    def __init__(
        self,
        runner: CompactionRunner,
        run_id: str,
        metadata: TableMetadata,
        io: FileIO,
        plan: RewritePlan,
        options: RewriteOptions,
    ) -> None:
        self.runner = runner
        self.run_id = run_id
        self.metadata = metadata
        self.io = io
        self.plan = plan
        self.options = options
        self.work_prefix = f"{metadata_location(metadata)}/compaction-{run_id}"  # files of this run: never in the table
        self.data_location = data_location(metadata)
        self.writer = WriterOptions.for_table(metadata)

    def task(self, group_id: int, group: FileGroup) -> GroupRewriteTask:
        return GroupRewriteTask(
            group_id=group_id,
            group=group,
            table_location=self.metadata.location,
            io=self.io,
            data_location=self.data_location,
            schema=self.metadata.schema(),
            output_spec=self.metadata.spec_by_id(self.plan.output_spec_id),
            position_map_path=f"{self.work_prefix}-{group_id:05d}.positions.parquet",
            operation_id=self.run_id,
            writer=replace(self.writer, target_file_size_bytes=self.options.write_max_file_size),
            batch_size=self.runner.options.batch_size,
            stop_path=f"{self.work_prefix}.stop" if self.runner.spark is not None else None,
            row_lineage=self.metadata.tracks_row_lineage,
        )

    def commit_context(self, start: Snapshot, io: FileIO) -> CommitContext:
        return CommitContext(
            catalog=self.runner.catalog,
            identifier=self.runner.identifier,
            io=io,
            starting_snapshot=start,
            schema=self.metadata.schema(),
            output_spec=self.metadata.spec_by_id(self.plan.output_spec_id),
            data_location=self.data_location,
            run_id=self.run_id,
            use_starting_sequence_number=self.options.use_starting_sequence_number,
            max_carry_rounds=self.runner.options.max_carry_rounds,
            before_commit=self.runner.before_commit,
            writer=self.writer,
            deletion_vectors=self.metadata.tracks_row_lineage,
        )
