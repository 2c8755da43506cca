"""ingest.tasks.output: the one protocol between a batch's tasks and the driver."""

from __future__ import annotations

import pyarrow as pa

from ingest.tasks.frame import STATS_COLUMN
from ingest.tasks.output import (
    INDEX_ENTRIES,
    KINDS,
    OUTPUT_DDL,
    OUTPUT_SCHEMA,
    REFERENCED,
    STATS,
    ipc_payload,
    ipc_table,
    payloads_of,
    side_row_columns,
    split_kind,
    split_side_rows,
    take_stats,
    written_rows,
)


def test_every_kind_is_distinct_and_the_ddl_is_the_schema() -> None:
    assert len(set(KINDS)) == len(KINDS) == 9
    assert OUTPUT_DDL == ", ".join(f"{f.name} {_ddl(f.type)}" for f in OUTPUT_SCHEMA)


def _ddl(arrow_type: pa.DataType) -> str:
    return {pa.string(): "string", pa.binary(): "binary", pa.int64(): "long", pa.int32(): "int"}[arrow_type]


def test_rows_of_a_kind_are_read_and_split_from_the_others() -> None:
    entries = pa.table({"k": [1, 2]})
    out = written_rows([STATS, INDEX_ENTRIES, REFERENCED], [b"{}", ipc_payload(entries), b'["a"]'], [0, 2, 1], [0] * 3)
    assert payloads_of(out, REFERENCED) == [b'["a"]']
    part, others = split_kind(out, INDEX_ENTRIES)
    assert ipc_table(part.column("payload")[0].as_py()).equals(entries)
    assert others.column("kind").to_pylist() == [STATS, REFERENCED]


def test_side_rows_are_parted_from_data_rows_and_kept_apart_by_a_reduction() -> None:
    frame = pa.record_batch({"id": [1, None, 2], STATS_COLUMN: [None, b'{"rows": []}', None]})
    side, rows = split_side_rows(frame)
    assert side is not None and side.num_rows == 1 and rows.column("id").to_pylist() == [1, 2]
    payloads: list[bytes] = []
    assert take_stats(frame, payloads).num_rows == 2 and payloads == [b'{"rows": []}']
    no_side = pa.record_batch({"id": [1], STATS_COLUMN: pa.nulls(1, pa.binary())})
    assert split_side_rows(no_side) == (None, no_side)
    assert side_row_columns(frame.schema.names) == [STATS_COLUMN] and side_row_columns(["id"]) == []
