"""The position map: (old file, old position) -> (new file, new position), built as a rewrite writes."""

from __future__ import annotations

from pathlib import Path
from typing import Hashable

import warnings
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commit.position_map import (
    PositionMap,
    PositionMapBuilder,
    UnknownRewrittenFile,
    read_position_map,
    write_position_map,
)
from table.errors import ValidationError
from table.io import FileIO


def simulate(
    file_rows: list[int], deleted: list[set[int]], outputs_of: list[list[int]], batch: int, roll: int
) -> tuple[PositionMap, dict[tuple[str, int], tuple[str, int]]]:
    """Write old files as a rewrite does and record where every surviving row lands.

    Rows of old file ``f`` are read in batches of ``batch``; surviving row
    ``k`` of the file goes to output ``outputs_of[f][k % len]`` (an output is
    a partition writer); each output rolls a new file every ``roll`` rows.
    Returns the built map and the truth: (old file, old pos) -> (new file, new pos).
    """
    builder = PositionMapBuilder()
    ordinal: dict[Hashable, int] = {}
    truth_ordinal: dict[tuple[str, int], tuple[Hashable, int]] = {}
    for f, rows in enumerate(file_rows):
        old = f"old-{f}"
        builder.add_file(old)
        survivors = [p for p in range(rows) if p not in deleted[f]]
        for start in range(0, len(survivors), batch):
            chunk = survivors[start : start + batch]
            by_output: dict[int, list[int]] = {}
            for k, pos in enumerate(chunk, start):
                by_output.setdefault(outputs_of[f][k % len(outputs_of[f])], []).append(pos)
            for output, positions in by_output.items():
                first = ordinal.get(output, 0)
                builder.add(old, pa.array(positions, pa.int64()), output, first)
                for i, pos in enumerate(positions):
                    truth_ordinal[(old, pos)] = (output, first + i)
                ordinal[output] = first + len(positions)
    files = {o: [(f"new-{o}-{i}", min(roll, n - i * roll)) for i in range(-(-n // roll))] for o, n in ordinal.items()}
    truth = {key: (f"new-{o}-{ord_ // roll}", ord_ % roll) for key, (o, ord_) in truth_ordinal.items()}
    return builder.build(files), truth


scenario = st.integers(1, 4).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 60), min_size=n, max_size=n),
        st.lists(st.sets(st.integers(0, 59), max_size=30), min_size=n, max_size=n),
        st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=3), min_size=n, max_size=n),
        st.integers(1, 17),
        st.integers(1, 23),
        st.lists(st.sets(st.integers(0, 59), max_size=20), min_size=n, max_size=n),
    )
)


@settings(max_examples=150, deadline=None)
@given(scenario)
def test_translation_matches_where_rows_were_written(case) -> None:  # type: ignore[no-untyped-def]
    file_rows, deleted_at_start, outputs_of, batch, roll, deleted_later = case
    position_map, truth = simulate(file_rows, deleted_at_start, outputs_of, batch, roll)

    concurrent = {f"old-{f}": sorted(p for p in later if p < file_rows[f]) for f, later in enumerate(deleted_later)}
    translated = position_map.translate(concurrent)

    expected: dict[str, set[int]] = {}
    for old, positions in concurrent.items():
        for pos in positions:
            if (old, pos) in truth:  # a row deleted at the start is in no new file
                new_file, new_pos = truth[(old, pos)]
                expected.setdefault(new_file, set()).add(new_pos)
    assert translated == {path: sorted(p) for path, p in expected.items()}


@settings(max_examples=30, deadline=None)
@given(scenario)
def test_a_written_map_reads_back_equal(tmp_path_factory, case) -> None:  # type: ignore[no-untyped-def]
    file_rows, deleted_at_start, outputs_of, batch, roll, _ = case
    position_map, truth = simulate(file_rows, deleted_at_start, outputs_of, batch, roll)
    path = str(tmp_path_factory.mktemp("maps") / "group.positions.parquet")
    io = FileIO.for_location(path)
    write_position_map(io, path, position_map)

    read = read_position_map(io, path)
    assert read.new_files == position_map.new_files
    everything = {f"old-{f}": range(rows) for f, rows in enumerate(file_rows)}
    assert read.translate(everything) == position_map.translate(everything)
    assert sum(len(v) for v in read.translate(everything).values()) == len(truth)


def test_one_file_into_one_output_is_one_run_per_new_file() -> None:
    builder = PositionMapBuilder()
    survivors = [p for p in range(10_000) if p % 1000 != 7]
    for start in range(0, len(survivors), 4096):
        builder.add("old", pa.array(survivors[start : start + 4096]), "p", start)
    position_map = builder.build({"p": [("new-1", 6000), ("new-2", len(survivors) - 6000)]})
    entry = position_map.files["old"]
    assert entry.run_files == (0, 1) and entry.run_starts == (0, 0) and entry.run_offsets == (0, 6000)
    assert position_map.translate({"old": [0, 7, 6006, 9999]}) == {"new-1": [0], "new-2": [0, 9999 - 10 - 6000]}


def test_the_persisted_map_is_small(tmp_path: Path) -> None:
    builder = PositionMapBuilder()
    survivors = pa.array([p for p in range(1_000_000) if p % 997], pa.int64())
    builder.add("s3://bucket/warehouse/db/t/data/00000-0-old.parquet", survivors, (), 0)
    position_map = builder.build({(): [("new", len(survivors))]})
    path = str(tmp_path / "m.parquet")
    write_position_map(FileIO.for_location(path), path, position_map)
    assert Path(path).stat().st_size < 64 * 1024  # vs. 8 MB of raw positions


def test_deletes_on_files_the_group_did_not_rewrite_are_refused() -> None:
    builder = PositionMapBuilder()
    builder.add("a", pa.array([0, 1]), "p", 0)
    position_map = builder.build({"p": [("n", 2)]})
    with pytest.raises(UnknownRewrittenFile) as caught:
        position_map.translate({"b": [0]})
    assert caught.value.paths == {"b"}


def test_rows_not_found_in_written_files_are_an_error() -> None:
    builder = PositionMapBuilder()
    builder.add("a", pa.array([0, 1, 2]), "p", 0)
    with pytest.raises(ValidationError, match="not all in its written files"):
        builder.build({"p": [("n", 2)]})


@settings(max_examples=100, deadline=None)
@given(scenario)
def test_relocate_moves_each_row_where_it_was_written(case) -> None:  # type: ignore[no-untyped-def]
    """The key index's remap: every (old file, pos) goes where the rewrite wrote it, or nowhere."""
    file_rows, deleted_at_start, outputs_of, batch, roll, _ = case
    position_map, truth = simulate(file_rows, deleted_at_start, outputs_of, batch, roll)
    rows = [(f"old-{f}", p) for f, n in enumerate(file_rows) for p in range(n)] + [("untouched", 7)]
    paths, positions = position_map.relocate(pa.array([r[0] for r in rows]), pa.array([r[1] for r in rows], pa.int64()))

    moved = list(zip(paths.to_pylist(), positions.to_pylist()))
    expected = [truth.get(r, (None, None)) for r in rows[:-1]] + [("untouched", 7)]
    assert moved == expected


def test_a_row_that_was_nowhere_already_stays_nowhere() -> None:
    """A second remap over the key index meets rows an earlier one found deleted (null path and position):
    they stay null, and no NaN is cast to a position on the way."""
    builder = PositionMapBuilder()
    builder.add("a", pa.array([0, 1]), "p", 0)
    position_map = builder.build({"p": [("n", 2)]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths, positions = position_map.relocate(pa.array(["a", None, "b"]), pa.array([1, None, 5], pa.int64()))
    assert paths.to_pylist() == ["n", None, "b"] and positions.to_pylist() == [1, None, 5]
