"""Lint, format and type checks of the product packages, as tests.

ruff (lint and format) and mypy run with the settings in pyproject.toml
(``[tool.ruff]``, ``[tool.mypy]``) on the packages Floe ships; tests and
benchmarks are not held to them. Each check is also shown to fail on a copy of
the tree with one planted fault, so a silent tool (a wrong path, an empty
selection) cannot pass for a clean tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("table", "commit", "ingest", "compaction", "service", "runtime")
BIN = Path(sys.executable).parent

CHECKS = {
    "ruff check": [str(BIN / "ruff"), "check", "--no-cache", *PACKAGES],
    "ruff format": [str(BIN / "ruff"), "format", "--check", "--no-cache", *PACKAGES],
    "mypy": [str(BIN / "mypy"), "--no-incremental", "--cache-dir", "/dev/null", *PACKAGES],
}

# A fault each check must report, planted at the end of table/io.py.
FAULTS = {
    "ruff check": "\n\nimport os\n",  # an unused import, below the module's code
    "ruff format": "\n\ndef _badly_formatted( x:int)->int :\n    return x\n",
    "mypy": "\n\ndef _wrong() -> int:\n    return 'not an int'\n",
}


def run_check(name: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CHECKS[name], cwd=root, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", CHECKS)
def test_the_product_packages_pass(name: str) -> None:
    result = run_check(name, REPO)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", CHECKS)
def test_each_check_catches_a_planted_fault(name: str, tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    io_module = tmp_path / "table" / "io.py"
    io_module.write_text(io_module.read_text() + FAULTS[name])
    result = run_check(name, tmp_path)
    assert result.returncode != 0, f"{name} passed a planted fault:\n{result.stdout}{result.stderr}"
    assert "table/io.py" in result.stdout + result.stderr
