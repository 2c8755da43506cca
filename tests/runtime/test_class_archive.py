"""The class archive: found by a fingerprint of Java and pyspark, handed to the driver, mapped by its JVM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import class_archive

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A java binary and a pyspark jars folder of plain files, and an archive folder, for the fingerprint."""
    java, jars = tmp_path / "java", tmp_path / "jars"
    java.write_bytes(b"java")
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"core")
    monkeypatch.setattr(class_archive, "_java_binary", lambda: java)
    monkeypatch.setattr(class_archive, "_pyspark_jars", lambda: jars)
    monkeypatch.setenv("FLOE_CLASS_ARCHIVE_DIR", str(tmp_path / "archives"))
    monkeypatch.delenv(class_archive.DUMP_ENV, raising=False)
    return java, jars


def test_the_fingerprint_changes_with_a_jar_or_the_java_binary(fake_install: tuple[Path, Path]):
    java, jars = fake_install
    first = class_archive.fingerprint()
    assert class_archive.fingerprint() == first
    (jars / "spark-sql.jar").write_bytes(b"sql")
    second = class_archive.fingerprint()
    java.write_bytes(b"a newer java")
    assert len({first, second, class_archive.fingerprint()}) == 3


def test_no_archive_no_option_and_an_archive_is_mapped_quietly(fake_install: tuple[Path, Path]):
    assert class_archive.java_options() == ""
    path = class_archive.archive_path()
    assert path is not None and path.parent == class_archive.archive_dir()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = class_archive.java_options().split()
    assert options[0] == f"-XX:SharedArchiveFile={path}"
    assert "-Xlog:cds=off" in options and "-Xlog:cds+dynamic=off" in options


def test_the_set_up_workload_writes_instead_of_mapping(fake_install: tuple[Path, Path],
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(class_archive.DUMP_ENV, "-XX:ArchiveClassesAtExit=/tmp/x.jsa")
    assert class_archive.java_options() == "-XX:ArchiveClassesAtExit=/tmp/x.jsa"


def test_without_java_or_pyspark_there_is_no_archive(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(class_archive, "_java_binary", lambda: None)
    assert class_archive.archive_path() is None
    assert class_archive.java_options() == ""


DRIVER = """
from runtime.spark_session import build_spark_session
session = build_spark_session("class-archive-test", {"spark.driver.extraJavaOptions": %r})
session.range(0, 1000).selectExpr("id %% 3 AS k").groupBy("k").count().collect()
session.stop()
"""


@pytest.mark.spark
def test_a_driver_loads_sparks_classes_from_the_archive_the_set_up_made(tmp_path: Path):
    """The archive that ``make setup`` made fits this Java and classpath: the driver's JVM maps Spark's classes
    from it, not from the jars (a fingerprint or classpath that did not fit would be ignored in silence)."""
    path = class_archive.archive_path()
    assert path is not None and path.is_file(), f"no class archive at {path}: run 'make setup'"
    loads = tmp_path / "class-load.log"
    done = subprocess.run([sys.executable, "-c", DRIVER % f"-Xlog:class+load=info:file={loads}"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in loads.read_text().splitlines() if " org.apache.spark." in line]
    shared = [line for line in lines if line.endswith("source: shared objects file (top)")]
    from_jars = [line for line in lines if " source: file:" in line or " source: jar:" in line]
    assert len(shared) > 1000, f"{len(shared)} Spark classes came from the archive"
    assert len(from_jars) < 0.05 * len(shared), f"{len(from_jars)} Spark classes came from jars, e.g. {from_jars[:3]}"
