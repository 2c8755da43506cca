"""runtime.python_worker: zip importers re-read an archive only when it changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in modules.items():
            archive.writestr(name, text)


def _run(script: str, *args: str) -> str:
    """In a fresh interpreter: the patch is process-wide, as in a Spark worker."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_unchanged_archive_is_not_read_again(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    _archive(archive, {"zipped_pkg/__init__.py": "", "zipped_pkg/a.py": "X = 1\n"})
    out = _run("""
        import importlib, sys, zipimport
        sys.path.insert(0, sys.argv[1])
        import zipped_pkg.a
        reads = []
        original = zipimport._read_directory
        zipimport._read_directory = lambda path: reads.append(path) or original(path)
        importlib.invalidate_caches()
        before = len(reads)
        from runtime.python_worker import skip_unchanged_archive_rereads
        skip_unchanged_archive_rereads()
        skip_unchanged_archive_rereads()
        importlib.invalidate_caches()  # the first time: each importer reads once and keeps the stamp
        first = len(reads) - before
        for _ in range(5):
            importlib.invalidate_caches()
        print(before, first, len(reads) - before - first)
    """, str(archive))
    before, first, later = map(int, out.split())
    assert before >= 2  # without the patch: every importer (the archive's and its package's) re-reads
    assert first == before
    assert later == 0


def test_a_changed_archive_is_read_again_and_its_new_modules_import(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    _archive(archive, {"zipped_pkg/__init__.py": "", "zipped_pkg/a.py": "X = 1\n"})
    out = _run("""
        import importlib, os, sys, zipfile
        sys.path.insert(0, sys.argv[1])
        from runtime.python_worker import skip_unchanged_archive_rereads
        skip_unchanged_archive_rereads()
        import zipped_pkg.a
        importlib.invalidate_caches()
        with zipfile.ZipFile(sys.argv[1], "w") as z:
            z.writestr("zipped_pkg/__init__.py", "")
            z.writestr("zipped_pkg/a.py", "X = 1\\n")
            z.writestr("zipped_pkg/b.py", "Y = 2\\n# a longer archive\\n")
        importlib.invalidate_caches()
        import zipped_pkg.b
        print(zipped_pkg.b.Y)
    """, str(archive))
    assert out == "2"


def test_the_stamp_is_size_and_modification_time(tmp_path: Path) -> None:
    from runtime.python_worker import archive_stamp

    path = tmp_path / "f.zip"
    path.write_bytes(b"abc")
    stamp = archive_stamp(str(path))
    assert stamp == (os.stat(path).st_mtime_ns, 3)
    assert archive_stamp(str(tmp_path / "missing.zip")) is None
