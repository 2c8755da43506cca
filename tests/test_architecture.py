"""The import contract: Floe's package layering, as a test.

``[tool.importlinter]`` in pyproject.toml states it: ``table`` <- ``commit`` <-
{``ingest``, ``compaction``} <- ``service``, ``runtime`` beneath the process
packages, the rooms of ``table/`` in layers, and no import cycle inside any
package (lazy imports inside functions count too). The second test breaks the
contract in a copy of the tree, so that the first one is known to be able to fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("table", "commit", "ingest", "compaction", "service", "runtime")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root, capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(root), "PATH": ""},
    )


def test_the_import_contract_holds() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_import_contract_catches_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    io_module = tmp_path / "table" / "io.py"
    io_module.write_text(io_module.read_text() + "\n\ndef _upward() -> None:\n    import commit.catalog.sql.catalog  # noqa\n")
    types_module = tmp_path / "table" / "types.py"
    types_module.write_text(types_module.read_text() + "\n\ndef _cycle() -> None:\n    import table.schema  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "table.io -> commit.catalog.sql.catalog" in result.stdout
    assert "table.types -> table.schema" in result.stdout


def test_the_import_contract_catches_a_task_that_reaches_the_driver(tmp_path: Path) -> None:
    """Code that runs in Spark tasks (ingest.tasks) must not import the driver's (ingest.driver): the
    driver's modules pull in the session, the catalog and the metrics, which a task must not touch."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    frame = tmp_path / "ingest" / "tasks" / "frame.py"
    frame.write_text(frame.read_text() + "\n\ndef _upward() -> None:\n    import ingest.driver.offset_accounting  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "Spark tasks never reach back to the driver" in result.stdout
    assert "ingest.tasks.frame -> ingest.driver.offset_accounting" in result.stdout


def test_the_import_contract_catches_a_commit_loop_that_knows_a_catalog(tmp_path: Path) -> None:
    """The commit loop reaches a catalog only through the Catalog protocol (commit.catalog.base): one that
    imports the SQL catalog itself is refused, and so is a SQL catalog that reaches into the REST one."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    committer = tmp_path / "commit" / "metadata_committer.py"
    committer.write_text(committer.read_text() + "\n\ndef _knows() -> None:\n    import commit.catalog.sql.catalog  # noqa\n")
    sql = tmp_path / "commit" / "catalog" / "sql" / "catalog.py"
    sql.write_text(sql.read_text() + "\n\ndef _reaches() -> None:\n    import commit.catalog.rest.client  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "commit.metadata_committer -> commit.catalog.sql.catalog" in result.stdout
    assert "commit.catalog.sql.catalog -> commit.catalog.rest.client" in result.stdout
