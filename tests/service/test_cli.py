"""The floe CLI's table inspection and check commands, on real catalogs and brokers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from commit.catalog import Catalog
from service.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, main
from service.local_kafka import free_port
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.support.table_builder import HandWrittenTable


@pytest.fixture()
def registered_table(tmp_path: Path) -> tuple[list[str], HandWrittenTable]:
    """A table with an append and a position delete, registered in a SQLite catalog."""
    warehouse = tmp_path / "wh"
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()))
    table = HandWrittenTable.create(str(warehouse / "db" / "people"), schema, [("bucket[2]", "id")])
    files = table.write_data(pa.table({"id": pa.array(range(10), pa.int64()), "name": [f"n{i}" for i in range(10)]}))
    table.commit(files)
    table.commit([table.write_position_deletes(files[0], [0])], "delete")
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = Catalog(uri, str(warehouse))
    catalog.create_namespace("db")
    catalog.register_table("db.people", table.metadata_location)
    return ["table", "--catalog-uri", uri, "--warehouse", str(warehouse)], table


def test_table_list_describe_history(registered_table, capsys):
    base, table = registered_table
    assert main([*base, "list"]) == EXIT_OK
    assert capsys.readouterr().out.split() == ["db.people"]

    assert main([*base, "describe", "db.people"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "1: id: required long" in out and "id_bucket=bucket[2](id)" in out
    assert table.metadata_location in out

    assert main([*base, "history", "db.people"]) == EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and " delete" in lines[0] and " append" in lines[1], lines


def test_table_files_and_scan_apply_deletes(registered_table, capsys):
    base, _ = registered_table
    assert main([*base, "files", "db.people"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "position-deletes=1" in out
    assert out.strip().splitlines()[-1].startswith("2 data files; 1 delete files")

    assert main([*base, "scan", "db.people", "--limit", "100"]) == EXIT_OK
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 9, "one row is position-deleted"
    assert main([*base, "scan", "db.people", "--limit", "3", "--columns", "name"]) == EXIT_OK
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 3 and all(set(r) == {"name"} for r in rows)


def _config(tmp_path: Path, bootstrap: str, **kafka: Any) -> Path:
    data = {
        "kafka": {"bootstrap_servers": bootstrap, **kafka},
        "catalog": {"uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": str(tmp_path / "wh")},
        "checkpoint_location": str(tmp_path / "checkpoints"),
        "tables": [
            {
                "identifier": "db.events",
                "topics": ["events"],
                "schema": [{"name": "id", "type": "long", "required": True}],
            }
        ],
    }
    (tmp_path / "wh").mkdir(exist_ok=True)
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.kafka
def test_check_reaches_kafka_catalog_and_warehouse(tmp_path, kafka_bootstrap, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    futures = admin.create_topics([NewTopic("events", 1, 1)])
    try:
        futures["events"].result(30)
    except Exception as exc:  # noqa: BLE001 - an earlier run may have created it
        assert "TOPIC_ALREADY_EXISTS" in str(exc)
    assert main(["check", "--config", str(_config(tmp_path, kafka_bootstrap))]) == EXIT_OK
    out = capsys.readouterr().out
    assert "configuration: valid" in out
    assert out.count("ok   ") == 3, out


def test_check_reports_an_unreachable_broker_without_leaking_secrets(tmp_path, capsys):
    secret = "s3cr3t-Pa55"
    config = _config(
        tmp_path,
        f"127.0.0.1:{free_port()}",
        security={"protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "PLAIN", "username": "u", "password": secret}},
    )
    code = main(["check", "--config", str(config), "--show-config"])
    captured = capsys.readouterr()
    assert code == EXIT_FAILED
    assert "FAIL kafka" in captured.out
    assert "ok   catalog" in captured.out and "ok   warehouse" in captured.out
    assert secret not in captured.out + captured.err


def test_check_rejects_an_invalid_config_naming_the_key(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": "x:1", "max_offsets_per_trigger": "ten"}}))
    assert main(["check", "--config", str(path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "kafka.max_offsets_per_trigger: expected an integer, got 'ten'" in err
