"""The runner: lease, partial progress, stop requests, failures and metrics, on real tables."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.base import Catalog
from commit.metadata_committer import PendingCommit
from commit.operations.row_delta import RowDelta
from compaction.committer import GroupResult
from compaction.maintenance import MaintenanceOptions
from compaction.metrics import CompactionMetrics
from compaction.runner import CompactionOptions, CompactionRunner, RunReport, RunResult
from compaction.scheduler import CompactionScheduler, Schedule, run_once
from tests.commit.producer_support import CommitTable
from tests.compaction.conftest import CompactionTable, metric, small_target

NO_MAINTENANCE = MaintenanceOptions(remove_dangling_deletes=False, expire_snapshots=False, remove_orphans=False)


def runner(
    table: CommitTable, metrics: CompactionMetrics, *, maintenance: MaintenanceOptions = NO_MAINTENANCE, **kwargs
) -> CompactionRunner:  # type: ignore[no-untyped-def]
    rewrite = small_target(**kwargs.pop("rewrite", {}))
    options = CompactionOptions(rewrite=rewrite, maintenance=maintenance, batch_size=kwargs.pop("batch_size", 65_536))
    return CompactionRunner(table.catalog, table.identifier, options, metrics, **kwargs)


def live_files_exist(table: CompactionTable) -> bool:
    return all(os.path.exists(p) for p in table.live_paths())


class StopWhenGroupWrites(threading.Event):
    """SIGTERM's event, set as soon as group ``group_id`` has a file on disk: a half-written group."""

    def __init__(self, data_dir: Path, group_id: int) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.prefix = f"{group_id:05d}-compact-"

    def is_set(self) -> bool:
        if not super().is_set() and self.written():
            self.set()
        return super().is_set()

    def written(self) -> list[str]:
        return [n for _, _, names in os.walk(self.data_dir) for n in names if n.startswith(self.prefix)]


def test_a_run_rewrites_commits_and_counts(
    partitioned_table: CompactionTable, registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    table = partitioned_table
    files = table.append_files(6, 200, categories=("a", "b"), payload_bytes=20)
    table.commit(RowDelta([], [table.write_position_deletes(files[0], [1, 2])]))
    rows = table.id_multiset()

    report = runner(table, metrics).run()

    assert report.result == RunResult.SUCCESS and report.errors == []
    assert report.count(GroupResult.COMMITTED) == 2 and len(report.snapshot_ids) == 1  # partial progress off
    assert table.id_multiset() == rows and live_files_exist(table)
    assert len(table.data_files()) == 2
    assert metric(registry, "floe_compaction_runs_total", result="success") == 1
    assert metric(registry, "floe_compaction_groups_total", result="committed") == 2
    assert metric(registry, "floe_compaction_data_files_rewritten_total") == 12
    assert metric(registry, "floe_compaction_bytes_rewritten_total") == sum(f.file_size_in_bytes for f in files)
    assert metric(registry, "floe_compaction_files_added_total") == 2
    assert metric(registry, "floe_compaction_delete_files_removed_total") == 1  # its only file was replaced
    assert metric(registry, "floe_compaction_running") == 0
    assert metric(registry, "floe_compaction_last_success_timestamp_seconds") is not None
    assert metric(registry, "floe_compaction_run_duration_seconds_count") == 1
    assert metric(registry, "floe_table_data_files") == 2 and metric(registry, "floe_table_delete_files") == 0
    assert metric(registry, "floe_table_snapshots") == len(table.metadata().snapshots)
    assert table.catalog.leases.get_lease(f"compaction:{table.identifier}") is None  # released


def test_partial_progress_commits_batch_after_batch(partitioned_table: CompactionTable, metrics: CompactionMetrics) -> None:
    table = partitioned_table
    table.append_files(3, 50, categories=("a", "b", "c", "d", "e", "f"))
    rows = table.id_multiset()
    before = table.current().snapshot_id
    partial = {"partial-progress.enabled": "true", "partial-progress.max-commits": "3", "rewrite-all": "true"}

    report = runner(table, metrics, rewrite=partial).run()

    assert report.result == RunResult.SUCCESS and report.count(GroupResult.COMMITTED) == 6
    assert len(report.snapshot_ids) == 3
    history = [s for s in table.metadata().ancestors_of(table.current().snapshot_id)]
    assert [s.snapshot_id for s in history[:3]] == report.snapshot_ids[::-1] and history[3].snapshot_id == before
    assert all(s.operation == "replace" for s in history[:3])
    assert table.id_multiset() == rows and len(table.data_files()) == 6


def test_two_runners_at_once_one_skips(catalog: Catalog, registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    base = CommitTable.create(catalog)
    table = CompactionTable(base.catalog, base.identifier, base.io)
    table.append_files(6, 20)
    second: list[RunReport] = []

    def meanwhile(pending: PendingCommit) -> None:
        if not second:  # another replica's hourly run starts while this one commits
            second.append(runner(table, metrics, holder="replica-2").run())

    first = runner(table, metrics, holder="replica-1", before_commit=meanwhile).run()

    assert first.result == RunResult.SUCCESS and first.count(GroupResult.COMMITTED) == 1
    assert second[0].result == RunResult.SKIPPED and second[0].groups == []
    assert metric(registry, "floe_compaction_runs_total", result="skipped") == 1
    later = runner(table, metrics, holder="replica-2").run()  # the lease was released
    assert later.result == RunResult.SUCCESS and later.planned_groups == 0


def test_a_stop_between_groups_interrupts_the_run(
    partitioned_table: CompactionTable, registry: CollectorRegistry, metrics: CompactionMetrics
) -> None:
    table = partitioned_table
    table.append_files(5, 400, categories=("a", "b", "c"), payload_bytes=20)
    rows = table.id_multiset()
    stop = StopWhenGroupWrites(Path(table.location) / "data", group_id=1)
    partial = {"partial-progress.enabled": "true", "partial-progress.max-commits": "3"}
    maintenance = MaintenanceOptions()  # would run, but not after a stop

    report = runner(table, metrics, rewrite=partial, stop=stop, batch_size=100, maintenance=maintenance).run()

    assert report.result == RunResult.INTERRUPTED
    assert [(g.group_id, g.result) for g in report.groups] == [(0, GroupResult.COMMITTED), (1, GroupResult.ABANDONED)]
    assert report.planned_groups == 3 and report.maintenance == {}
    assert stop.written() == []  # the half-written group's files are gone
    assert table.id_multiset() == rows and live_files_exist(table)
    assert len(table.data_files()) == 1 + 5 + 5
    assert metric(registry, "floe_compaction_runs_total", result="interrupted") == 1
    assert metric(registry, "floe_compaction_groups_total", result="abandoned") == 1
    assert metric(registry, "floe_compaction_groups_total", result="committed") == 1
    assert metric(registry, "floe_compaction_last_success_timestamp_seconds") is None
    assert not list((Path(table.location) / "metadata").glob("compaction-*"))  # position maps


def test_a_stop_without_partial_progress_commits_nothing(partitioned_table: CompactionTable, metrics: CompactionMetrics) -> None:
    table = partitioned_table
    table.append_files(5, 400, categories=("a", "b"), payload_bytes=20)
    before = table.current().snapshot_id
    on_disk = table.files_on_disk()
    stop = StopWhenGroupWrites(Path(table.location) / "data", group_id=1)

    report = runner(table, metrics, stop=stop, batch_size=100).run()

    assert report.result == RunResult.INTERRUPTED
    assert sorted((g.group_id, g.result) for g in report.groups) == [(0, GroupResult.ABANDONED), (1, GroupResult.ABANDONED)]
    assert table.current().snapshot_id == before and report.snapshot_ids == []
    assert table.files_on_disk() == on_disk  # group 0's finished files went too


def test_a_failed_group_fails_alone(partitioned_table: CompactionTable, registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    table = partitioned_table
    files = table.append_files(5, 100, categories=("a", "b"))
    os.remove(files[7].file_path)  # partition b lost a file: its group cannot be read
    partial = {"partial-progress.enabled": "true"}

    report = runner(table, metrics, rewrite=partial).run()

    assert report.result == RunResult.PARTIAL
    assert sorted(g.result for g in report.groups) == [GroupResult.COMMITTED, GroupResult.FAILED]
    assert any(files[7].file_path in e for e in report.errors)
    assert metric(registry, "floe_compaction_groups_total", result="failed") == 1
    assert metric(registry, "floe_compaction_runs_total", result="partial") == 1
    live = {f.file_path for f in table.data_files()}
    assert {f.file_path for f in files[5:]} <= live and not {f.file_path for f in files[:5]} & live


def test_deletes_carried_over_by_a_run_are_counted(table: CompactionTable, registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    files = table.append_files(6, 50)
    deleted: list[Optional[int]] = []

    def ingest(pending: PendingCommit) -> None:
        if not deleted:
            table.commit(RowDelta([], [table.write_position_deletes(files[4], [7, 8])]))
            deleted.append(1)

    report = runner(table, metrics, before_commit=ingest).run()

    assert report.result == RunResult.SUCCESS and report.deletes_carried_over == 2
    assert metric(registry, "floe_compaction_deletes_carried_over_total") == 2
    assert table.id_multiset() == sorted(set(range(300)) - {207, 208})


# --------------------------------------------------------------------------
# The scheduler
# --------------------------------------------------------------------------


def test_one_shot_runs_every_table_and_survives_a_broken_one(sqlite_catalog: Catalog, registry: CollectorRegistry) -> None:
    metrics = CompactionMetrics(registry)
    tables = []
    for name in ("db.one", "db.two", "db.three"):
        base = CommitTable.create(sqlite_catalog, name)
        tables.append(CompactionTable(base.catalog, base.identifier, base.io))
        tables[-1].append_files(6, 10)
    sqlite_catalog.drop_table("db.two")  # its run is skipped: ingest has not created it (again)
    current = sqlite_catalog.load_table("db.three").metadata_location
    missing = current.replace(".metadata.json", "-gone.metadata.json")
    sqlite_catalog.swap_metadata_location("db.three", current, missing)  # its runner raises: its metadata is gone

    outcomes = run_once([runner(t, metrics) for t in tables])

    assert [(o.table, o.ok) for o in outcomes] == [("db.one", True), ("db.two", True), ("db.three", False)]
    assert outcomes[1].report is not None and outcomes[1].report.result == RunResult.SKIPPED
    assert metric(registry, "floe_compaction_runs_total", table="db.two", result="skipped") == 1
    assert outcomes[2].error is not None and outcomes[2].report is None
    assert metric(registry, "floe_compaction_runs_total", table="db.three", result="failed") == 1
    assert len(tables[0].data_files()) == 1


def test_rounds_repeat_until_stopped(table: CompactionTable, registry: CollectorRegistry, metrics: CompactionMetrics) -> None:
    table.append_files(6, 10)
    stop = threading.Event()
    scheduler = CompactionScheduler([runner(table, metrics, stop=stop)], Schedule(interval_s=0.05, jitter_s=0.01), stop)

    def stop_after_three_rounds() -> None:
        while scheduler.rounds < 3 and not stop.wait(0.01):
            pass
        stop.set()

    watcher = threading.Thread(target=stop_after_three_rounds)
    watcher.start()
    scheduler.run_forever()
    watcher.join()

    assert scheduler.rounds >= 3
    runs = sum(metric(registry, "floe_compaction_runs_total", result=r) or 0 for r in ("success", "interrupted"))
    assert runs == scheduler.rounds
    assert len(table.data_files()) == 1


def test_rounds_start_interval_plus_jitter_apart() -> None:
    schedule = Schedule(interval_s=3600, jitter_s=300)
    rng = random.Random(7)
    delays = [schedule.next_delay(rng, elapsed_s=600) for _ in range(200)]
    assert all(3000 <= d <= 3300 for d in delays) and max(delays) - min(delays) > 200
    assert schedule.next_delay(rng, elapsed_s=5000) == 0  # an overrun: the next round starts at once
    assert 0 <= schedule.first_delay(rng) <= 300
    with pytest.raises(ValueError):
        Schedule(interval_s=60, jitter_s=60)
