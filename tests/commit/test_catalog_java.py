"""Iceberg Java's JdbcCatalog opens a Floe catalog database and commits to it.

A plain JVM (no Spark) runs ``JdbcCatalogProbe.java`` with the test oracle's
jars: Iceberg's runtime and the SQLite/PostgreSQL JDBC drivers, plus pyspark's
Hadoop client and slf4j jars, which Iceberg's HadoopFileIO needs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pyspark
import pytest

from commit.catalog.base import Catalog
from runtime.jars import jar_paths
from table.schema import Schema

PROBE = Path(__file__).with_name("JdbcCatalogProbe.java")

pytestmark = pytest.mark.oracle


def _classpath() -> str:
    iceberg = jar_paths("iceberg-oracle")
    if not iceberg:
        pytest.fail("the iceberg-oracle jars are missing: run `make setup` (deploy/fetch-jars.sh)", pytrace=False)
    spark_jars = Path(pyspark.__file__).parent / "jars"
    return ":".join([*iceberg, str(spark_jars / "*")])


def _jdbc_uri(uri: str) -> str:
    """Floe's catalog URI as a JDBC URL."""
    if uri.startswith("sqlite:///"):
        return "jdbc:sqlite:" + uri[len("sqlite:///") :]
    parts = urlsplit(uri)
    user = parts.username or "postgres"
    query = f"user={user}" + (f"&{parts.query}" if parts.query else "")
    return f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}?{query}"


def _run_probe(uri: str, warehouse: Path) -> dict[str, str]:
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is not on the PATH (Java 17 is a prerequisite)", pytrace=False)
    result = subprocess.run(
        [java, "-cp", _classpath(), str(PROBE), _jdbc_uri(uri), str(warehouse)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"JdbcCatalogProbe failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def test_iceberg_java_reads_and_commits_to_a_floe_catalog(catalog: Catalog, catalog_uri: str, warehouse: Path,
                                                          simple_schema: Schema) -> None:
    catalog.create_namespace("db", {"owner": "floe"})
    catalog.create_namespace("db.sub")
    created = catalog.create_table("db.t", simple_schema)

    seen = _run_probe(catalog_uri, warehouse)

    assert seen["namespaces"] == "[db]"
    assert seen["children"] == "[db.sub]"
    assert seen["owner"] == "floe"
    assert seen["tables"] == "[db.t]"
    assert seen["views"] == "[]"  # Java found iceberg_type: it runs with its V1 (view-aware) schema
    assert seen["uuid"] == str(created.metadata.table_uuid)
    assert seen["columns"] == "2"
    # Java's commit is the same compare-and-swap on the same row.
    pointer = catalog.load_pointer("db.t")
    assert pointer.metadata_location.endswith(seen["committed"].rsplit("/", 1)[-1])
    assert pointer.previous_metadata_location == created.metadata_location
    location, metadata, _ = catalog.load_table("db.t")
    assert metadata.properties["written-by"] == "iceberg-java"
    assert catalog.load_namespace_properties("from_java") == {"k": "v"}
