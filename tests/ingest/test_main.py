"""``python -m ingest``'s command line, without Spark: what it refuses before a job runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.__main__ import main
from runtime.logging import LOG_LEVELS


def test_a_bad_log_level_is_a_usage_error_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--job", str(tmp_path / "job.json"), "--log-level", "LOUD"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith(f"argument --log-level: expected one of {', '.join(LOG_LEVELS)}, got 'LOUD'")


def test_a_lower_case_log_level_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It gets as far as reading the job file, which is missing: exit 2 with one log line, no usage error."""
    assert main(["--job", str(tmp_path / "job.json"), "--log-level", "debug"]) == 2
    err = capsys.readouterr().err
    assert "bad job file" in err and "usage:" not in err
