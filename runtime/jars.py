"""Locates the JVM jar sets that ``deploy/fetch-jars.sh`` resolves.

Each set lives in its own folder so that classpaths never mix:
``spark-kafka`` (Spark's Kafka source), ``kafka-broker`` (a local KRaft broker)
and ``iceberg-oracle`` (test-only). ``FLOE_JARS_DIR`` overrides the default,
which is ``.cache/jars`` in the source tree (``/opt/floe/jars`` in the image).
"""

from __future__ import annotations

import os
from pathlib import Path

JAR_SETS = ("spark-kafka", "kafka-broker", "iceberg-oracle", "s3proxy", "rest-catalog")
_SOURCE_TREE_DEFAULT = Path(__file__).resolve().parent.parent / ".cache" / "jars"


class JarsMissingError(RuntimeError):
    """A jar set has not been fetched; the message says how to fetch it."""


def jars_root() -> Path:
    """The folder holding one sub-folder per jar set."""
    return Path(os.environ.get("FLOE_JARS_DIR", str(_SOURCE_TREE_DEFAULT)))


def pyspark_home() -> Path | None:
    """The installed pyspark's folder (Spark's home: its ``jars``, ``python/lib``), found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def jar_set_dir(name: str) -> Path:
    """The folder of one jar set, checked to be completely fetched."""
    if name not in JAR_SETS:
        raise ValueError(f"unknown jar set {name!r}; expected one of {JAR_SETS}")
    folder = jars_root() / name
    if not (folder / ".complete").exists():
        raise JarsMissingError(
            f"jar set {name!r} is missing at {folder}: run 'make jars' (or deploy/fetch-jars.sh {jars_root()} {name})"
        )
    return folder


def jar_paths(name: str) -> list[str]:
    """Absolute paths of every jar in a set, sorted for a stable classpath."""
    return sorted(str(p) for p in jar_set_dir(name).glob("*.jar"))
