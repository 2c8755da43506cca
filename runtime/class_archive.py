"""A class data sharing archive of Spark's classes, so that each Spark driver JVM starts with less work.

A Spark driver loads, verifies and links some twenty thousand classes from
pyspark's jars before its first job. The JDK can keep those classes, already
parsed and verified, in a file that each later JVM maps instead (AppCDS, a
*dynamic* archive, JEP 350). This module makes that archive once, at set-up
(``make setup``, ``make demo``, the image build) by ``python -m
runtime.class_archive``, and :func:`java_options` hands it to every driver
that :func:`runtime.spark_session.build_spark_session` starts.

An archive fits one Java build and one application classpath (pyspark's
``jars`` folder; the jar sets in ``spark.jars`` load later, through Spark's
own class loader, and are not archived). Its file name carries a fingerprint
of both, so an upgraded JDK or pyspark simply finds no archive and starts as
it did without one. The JVM checks the archive again when it maps it and, if
it does not fit, ignores it; the options below keep that silent. The archive
changes nothing a job computes, only how fast its JVM starts.

``FLOE_CLASS_ARCHIVE_DIR`` sets the folder: ``.cache/jvm`` in the source tree
by default, ``/opt/floe/jvm`` in the image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runtime.jars import pyspark_home

_SOURCE_TREE_DEFAULT = Path(__file__).resolve().parent.parent / ".cache" / "jvm"
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM's own notes on the archive (classes it skipped, an archive it could not map) stay out of Floe's log."""
DUMP_TIMEOUT_S = 600.0
DUMP_ENV = "FLOE_CLASS_ARCHIVE_DUMP"
"""Set for the set-up workload's driver only: the options that make it write the archive instead of mapping one."""


def archive_dir() -> Path:
    """The folder that holds the archives."""
    return Path(os.environ.get("FLOE_CLASS_ARCHIVE_DIR", str(_SOURCE_TREE_DEFAULT)))


def archive_path() -> Path | None:
    """Where this Java and this pyspark's archive is (or would be); None when either is not found."""
    key = fingerprint()
    return None if key is None else archive_dir() / f"spark-{key}.jsa"


def java_options() -> str:
    """JVM options that map the archive, or ``""`` when there is none for this Java and pyspark."""
    if os.environ.get(DUMP_ENV):
        return os.environ[DUMP_ENV]
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def fingerprint() -> str | None:
    """A digest of the Java binary and pyspark's jars (names, sizes, modification times), as the JVM checks them."""
    java, jars = _java_binary(), _pyspark_jars()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    for path in (java, *sorted(jars.glob("*.jar"))):
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _java_binary() -> Path | None:
    """The ``java`` that pyspark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _pyspark_jars() -> Path | None:
    """pyspark's ``jars`` folder: the driver's application classpath."""
    home = pyspark_home()
    return home / "jars" if home is not None and (home / "jars").is_dir() else None


class ClassArchiveError(RuntimeError):
    """Making the archive failed; the message says where and why."""


def create(path: Path) -> float:
    """Run the set-up workload in a driver that writes its loaded classes to ``path`` at exit; the seconds taken.

    The JVM writes the archive after the Python process that launched it has exited, so this waits for the
    whole process group. The archive is written under a temporary name beside ``path`` and then renamed, so a
    driver that starts meanwhile maps a whole archive or none.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=".spark-", suffix=".jsa", dir=path.parent)
    os.close(handle)
    os.unlink(scratch)  # the JVM creates it
    started = time.monotonic()
    try:
        _run_workload(Path(scratch))
        if not Path(scratch).is_file() or Path(scratch).stat().st_size == 0:
            raise ClassArchiveError(f"{path}: the workload's JVM exited without writing its archive to {scratch}")
        os.chmod(scratch, 0o644)
        os.replace(scratch, path)
    finally:
        Path(scratch).unlink(missing_ok=True)
    return time.monotonic() - started


def _run_workload(scratch: Path) -> None:
    """``python -m runtime.class_archive_workload`` in a process group of its own; waits until all of it ended.

    The workload's driver binds loopback by name: an image build's host name may not resolve.
    """
    env = {
        **os.environ,
        DUMP_ENV: f"-XX:ArchiveClassesAtExit={scratch} {_QUIET}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "localhost",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.class_archive_workload"],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output, _ = proc.communicate(timeout=DUMP_TIMEOUT_S)
    if proc.returncode != 0:
        lines = output.decode(errors="replace").strip().splitlines()
        tail = [line for line in lines if line and not line[0].isspace()][-15:]  # the messages, not the frames
        raise ClassArchiveError(f"the class archive workload failed (exit {proc.returncode}):\n" + "\n".join(tail))
    _await_group_exit(proc.pid, DUMP_TIMEOUT_S)


def _await_group_exit(pgid: int, timeout_s: float) -> None:
    """Wait until no process of group ``pgid`` is left (the JVM writes the archive as it exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    raise ClassArchiveError(f"the JVM did not finish writing the class archive within {timeout_s:.0f}s")


def main() -> int:
    path = archive_path()
    if path is None:
        print("no java or no pyspark found: no class archive made")
        return 0
    if path.is_file():
        print(f"{path}: already made for this Java and pyspark")
        return 0
    try:
        seconds = create(path)
    except ClassArchiveError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{path}: {path.stat().st_size / 1e6:.0f} MB of Spark's classes, made in {seconds:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
