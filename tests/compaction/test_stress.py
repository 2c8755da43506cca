"""Stress: the compactor runs again and again while ingest streams upserts and deletes.

A real Kafka broker feeds Floe's streaming ingest (processing-time trigger,
about one batch a second, position deletes found through the key index for
every key it updates or deletes) while the compactor runs at least five times
in this process with partial progress and a 16 KB target, expiring snapshots
and removing dangling deletes as it goes.

Inside each run's first rewrite commit (the ``before_commit`` hook, after the
metadata file is written and before the compare-and-swap), the test

* waits until ingest has committed a batch on top of the rewrite's base, so
  that ingest's position deletes land on rows of the files being replaced
  (counted: the compactor must carry them over to its new files), and
* erases a few live rows of the files being replaced with position deletes,
  as another engine's row-level ``DELETE`` in merge-on-read mode does. The
  compactor's swap then loses; it must carry those positions over too, and
  bring the key index up to them.

Afterwards, and after a final full compaction of the quiet table, Floe's
reader and Iceberg's Java runtime both return exactly the expected table:
ingest's final row of each key, less the rows the eraser deleted; ``main``
never held an equality delete, and the key index checks clean.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from commit.key_index.manifest import describes
from commit.key_index.rebuild import index_problems
from commit.key_index.store import current_manifest
from commit.metadata_committer import PendingCommit
from commit.operations.row_delta import RowDelta
from commit.snapshot_producer import SnapshotProducer
from compaction.maintenance import MaintenanceOptions
from compaction.metrics import GROUP_RESULTS, RUN_RESULTS, CompactionMetrics
from compaction.runner import CompactionOptions, CompactionRunner, RunReport, RunResult
from ingest.driver.metrics import IngestMetrics
from ingest.driver.stream import run_ingest
from service.http import OpsServer
from table.deletes.writers import PositionDeleteWriter
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, ManifestEntryStatus, read_manifest_entries, read_manifest_list
from table.metadata import TableMetadata
from table.scan import TableScan
from tests.ingest.e2e_support import Delivered, change_events, expected_table, normalized, produce, upsert_job
from tests.service.test_ingest_command import http_get

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.oracle]

KEYS = 3_000
CHUNK = 400  # events produced per tick
TICK_S = 1.0
MIN_RUNS = 5
TARGET = 16 * 1024
PARTITIONS = 4  # bucket[4](id)
IDENTIFIER = "db.events"

COMPACTION_METRICS = (
    "floe_compaction_runs_total",
    "floe_compaction_data_files_rewritten_total",
    "floe_compaction_bytes_rewritten_total",
    "floe_compaction_files_added_total",
    "floe_compaction_delete_files_removed_total",
    "floe_compaction_groups_total",
    "floe_compaction_deletes_carried_over_total",
    "floe_compaction_run_duration_seconds_count",
    "floe_compaction_run_duration_seconds_sum",
    "floe_compaction_last_success_timestamp_seconds",
    "floe_compaction_running",
    "floe_table_data_files",
    "floe_table_delete_files",
    "floe_table_small_files",
    "floe_table_avg_file_size_bytes",
    "floe_table_snapshots",
)


# ----------------------------------------------------------------------------- the producer


class Producer(threading.Thread):
    """Produces the change stream ``CHUNK`` events per tick until told to stop."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="stress-producer", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.events = change_events(200_000, KEYS, seed=11)
        self.delivered: list[Delivered] = []
        self.stop = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            for start in range(0, len(self.events), CHUNK):
                if self.stop.is_set():
                    return
                self.delivered += produce(self.bootstrap, self.topic, self.events[start:start + CHUNK])
                self.stop.wait(TICK_S)
        except BaseException as error:  # reported by the test
            self.error = error


# ----------------------------------------------------------------------------- the eraser


def replaced_data_files(io: FileIO, metadata: TableMetadata) -> dict[str, DataFile]:
    """The data files the current snapshot removes (its own DELETED entries)."""
    snapshot = metadata.current_snapshot()
    assert snapshot is not None
    return {
        entry.data_file.file_path: entry.data_file
        for manifest in read_manifest_list(io, snapshot.manifest_list)
        if manifest.added_snapshot_id == snapshot.snapshot_id
        for entry in read_manifest_entries(io, manifest)
        if entry.status == ManifestEntryStatus.DELETED and entry.data_file.content == DataFileContent.DATA
    }


def live_rows(io: FileIO, metadata: TableMetadata) -> set[tuple[int, int]]:
    """(id, version) of every live row: a row image is unique by its version."""
    rows = TableScan(io, metadata).to_arrow().select(["id", "version"]).to_pylist()
    return {(r["id"], r["version"]) for r in rows}


def ingest_positions_on(io: FileIO, metadata: TableMetadata, after_snapshot_id: Optional[int],
                        replaced: set[str]) -> int:
    """Position deletes that ingest committed after ``after_snapshot_id`` on rows of ``replaced`` files."""
    hits = 0
    snapshot = metadata.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != after_snapshot_id:
        if "floe.batch-id" in (snapshot.summary or {}):
            for manifest in read_manifest_list(io, snapshot.manifest_list):
                if manifest.added_snapshot_id != snapshot.snapshot_id:
                    continue
                for entry in read_manifest_entries(io, manifest):
                    f = entry.data_file
                    assert f.content != DataFileContent.EQUALITY_DELETES, "ingest wrote an equality delete"
                    if entry.status == ManifestEntryStatus.ADDED and f.content == DataFileContent.POSITION_DELETES:
                        with io.open_input(f.file_path) as source:
                            paths = pq.read_table(source, columns=["file_path"]).column("file_path").to_pylist()
                        hits += sum(1 for p in paths if p in replaced)
        parent = snapshot.parent_snapshot_id
        snapshot = next((s for s in metadata.snapshots if s.snapshot_id == parent), None)
    return hits


@dataclass
class Eraser:
    """The compactor's ``before_commit`` hook (see the module docstring)."""

    catalog_uri: str
    warehouse: str
    ingest_running: threading.Event
    rng: random.Random = field(default_factory=lambda: random.Random(5))
    erased: set[tuple[int, int]] = field(default_factory=set)  # (id, version) position-deleted
    positions_erased: int = 0
    ingest_hits: int = 0  # rows of replaced files that ingest position-deleted during the rewrite
    commits_raced: int = 0
    seen: set[frozenset[str]] = field(default_factory=set)  # replaced-file sets raced already

    def __call__(self, pending: PendingCommit) -> None:
        """Race each rewrite commit once (its carry-over rounds retry with fresh producers)."""
        io = FileIO.for_location(pending.new_location)
        replaced = replaced_data_files(io, pending.metadata)
        if not replaced or frozenset(replaced) in self.seen:
            return
        self.seen.add(frozenset(replaced))
        base_snapshot = pending.base.current_snapshot_id
        with SqlCatalog(self.catalog_uri, self.warehouse) as catalog:
            if self.ingest_running.is_set():
                self._wait_for_ingest(catalog, base_snapshot)
            metadata = catalog.load_table(IDENTIFIER).metadata
            replaced_rows = {path: self._rows(io, path) for path in replaced}
            self.ingest_hits += ingest_positions_on(io, metadata, base_snapshot, set(replaced))
            self._erase(catalog, io, metadata, replaced, replaced_rows)
        self.commits_raced += 1

    @staticmethod
    def _rows(io: FileIO, path: str) -> list[tuple[int, int]]:
        with io.open_input(path) as source:
            table = pq.read_table(source, columns=["id", "version"])
        return list(zip(table.column("id").to_pylist(), table.column("version").to_pylist()))

    @staticmethod
    def _wait_for_ingest(catalog: Catalog, base_snapshot: Optional[int], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if catalog.load_table(IDENTIFIER).metadata.current_snapshot_id != base_snapshot:
                return
            time.sleep(0.2)

    def _erase(self, catalog: Catalog, io: FileIO, metadata: TableMetadata, replaced: dict[str, DataFile],
               replaced_rows: dict[str, list[tuple[int, int]]]) -> None:
        """Position-delete up to 3 live rows in each of up to 2 replaced files, in one row delta."""
        live = live_rows(io, metadata)
        deletes, erased = [], set()
        for path in sorted(replaced)[:2]:
            candidates = [pos for pos, row in enumerate(replaced_rows[path]) if row in live]
            chosen = sorted(self.rng.sample(candidates, min(3, len(candidates))))
            if not chosen:
                continue
            data_file = replaced[path]
            writer = PositionDeleteWriter(io, f"{metadata.location}/data", metadata.schema(),
                                          metadata.spec_by_id(data_file.spec_id), data_file.partition)
            for pos in chosen:
                writer.delete(path, pos)
            deletes += writer.close()
            erased |= {replaced_rows[path][pos] for pos in chosen}
        if deletes:
            SnapshotProducer(catalog, IDENTIFIER, RowDelta([], deletes)).commit()
            self.erased |= erased
            self.positions_erased += len(erased)


# ----------------------------------------------------------------------------- metrics


def scrape(port: int) -> dict[str, list[tuple[str, float]]]:
    """name -> [(labels, value)] of the table's series on /metrics."""
    status, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    series: dict[str, list[tuple[str, float]]] = {}
    for name, labels, value in re.findall(r"^([a-z_]+)(\{[^}]*\})? (\S+)$", text, re.M):
        if f'table="{IDENTIFIER}"' in labels:
            series.setdefault(name, []).append((labels, float(value)))
    return series


def value(series: dict[str, list[tuple[str, float]]], name: str, **labels: str) -> float:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for ls, v in series.get(name, []) if all(w in ls for w in wanted))


def check_scrape(series: dict[str, list[tuple[str, float]]], reports: list[RunReport], started: float) -> None:
    """Every compaction metric is there, with values that agree with the finished runs."""
    missing = [name for name in COMPACTION_METRICS if name not in series]
    assert not missing, f"not on /metrics: {missing}"
    assert {ls for ls, _ in series["floe_compaction_runs_total"]} >= {f'{{result="{r}",table="{IDENTIFIER}"}}'
                                                                       for r in RUN_RESULTS}
    assert len(series["floe_compaction_groups_total"]) == len(GROUP_RESULTS)
    assert value(series, "floe_compaction_runs_total") >= len(reports)
    assert value(series, "floe_compaction_run_duration_seconds_count") >= len(reports)
    done = [r for r in reports if r.result in (RunResult.SUCCESS, RunResult.PARTIAL)]
    assert value(series, "floe_compaction_groups_total", result="committed") >= sum(len(r.groups) for r in done) > 0
    assert value(series, "floe_compaction_data_files_rewritten_total") >= value(series, "floe_compaction_files_added_total") > 0
    assert value(series, "floe_compaction_bytes_rewritten_total") > 0
    assert value(series, "floe_compaction_deletes_carried_over_total") > 0
    assert started <= value(series, "floe_compaction_last_success_timestamp_seconds") <= time.time()
    assert value(series, "floe_compaction_running") == 0, "scraped between runs"
    assert value(series, "floe_table_data_files") > 0 and value(series, "floe_table_snapshots") > 0
    assert 0 <= value(series, "floe_table_small_files") <= value(series, "floe_table_data_files")
    assert value(series, "floe_table_avg_file_size_bytes") > 0
    assert value(series, "floe_table_delete_files") > 0, "ingest committed position deletes after the run started"


# ----------------------------------------------------------------------------- the test


def rewrite_options(**more: str) -> dict[str, str]:
    return {
        "target-file-size-bytes": str(TARGET),
        "min-input-files": "2",
        "max-file-group-size-bytes": str(4 * TARGET),
        "partial-progress.enabled": "true",
        "partial-progress.max-commits": "3",
        **more,
    }


def wait_for_offsets(catalog: Catalog, topic: str, ends: dict[int, int], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if committed_offsets(catalog.load_table(IDENTIFIER).metadata).get(topic) == ends:
            return
        time.sleep(0.5)
    raise AssertionError(f"ingest did not reach {ends} in {timeout_s} s")


def test_compactor_runs_beside_streaming_ingest_and_loses_nothing(
    spark: Any, kafka_bootstrap: str, new_topic: Any, iceberg_oracle: Any, tmp_path: Path
) -> None:
    started = time.time()
    topic = new_topic("stress", partitions=2)
    job = upsert_job(kafka_bootstrap, topic, tmp_path, max_offsets=2_000, available_now=False, processing_time=1.0)
    producer = Producer(kafka_bootstrap, topic)
    producer.start()
    ingest_running = threading.Event()
    ingest_running.set()
    query = run_ingest(job, spark, metrics=IngestMetrics(CollectorRegistry()))

    registry = CollectorRegistry()
    metrics = CompactionMetrics(registry)
    eraser = Eraser(job.catalog.uri, job.catalog.warehouse, ingest_running)
    maintenance = MaintenanceOptions(expire_older_than_ms=0, retain_last=5)
    reports: list[RunReport] = []
    scraped: dict[str, list[tuple[str, float]]] = {}
    reports_at_scrape: list[RunReport] = []
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog, OpsServer(registry=registry) as ops:
        try:
            while sum(1 for r in reports if r.groups) < MIN_RUNS:
                assert len(reports) < 4 * MIN_RUNS, [(r.result, len(r.groups)) for r in reports]
                time.sleep(3.0)
                assert query.is_active, f"ingest stopped: {query.exception()}"
                if not catalog.table_exists(IDENTIFIER):
                    continue
                runner = CompactionRunner(catalog, IDENTIFIER, CompactionOptions(rewrite_options(), maintenance),
                                          metrics, before_commit=eraser)
                reports.append(runner.run())
                if eraser.positions_erased and not scraped:
                    scraped = scrape(ops.port)  # mid-test, while ingest still runs
                    reports_at_scrape = list(reports)
        finally:
            producer.stop.set()
            producer.join(60)
        assert producer.error is None, producer.error
        ends = {p: max(d.offset for d in producer.delivered if d.partition == p) + 1
                for p in {d.partition for d in producer.delivered}}
        wait_for_offsets(catalog, topic, ends)
        ingest_running.clear()
        query.stop()

        assert [r.result for r in reports if r.result not in (RunResult.SUCCESS, RunResult.PARTIAL)] == []
        assert sum(1 for r in reports if r.groups) >= MIN_RUNS, [len(r.groups) for r in reports]
        assert all(g.result.value == "committed" for r in reports for g in r.groups), [
            (g.result, r.errors) for r in reports for g in r.groups]
        carried = sum(r.deletes_carried_over for r in reports)
        assert carried > 0 and eraser.positions_erased > 0 and eraser.ingest_hits > 0, (
            carried, eraser.positions_erased, eraser.ingest_hits)
        print(f"stress: {len(reports)} runs ({sum(1 for r in reports if r.groups)} rewrote), "
              f"{sum(len(r.groups) for r in reports)} groups committed, {eraser.commits_raced} commits raced, "
              f"{eraser.positions_erased} rows position-deleted during rewrites, {carried} carried over, "
              f"{eraser.ingest_hits} rows position-deleted by ingest during rewrites, "
              f"{len(producer.delivered)} events")
        assert scraped, "no mid-test scrape"
        check_scrape(scraped, reports_at_scrape, started)

        expected = {k: row for k, row in expected_table(producer.delivered).items()
                    if (k, row["version"]) not in eraser.erased}
        assert_table(catalog, iceberg_oracle, expected)

        final = CompactionRunner(catalog, IDENTIFIER, CompactionOptions(
            rewrite_options(**{"rewrite-all": "true", "partial-progress.enabled": "false"}), maintenance), metrics).run()
        assert final.result == RunResult.SUCCESS
        loaded = catalog.load_table(IDENTIFIER)
        io = FileIO.for_location(loaded.metadata_location)
        tasks = list(TableScan(io, loaded.metadata).plan_files())
        total = sum(t.data_file.file_size_in_bytes for t in tasks)
        assert len(tasks) <= math.ceil(total / TARGET) + PARTITIONS
        assert not any(t.delete_files for t in tasks)
        assert_table(catalog, iceberg_oracle, expected)
        final_scrape = scrape(ops.port)
        assert value(final_scrape, "floe_table_delete_files") == 0
        assert value(final_scrape, "floe_compaction_deletes_carried_over_total") == carried
        assert_index_clean(catalog)


def assert_index_clean(catalog: Catalog) -> None:
    """The key index describes the head (the compactor registered its rewrites and caught up with the
    eraser's deletes) and agrees with every live row."""
    metadata = catalog.load_table(IDENTIFIER).metadata
    io = FileIO.for_location(metadata.location)
    manifest = current_manifest(io, metadata)
    assert manifest is not None and describes(manifest, metadata)
    assert index_problems(io, metadata, manifest) == []


def assert_table(catalog: Catalog, oracle: Any, expected: dict[int, dict[str, Any]]) -> None:
    loaded = catalog.load_table(IDENTIFIER)
    floe = normalized(TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow())
    assert floe == expected
    java = oracle.call("tests.support.oracle_ops:read_by_metadata_location", metadata_location=loaded.metadata_location)
    assert normalized(java) == expected
