"""Compiled bytecode inside Spark's ``pyspark.zip``, so that a fresh Spark Python process starts fast.

Spark starts Python processes with ``$SPARK_HOME/python/lib/pyspark.zip`` first
on ``PYTHONPATH`` (``PythonWorkerFactory``), ahead of the installed pyspark,
and no setting moves it. Python never writes bytecode into a zip, so each such
process compiles every pyspark module it imports from source. For the planner
process that Spark starts per streaming query of a Python data source (Floe's
Kafka source), importing ``pyspark.sql.streaming.python_streaming_source_runner``
from the zip as shipped takes about twice as long as with bytecode beside the
sources (docs/performance.md): a query's start, before its first batch.

:func:`precompile` adds, next to each ``x.py`` in the archive, an ``x.pyc``
that ``zipimport`` loads instead of compiling. Each is a *checked hash-based*
pyc (PEP 552): Python verifies it against the hash of the source beside it,
so a pyc that no longer matches its source is ignored and the source compiled,
as before. The sources are kept unchanged; only entries are added. It is run
once at set-up (``make setup``, the image build), by
``python -m runtime.pyspark_bytecode``, and does nothing when the archive
already holds bytecode of this Python.

It rewrites a file of the installed pyspark package (pip's record of its hash
no longer matches; ``pip install --force-reinstall pyspark`` restores the
original). Floe's runtime never depends on it: without it, Spark's processes
start as slowly as they always did.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from runtime.jars import pyspark_home

_CHECKED_HASH_PYC = 0b11
"""PEP 552 flags: hash-based, and checked against the source on every import."""


def precompile(archive: Path) -> int:
    """Add a checked hash-based pyc beside every ``.py`` of ``archive``; the count of pycs added.

    The archive is replaced atomically (a new file in the same directory, then a rename), so a process
    that starts meanwhile reads the old archive or the new, never a partial one.
    """
    with zipfile.ZipFile(archive) as source:
        entries = source.infolist()
        if _holds_current_bytecode(source, entries):
            return 0
        handle, scratch = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=archive.parent)
        os.close(handle)
        added = 0
        try:
            with zipfile.ZipFile(scratch, "w", zipfile.ZIP_DEFLATED) as target:
                for entry in entries:
                    if entry.filename.endswith(".pyc"):
                        continue  # another Python's bytecode: replaced by this one's
                    data = source.read(entry)
                    target.writestr(entry, data)
                    if entry.filename.endswith(".py"):
                        pyc = zipfile.ZipInfo(entry.filename + "c", entry.date_time)
                        target.writestr(pyc, compiled(data, f"{archive}/{entry.filename}"), zipfile.ZIP_DEFLATED)
                        added += 1
            os.chmod(scratch, archive.stat().st_mode & 0o777)
            os.replace(scratch, archive)
        except BaseException:
            Path(scratch).unlink(missing_ok=True)
            raise
    return added


def compiled(source: bytes, filename: str) -> bytes:
    """``source`` as a checked hash-based pyc of this Python; ``filename`` is what tracebacks show."""
    code = compile(source, filename, "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + _CHECKED_HASH_PYC.to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def _holds_current_bytecode(archive: zipfile.ZipFile, entries: list[zipfile.ZipInfo]) -> bool:
    """Whether every ``.py`` already has a pyc of this Python beside it."""
    names = {entry.filename for entry in entries}
    sources = [name for name in names if name.endswith(".py")]
    if not sources or not all(name + "c" in names for name in sources):
        return False
    with archive.open(sources[0] + "c") as pyc:
        return pyc.read(4) == importlib.util.MAGIC_NUMBER


def installed_archive() -> Path | None:
    """The ``pyspark.zip`` that Spark puts on its Python processes' path, if pyspark ships one."""
    home = pyspark_home()
    if home is None:
        return None
    archive = home / "python" / "lib" / "pyspark.zip"
    return archive if archive.is_file() else None


def main() -> int:
    archive = installed_archive()
    if archive is None:
        print("pyspark ships no pyspark.zip here: nothing to compile")
        return 0
    added = precompile(archive)
    print(f"{archive}: {added} modules compiled" if added else f"{archive}: already holds this Python's bytecode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
