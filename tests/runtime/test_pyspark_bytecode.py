"""runtime.pyspark_bytecode: checked bytecode beside the sources of a zip that Python imports from."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from runtime.pyspark_bytecode import installed_archive, precompile

SOURCES = {
    "pkg/__init__.py": "from pkg.mod import answer\n",
    "pkg/mod.py": "def answer():\n    return 41 + 1\n",
    "pkg/data.txt": "not python\n",
}


def archive(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def imported(zip_path: Path, expression: str) -> str:
    """``expression`` evaluated in a fresh Python with only ``zip_path`` added to its path, as Spark starts one."""
    code = f"import sys; sys.path.insert(0, {str(zip_path)!r}); import pkg, pkg.mod; print({expression})"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_modules_load_from_the_added_bytecode_and_behave_as_their_sources(tmp_path: Path) -> None:
    zip_path = archive(tmp_path / "pyspark.zip", SOURCES)
    assert imported(zip_path, "pkg.mod.__file__").endswith("pkg/mod.py"), "without bytecode, the source compiles"
    assert precompile(zip_path) == 2
    with zipfile.ZipFile(zip_path) as zf:
        assert sorted(zf.namelist()) == sorted([*SOURCES, "pkg/__init__.pyc", "pkg/mod.pyc"])
        assert {n: zf.read(n).decode() for n in SOURCES} == SOURCES, "the sources stay as they were"
    assert imported(zip_path, "pkg.mod.__file__").endswith("pkg/mod.pyc")
    assert imported(zip_path, "pkg.answer()") == "42"
    # tracebacks name the module inside the archive, as when Python compiled it there
    assert imported(zip_path, "pkg.mod.answer.__code__.co_filename") == f"{zip_path}/pkg/mod.py"


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    zip_path = archive(tmp_path / "pyspark.zip", SOURCES)
    precompile(zip_path)
    before = zip_path.read_bytes()
    assert precompile(zip_path) == 0
    assert zip_path.read_bytes() == before


def test_bytecode_that_no_longer_matches_its_source_is_ignored(tmp_path: Path) -> None:
    """The pycs are checked against their source's hash: a source changed afterwards is what runs."""
    zip_path = archive(tmp_path / "pyspark.zip", SOURCES)
    precompile(zip_path)
    with zipfile.ZipFile(zip_path) as zf:
        entries = {n: zf.read(n) for n in zf.namelist()}
    entries["pkg/mod.py"] = b"def answer():\n    return 7\n"
    with zipfile.ZipFile(zip_path, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    assert imported(zip_path, "pkg.answer()") == "7"


def test_the_set_up_compiled_the_installed_pyspark_zip() -> None:
    """``make setup`` runs ``python -m runtime.pyspark_bytecode``; pyspark's pip package ships the zip."""
    zip_path = installed_archive()
    assert zip_path is not None, "pyspark ships python/lib/pyspark.zip"
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
    assert "pyspark/sql/streaming/python_streaming_source_runner.pyc" in names, "run `make setup`"
    assert all(name + "c" in names for name in names if name.endswith(".py"))
