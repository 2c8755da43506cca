"""The rewriter on real tables: live rows in, files of the target size out, positions kept."""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa

from commit.operations.fast_append import FastAppend
from commit.operations.row_delta import RowDelta
from commit.position_map import read_position_map
from compaction.rewriter import RewriteStatus, run_rewrite_task
from table.io import FileIO
from table.parquet.partitioned import write_partitioned
from table.parquet.projection import ParquetFile
from table.reader import read_tasks
from table.tasks import FileScanTask
from tests.compaction.conftest import TARGET, CompactionTable, small_target


def rows_of_files(table: CompactionTable, files) -> list[dict]:  # type: ignore[no-untyped-def]
    schema = table.metadata().schema()
    batches = read_tasks(table.io, [FileScanTask(f) for f in files], schema)
    return [row for batch in batches for row in batch.to_pylist()]


def row_at(table: CompactionTable, path: str, position: int) -> dict:  # type: ignore[type-arg]
    """The row stored at ``position`` of a data file, deletes not applied."""
    schema = table.metadata().schema()
    data_file = next(f for f in table.data_files() if f.file_path == path)
    for start, batch in ParquetFile(table.io, data_file, 1_000_000).batches(schema):
        return batch.slice(position - start, 1).to_pylist()[0]
    raise AssertionError(path)


def with_deletes(table: CompactionTable) -> None:
    """Small files in two partitions, with position and equality deletes on them."""
    a = table.append_files(4, 300, categories=("a", "b"), payload_bytes=40)
    table.commit(RowDelta([], [table.write_position_deletes(a[0], [0, 5, 299]), table.write_position_deletes(a[5], range(0, 300, 3))]))
    table.commit(RowDelta([], [table.write_equality_deletes([10, 310, 1210], partition=("a",))]))
    table.append_files(2, 100, categories=("a",), payload_bytes=40, first_id=10_000)


def test_rewritten_files_hold_exactly_the_live_rows(partitioned_table: CompactionTable) -> None:
    table = partitioned_table
    with_deletes(table)
    plan, start, options = table.plan(**small_target(**{"rewrite-all": "true"}))
    live = Counter(r["id"] for r in table.rows())

    rewritten = table.rewrite(plan, options)

    new_files = [f for g in rewritten for f in g.rewrite.added_files]
    rows = rows_of_files(table, new_files)
    assert Counter(r["id"] for r in rows) == live
    assert sorted(rows, key=lambda r: r["id"]) == table.rows()  # payloads and partitions too
    assert {(f.spec_id, f.partition) for f in new_files} == {(0, ("a",)), (0, ("b",))}
    assert all(g.rewrite.rows_written == g.rewrite.rows_read for g in rewritten)
    assert sum(g.rewrite.rows_written for g in rewritten) == len(live)


def test_output_files_roll_at_the_write_size(table: CompactionTable) -> None:
    table.append_files(40, 400, payload_bytes=16)
    plan, _, options = table.plan(**small_target(**{"rewrite-all": "true"}))

    [group] = table.rewrite(plan, options)

    sizes = [f.file_size_in_bytes for f in group.rewrite.added_files]
    assert len(sizes) >= 3
    # the writer checks its size every 1000 rows (~20 KB here), so a file may pass the mark by that much
    assert all(s <= options.write_max_file_size + 25 * 1024 for s in sizes), (sizes, options.write_max_file_size)
    assert all(s >= TARGET for s in sizes[:-1]), sizes


def test_the_position_map_points_every_survivor_at_its_new_row(partitioned_table: CompactionTable) -> None:
    table = partitioned_table
    with_deletes(table)
    plan, _, options = table.plan(**small_target(**{"rewrite-all": "true"}))
    rewritten = table.rewrite(plan, options)
    checked = 0
    for g in rewritten:
        position_map = read_position_map(table.io, g.rewrite.position_map_path)
        for task in g.group.tasks:
            old = task.data_file.file_path
            survivors = position_map.files[old].survivors.to_pylist()
            expected = [r["_pos"] for b in read_tasks(table.io, [task], table.metadata().schema(), with_positions=True) for r in b.to_pylist()]
            assert survivors == expected
            for pos in survivors[:: max(1, len(survivors) // 7)]:
                [(new_path, [new_pos])] = position_map.translate({old: [pos]}).items()
                assert row_at(table, old, pos) == row_at_new(table, g.rewrite.added_files, new_path, new_pos)
                checked += 1
    assert checked > 20


def row_at_new(table: CompactionTable, files, path: str, position: int) -> dict:  # type: ignore[no-untyped-def,type-arg]
    data_file = next(f for f in files if f.file_path == path)
    for start, batch in ParquetFile(table.io, data_file, 1_000_000).batches(table.metadata().schema()):
        return batch.slice(position - start, 1).to_pylist()[0]
    raise AssertionError(path)


def test_data_of_an_older_spec_is_repartitioned(table: CompactionTable) -> None:
    table.append_files(3, 200, payload_bytes=20)  # unpartitioned, categories mixed below
    mixed = table.rows_table(list(range(5000, 5300)), "a")
    mixed = mixed.set_column(2, mixed.schema.field(2), pa.array(["a", "b", "c"] * 100))
    md = table.metadata()
    table.commit(FastAppend(write_partitioned(table.io, md.location, md.schema(), md.spec(), [mixed])))
    table.evolve_spec([("identity", "category")])
    before = table.rows()
    plan, _, options = table.plan(**small_target(**{"rewrite-all": "true"}))
    assert plan.output_spec_id == 1 and {g.spec_id for g in plan.groups} == {0}

    rewritten = table.rewrite(plan, options)

    new_files = [f for g in rewritten for f in g.rewrite.added_files]
    assert {f.spec_id for f in new_files} == {1}
    assert {f.partition for f in new_files} == {("a",), ("b",), ("c",)}
    rows = rows_of_files(table, new_files)
    assert sorted(rows, key=lambda r: r["id"]) == before
    for f in new_files:
        assert {r["category"] for r in rows_of_files(table, [f])} == {f.partition[0]}
    position_map = read_position_map(table.io, rewritten[0].rewrite.position_map_path)
    mixed_file = next(t.data_file.file_path for t in plan.groups[0].tasks if t.data_file.record_count == 300)
    translated = position_map.translate({mixed_file: [0, 1, 2, 3]})
    assert sorted(len(v) for v in translated.values()) == [1, 1, 2]  # a, b, c, a


def test_a_stop_abandons_the_group_and_deletes_its_files(table: CompactionTable) -> None:
    table.append_files(6, 500, payload_bytes=60)
    plan, _, options = table.plan(**small_target(**{"rewrite-all": "true"}))
    task = table.rewrite_task(0, plan, options, batch_size=100)
    data_dir = Path(table.location) / "data"
    before = set(os.listdir(data_dir))

    class StopOnceWriting(threading.Event):
        """Fires as soon as the rewrite has put a file on disk: a half-written group."""

        def is_set(self) -> bool:
            if not super().is_set() and set(os.listdir(data_dir)) - before:
                self.set()
            return super().is_set()

    result = run_rewrite_task(task, StopOnceWriting())

    assert result.status == RewriteStatus.ABANDONED and result.added_files == ()
    assert set(os.listdir(data_dir)) == before
    assert not FileIO.for_location(task.position_map_path).exists(task.position_map_path)


def test_a_stop_before_the_start_writes_nothing(table: CompactionTable) -> None:
    table.append_files(2, 10)
    plan, _, options = table.plan(**small_target(**{"rewrite-all": "true"}))
    stop = threading.Event()
    stop.set()
    assert run_rewrite_task(table.rewrite_task(0, plan, options), stop).status == RewriteStatus.NOT_STARTED


def test_a_failed_rewrite_reports_the_error_and_leaves_no_files(table: CompactionTable) -> None:
    table.append_files(5, 300, payload_bytes=60)
    plan, _, options = table.plan(**small_target(**{"rewrite-all": "true"}))
    lost = plan.groups[0].tasks[-1].data_file.file_path  # read last: other files are written first
    os.remove(lost)  # storage lost a file: the rewrite cannot read it
    data_dir = Path(table.location) / "data"
    before = set(os.listdir(data_dir))
    task = table.rewrite_task(0, plan, options, batch_size=50)

    result = run_rewrite_task(task)

    assert result.status == RewriteStatus.FAILED and result.error is not None
    assert result.error.error_type == "table.io.MissingFileError" and lost in result.error.message
    assert "Traceback" in result.error.traceback
    assert set(os.listdir(data_dir)) == before
    assert not os.path.exists(task.position_map_path)
