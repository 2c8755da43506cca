"""Compaction test fixtures: real catalogs (from the commit tests), real tables and files.

``CompactionTable`` extends the commit tests' ``CommitTable`` with what the
compactor's tests need: many small files written and committed at once,
rows with payloads big enough for 64 KB targets, partition evolution, and
planning, rewriting and committing groups by hand.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from commit.metadata_committer import CommitFiles, MetadataCommitter
from commit.operations.fast_append import FastAppend
from compaction.committer import CommitContext, RewriteCommitter, RewrittenGroup
from compaction.metrics import CompactionMetrics
from compaction.options import RewriteOptions
from compaction.planner import RewritePlan, plan_table_rewrite
from compaction.rewriter import GroupRewrite, GroupRewriteTask, RewriteStatus, StopCheck, run_rewrite_task
from table.arrow_schema import cast_to_schema
from table.manifest import DataFile, DataFileContent
from table.metadata import Snapshot
from table.parquet.partitioned import write_partitioned
from table.parquet.writer import WriterOptions
from table.partitioning import evolve_partition_spec
from table.scan import TableScan
from table.tasks import FileScanTask
from tests.commit.conftest import (  # noqa: F401  (fixtures, registered by import)
    catalog,
    catalog_uri,
    postgres_catalog,
    postgres_database,
    postgres_server,
    postgres_uri,
    sqlite_catalog,
    sqlite_uri,
)
from tests.commit.producer_support import CommitTable

TARGET = 64 * 1024


def small_target(**more: str) -> dict[str, str]:
    """Rewrite options with a 64 KB target (fast tests), plus ``more``."""
    return {"target-file-size-bytes": str(TARGET), **more}


@dataclass
class CompactionTable(CommitTable):
    """A catalog table with bulk writes and hand-driven compaction steps."""

    def rows_table(self, ids: Sequence[int], category: str, payload_bytes: int = 0) -> pa.Table:
        rng = random.Random(ids[0] if ids else 0)
        data = [f"v{i}-" + "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=payload_bytes)) for i in ids]
        table = pa.table({"id": pa.array(ids, pa.int64()), "data": data, "category": [category] * len(ids)})
        return cast_to_schema(table, self.metadata().schema())

    def write_rows(self, ids: Sequence[int], category: str = "a", payload_bytes: int = 0) -> DataFile:
        md = self.metadata()
        [data_file] = write_partitioned(
            self.io, md.location, md.schema(), md.spec(), [self.rows_table(ids, category, payload_bytes)]
        )
        return data_file

    def append_files(
        self, files: int, rows_per_file: int, categories: Sequence[str] = ("a",), payload_bytes: int = 0, first_id: int = 0
    ) -> list[DataFile]:
        """``files`` data files per category, committed in one append; ids are consecutive from ``first_id``."""
        written = []
        next_id = first_id
        for category in categories:
            for _ in range(files):
                written.append(self.write_rows(range(next_id, next_id + rows_per_file), category, payload_bytes))
                next_id += rows_per_file
        self.commit(FastAppend(written))
        return written

    def evolve_spec(self, fields: Iterable[tuple[str, str]]) -> None:
        """Make a new default partition spec (e.g. ``[("identity", "category")]``)."""
        md = self.metadata()
        spec = evolve_partition_spec(md.partition_specs, md.schema(), list(fields), md.last_partition_id)
        files = CommitFiles(self.io)
        committer = MetadataCommitter(self.catalog, self.identifier, files, sleep=lambda s: None)
        committer.commit(lambda loaded, attempt: loaded.metadata.add_partition_spec(spec, make_default=True), lambda m: False)

    # -- state -------------------------------------------------------------------

    def tasks(self, snapshot_id: Optional[int] = None) -> list[FileScanTask]:
        return list(TableScan(self.io, self.metadata(), snapshot_id=snapshot_id).plan_files())

    def data_files(self) -> list[DataFile]:
        return [t.data_file for t in self.tasks()]

    def delete_files(self) -> set[str]:
        return {p for p in self.live_paths() if p not in {f.file_path for f in self.data_files()}}

    def id_multiset(self, snapshot_id: Optional[int] = None) -> list[int]:
        """Every live id with repeats, sorted: a lost or resurrected row changes it."""
        scan = TableScan(self.io, self.metadata(), snapshot_id=snapshot_id, selected_fields=("id",))
        return sorted(scan.to_arrow().column("id").to_pylist())

    # -- compaction by hand ----------------------------------------------------------

    def plan(self, **options: str) -> tuple[RewritePlan, Snapshot, RewriteOptions]:
        md = self.metadata()
        parsed = RewriteOptions.parse(options, md.properties)
        return plan_table_rewrite(md, TableScan(self.io, md).plan_files(), parsed), self.current(), parsed

    def rewrite_task(self, group_id: int, plan: RewritePlan, options: RewriteOptions, batch_size: int = 65_536) -> GroupRewriteTask:
        md = self.metadata()
        run = uuid.uuid4().hex
        return GroupRewriteTask(
            group_id=group_id,
            group=plan.groups[group_id],
            table_location=md.location,
            io=self.io,
            data_location=f"{md.location}/data",
            schema=md.schema(),
            output_spec=md.spec_by_id(plan.output_spec_id),
            writer=WriterOptions(target_file_size_bytes=options.write_max_file_size),
            position_map_path=f"{md.location}/metadata/compaction-{run}-{group_id:05d}.positions.parquet",
            operation_id=run,
            batch_size=batch_size,
        )

    def rewrite(self, plan: RewritePlan, options: RewriteOptions, stop: Optional[StopCheck] = None) -> list[RewrittenGroup]:
        groups = []
        for group_id, group in enumerate(plan.groups):
            result = run_rewrite_task(self.rewrite_task(group_id, plan, options), stop)
            assert result.status == RewriteStatus.REWRITTEN, result.error
            groups.append(RewrittenGroup(group, result))
        return groups

    def committer(self, start: Snapshot, plan: RewritePlan, **options: Any) -> RewriteCommitter:
        md = self.metadata()
        return RewriteCommitter(
            CommitContext(
                catalog=self.catalog,
                identifier=self.identifier,
                io=self.io,
                starting_snapshot=start,
                schema=md.schema(),
                output_spec=md.spec_by_id(plan.output_spec_id),
                data_location=f"{md.location}/data",
                run_id=uuid.uuid4().hex,
                writer=WriterOptions.for_table(md),
                **options,
            )
        )


def new_file_paths(rewrites: Iterable[GroupRewrite]) -> set[str]:
    return {f.file_path for r in rewrites for f in r.added_files}


def position_delete_count(table: CompactionTable) -> int:
    return sum(
        1 for t in table.tasks() for d in t.delete_files if d.content == DataFileContent.POSITION_DELETES
    )


def max_data_files(total_bytes: int, target: int, partitions: int) -> int:
    return math.ceil(total_bytes / target) + partitions


@pytest.fixture()
def table(sqlite_catalog) -> CompactionTable:  # noqa: F811
    base = CommitTable.create(sqlite_catalog)
    return CompactionTable(base.catalog, base.identifier, base.io)


@pytest.fixture()
def partitioned_table(sqlite_catalog) -> CompactionTable:  # noqa: F811
    base = CommitTable.create(sqlite_catalog, partitioned=True)
    return CompactionTable(base.catalog, base.identifier, base.io)


@pytest.fixture()
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture()
def metrics(registry: CollectorRegistry) -> CompactionMetrics:
    return CompactionMetrics(registry)


def metric(registry: CollectorRegistry, name: str, table: str = "db.t", **labels: str) -> Optional[float]:
    return registry.get_sample_value(name, {"table": table, **labels})
