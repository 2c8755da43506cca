"""The oracle's Java-side operations that interop tests build on."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.oracle]


def test_java_equality_deletes_and_static_reads(iceberg_oracle, tmp_path: Path):
    iceberg_oracle.conf(
        **{
            "spark.sql.catalog.ops": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.ops.type": "hadoop",
            "spark.sql.catalog.ops.warehouse": str(tmp_path / "wh"),
        }
    )
    iceberg_oracle.execute(
        "CREATE TABLE ops.db.t (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version'='2')"
    )
    iceberg_oracle.execute("INSERT INTO ops.db.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    before = iceberg_oracle.call("tests.support.oracle_ops:current_metadata_location", table="ops.db.t")

    iceberg_oracle.call("tests.support.oracle_ops:write_equality_deletes", table="ops.db.t", column="id", values=[2])
    after = iceberg_oracle.call("tests.support.oracle_ops:current_metadata_location", table="ops.db.t")

    old = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location", metadata_location=before)
    new = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location", metadata_location=after)
    assert sorted(old.column("id").to_pylist()) == [1, 2, 3]
    assert sorted(new.column("id").to_pylist()) == [1, 3]
    kinds = iceberg_oracle.sql("SELECT content FROM ops.db.t.delete_files").column("content").to_pylist()
    assert kinds == [2], "the Java API wrote one equality delete file"
