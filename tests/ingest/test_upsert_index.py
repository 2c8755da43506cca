"""ingest.tasks.indexed_writer, the driver's check of a direct upsert's output: no key written by two tasks."""

from __future__ import annotations

import pyarrow as pa

from commit.key_index.segments import FILE, POS
from ingest.driver.key_index_steps import keys_in_two_tasks
from ingest.tasks.indexed_writer import index_entry_rows
from ingest.tasks.output import stats_batch, written_batch


def task_output(bucket_keys: dict[int, list[int]], task: str) -> pa.Table:
    """One task's write output: its index entries (a written row, or a tombstone, per key) and a stats row."""
    entries = {bucket: pa.table({"k1": pa.array(keys, pa.int64()),
                                 FILE: pa.array([f"{task}.parquet" if k % 2 else None for k in keys], pa.string()),
                                 POS: pa.array(range(len(keys)), pa.int64())})
               for bucket, keys in bucket_keys.items()}
    return pa.Table.from_batches([written_batch([], [], 0), index_entry_rows(entries), stats_batch([b"{}"])])


def test_keys_written_by_two_tasks_are_counted_and_distinct_keys_are_not():
    first = task_output({0: [2, 4, 6], 1: [1, 3]}, "a")
    second = task_output({0: [8, 10], 1: [5, 7, 9]}, "b")
    assert keys_in_two_tasks(pa.concat_tables([first, second])) == 0
    overlapping = task_output({0: [4, 12], 1: [3, 9, 11]}, "c")  # 4 and 3 (one a tombstone) are also first's
    assert keys_in_two_tasks(pa.concat_tables([first, second, overlapping])) == 3  # 4, 3 and 9
    thrice = task_output({0: [4]}, "d")
    assert keys_in_two_tasks(pa.concat_tables([first, overlapping, thrice])) == 2  # 4 (three tasks) and 3
    assert keys_in_two_tasks(pa.Table.from_batches([written_batch([], [], 0)])) == 0  # no entries at all
