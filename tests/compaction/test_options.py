"""RewriteOptions: Java's names and defaults, parsing and validation."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.options import (
    KNOWN_OPTIONS,
    InvalidRewriteOption,
    RewriteJobOrder,
    RewriteOptions,
    UnknownRewriteOption,
)

MiB = 1024 * 1024


def test_defaults_are_javas() -> None:
    o = RewriteOptions.parse()
    assert o.target_file_size_bytes == 512 * MiB
    assert o.min_file_size_bytes == 402653184  # (long) (512 MiB * 0.75)
    assert o.max_file_size_bytes == 966367641  # (long) (512 MiB * 1.80)
    assert o.min_input_files == 5
    assert o.delete_file_threshold == 2147483647
    assert o.delete_ratio_threshold == 0.3
    assert o.max_file_group_size_bytes == 100 * 1024 * MiB
    assert o.max_concurrent_file_group_rewrites == 5
    assert o.partial_progress_enabled is False
    assert o.partial_progress_max_commits == 10
    assert o.partial_progress_max_failed_commits == 10
    assert o.use_starting_sequence_number is True
    assert o.rewrite_job_order is RewriteJobOrder.NONE
    assert o.rewrite_all is False


def test_every_option_string_is_parsed() -> None:
    raw = {
        "target-file-size-bytes": "1000",
        "min-file-size-bytes": "10",
        "max-file-size-bytes": "5000",
        "min-input-files": "2",
        "delete-file-threshold": "3",
        "delete-ratio-threshold": "0.5",
        "max-file-group-size-bytes": "20000",
        "max-concurrent-file-group-rewrites": "7",
        "partial-progress.enabled": "true",
        "partial-progress.max-commits": "4",
        "partial-progress.max-failed-commits": "1",
        "use-starting-sequence-number": "false",
        "rewrite-job-order": "files-desc",
        "rewrite-all": "TRUE",
    }
    assert set(raw) == KNOWN_OPTIONS
    o = RewriteOptions.parse(raw)
    assert dataclasses.astuple(o) == (
        1000, 10, 5000, 2, 3, 0.5, 20000, 7, True, 4, 1, False, RewriteJobOrder.FILES_DESC, True, False
    )


def test_target_defaults_to_the_table_property_and_bounds_follow_it() -> None:
    o = RewriteOptions.parse({}, {"write.target-file-size-bytes": "1000"})
    assert (o.target_file_size_bytes, o.min_file_size_bytes, o.max_file_size_bytes) == (1000, 750, 1800)


def test_explicit_target_wins_over_the_table_property() -> None:
    o = RewriteOptions.parse({"target-file-size-bytes": "2000"}, {"write.target-file-size-bytes": "1000"})
    assert (o.target_file_size_bytes, o.min_file_size_bytes, o.max_file_size_bytes) == (2000, 1500, 3600)


def test_max_failed_commits_defaults_to_max_commits() -> None:
    o = RewriteOptions.parse({"partial-progress.max-commits": "3"})
    assert o.partial_progress_max_failed_commits == 3


@pytest.mark.parametrize("raw", ["bytes-asc", "BYTES-ASC", "Bytes-Asc"])
def test_job_order_is_case_insensitive(raw: str) -> None:
    assert RewriteOptions.parse({"rewrite-job-order": raw}).rewrite_job_order is RewriteJobOrder.BYTES_ASC


def test_write_max_file_size_is_halfway_between_target_and_max() -> None:
    o = RewriteOptions.parse({"target-file-size-bytes": "100", "max-file-size-bytes": "201"})
    assert o.write_max_file_size == 150


def test_unknown_option_is_named() -> None:
    with pytest.raises(UnknownRewriteOption) as info:
        RewriteOptions.parse({"min-input-file": "3"})
    assert info.value.option == "min-input-file"
    assert "min-input-file" in str(info.value) and "min-input-files" in str(info.value)


@pytest.mark.parametrize(
    "options, option, value",
    [
        ({"target-file-size-bytes": "0"}, "target-file-size-bytes", 0),
        ({"target-file-size-bytes": "-5"}, "target-file-size-bytes", -5),
        ({"min-file-size-bytes": "-1"}, "min-file-size-bytes", -1),
        ({"target-file-size-bytes": "100", "min-file-size-bytes": "100"}, "target-file-size-bytes", 100),
        ({"target-file-size-bytes": "100", "max-file-size-bytes": "100"}, "target-file-size-bytes", 100),
        ({"min-input-files": "0"}, "min-input-files", 0),
        ({"delete-file-threshold": "-1"}, "delete-file-threshold", -1),
        ({"delete-ratio-threshold": "0"}, "delete-ratio-threshold", 0.0),
        ({"delete-ratio-threshold": "1.01"}, "delete-ratio-threshold", 1.01),
        ({"max-file-group-size-bytes": "0"}, "max-file-group-size-bytes", 0),
        ({"max-concurrent-file-group-rewrites": "0"}, "max-concurrent-file-group-rewrites", 0),
        (
            {"partial-progress.enabled": "true", "partial-progress.max-commits": "0"},
            "partial-progress.max-commits",
            0,
        ),
        ({"partial-progress.max-failed-commits": "-1"}, "partial-progress.max-failed-commits", -1),
    ],
)
def test_out_of_range_values_name_option_value_and_expectation(
    options: dict[str, str], option: str, value: object
) -> None:
    with pytest.raises(InvalidRewriteOption) as info:
        RewriteOptions.parse(options)
    assert (info.value.option, info.value.value) == (option, value)
    message = str(info.value)
    assert option in message and repr(value) in message and info.value.expected in message


@pytest.mark.parametrize(
    "option, raw",
    [
        ("target-file-size-bytes", "1.5"),
        ("target-file-size-bytes", "10 MB"),
        ("target-file-size-bytes", "9223372036854775808"),  # Long.MAX_VALUE + 1
        ("min-input-files", "2147483648"),  # Integer.MAX_VALUE + 1
        ("min-input-files", ""),
        ("delete-ratio-threshold", "a third"),
        ("delete-ratio-threshold", "nan"),
        ("partial-progress.enabled", "yes"),
        ("rewrite-all", "1"),
        ("rewrite-job-order", "sequence-asc"),
    ],
)
def test_unparsable_values_are_rejected(option: str, raw: str) -> None:
    with pytest.raises(InvalidRewriteOption) as info:
        RewriteOptions.parse({option: raw})
    assert (info.value.option, info.value.value) == (option, raw)


def test_partial_progress_max_commits_zero_is_allowed_while_disabled() -> None:
    assert RewriteOptions.parse({"partial-progress.max-commits": "0"}).partial_progress_max_commits == 0


def test_bad_table_property_is_named() -> None:
    with pytest.raises(InvalidRewriteOption) as info:
        RewriteOptions.parse({}, {"write.target-file-size-bytes": "big"})
    assert info.value.option == "write.target-file-size-bytes"


def test_replace_revalidates() -> None:
    o = RewriteOptions.parse({"target-file-size-bytes": "100"})
    with pytest.raises(InvalidRewriteOption, match="min-input-files"):
        dataclasses.replace(o, min_input_files=0)


@given(st.integers(min_value=2, max_value=2**62))
def test_any_positive_target_above_one_gives_consistent_bounds(target: int) -> None:
    o = RewriteOptions.parse({"target-file-size-bytes": str(target)})
    assert o.min_file_size_bytes < o.target_file_size_bytes < o.max_file_size_bytes
    assert o.min_file_size_bytes <= o.write_max_file_size <= o.max_file_size_bytes
