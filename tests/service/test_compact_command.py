"""floe compact --once against a real SQLite catalog and a table of small files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from service.cli import EXIT_OK, main
from service.compact_command import compaction_options, run_compactor
from service.config import parse_config
from table.scan import TableScan
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.support.table_builder import HandWrittenTable


def _config(tmp_path: Path, uri: str, warehouse: Path) -> dict:
    return {
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "catalog": {"uri": uri, "warehouse": str(warehouse)},
        "checkpoint_location": str(tmp_path / "checkpoints"),
        "http": {"compact_port": 0, "ingest_port": 0, "host": "127.0.0.1"},
        "tables": [
            {
                "identifier": "db.small",
                "topics": ["small"],
                "schema": [{"name": "id", "type": "long", "required": True}, {"name": "v", "type": "string"}],
            }
        ],
        "compaction": {"rewrite_options": {"target-file-size-bytes": "1048576", "min-input-files": "2"}},
    }


def test_config_maps_onto_compaction_options(tmp_path):
    config = parse_config(_config(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh"))
    options = compaction_options(config.compaction)
    assert options.rewrite["partial-progress.enabled"] == "true"
    assert options.rewrite["target-file-size-bytes"] == "1048576"
    assert options.maintenance.orphan_older_than_ms == 3 * 86_400_000
    assert options.maintenance.expire_older_than_ms == 5 * 86_400_000
    assert options.lease_ttl_ms == 600_000
    raw = _config(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh")
    raw["compaction"]["lease_ttl"] = "20s"
    assert compaction_options(parse_config(raw).compaction).lease_ttl_ms == 20_000


def _small_files_table(tmp_path: Path) -> tuple[HandWrittenTable, Catalog, Path]:
    """Ten small files of ten rows in ``db.small``, and a config file naming it."""
    warehouse = tmp_path / "wh"
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", StringType()))
    table = HandWrittenTable.create(str(warehouse / "db" / "small"), schema)
    for start in range(0, 100, 10):
        rows = pa.table({"id": pa.array(range(start, start + 10), pa.int64()), "v": [str(i) for i in range(10)]})
        table.commit(table.write_data(rows))
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = SqlCatalog(uri, str(warehouse))
    catalog.create_namespace("db")
    catalog.register_table("db.small", table.metadata_location)
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, uri, warehouse)))
    return table, catalog, path


def _assert_compacted(table: HandWrittenTable, catalog: Catalog) -> None:
    loaded = catalog.load_table("db.small")
    tasks = list(TableScan(table.io, loaded.metadata).plan_files())
    assert len(tasks) == 1, "ten small files become one"
    ids = TableScan(table.io, loaded.metadata).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(100))


def test_compact_once_rewrites_small_files_and_keeps_every_row(tmp_path, capsys):
    table, catalog, path = _small_files_table(tmp_path)
    assert main(["compact", "--config", str(path), "--once"]) == EXIT_OK
    _assert_compacted(table, catalog)


@pytest.mark.spark
def test_compact_once_on_the_spark_executor_leaves_a_given_session_running(tmp_path, spark):
    table, catalog, path = _small_files_table(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["compaction"]["executor"] = "spark"
    config = parse_config(raw)
    assert config.compaction.executor == "spark"
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())

    assert run_compactor(config, once=True, spark=spark) == EXIT_OK

    _assert_compacted(table, catalog)
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) > jobs_before, "groups ran as Spark tasks"
    assert spark.range(3).count() == 3, "the caller's session is still running"


def test_an_unknown_executor_is_refused(tmp_path):
    raw = _config(tmp_path, f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh")
    raw["compaction"]["executor"] = "threads"
    with pytest.raises(Exception) as failure:
        parse_config(raw)
    assert "compaction.executor" in str(failure.value) and "in-process" in str(failure.value)
