"""The floe CLI's table inspection and check commands, on real catalogs and brokers."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from commit.operations.row_delta import RowDelta
from service.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, main
from service.local_kafka import free_port
from table.deletes.writers import DeletionVectorWriter
from table.io import FileIO
from table.scan import TableScan
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.commit.producer_support import CommitTable
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
    catalog = SqlCatalog(uri, str(warehouse))
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
    assert f"format version:    {table.metadata.format_version}" in out.splitlines()

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


def test_table_upgrade_to_v3_keeps_rows_and_files_shows_deletion_vectors(registered_table, capsys):
    base, table = registered_table
    assert main([*base, "upgrade", "db.people", "--format-version", "3"]) == EXIT_OK
    assert "from format version 2 to 3 (next-row-id 0)" in capsys.readouterr().out
    assert main([*base, "upgrade", "db.people", "--format-version", "3"]) == EXIT_OK
    assert "already at format version 3" in capsys.readouterr().out

    uri, warehouse = base[2], base[4]
    with SqlCatalog(uri, warehouse) as catalog:
        commit_table = CommitTable(catalog, "db.people", FileIO.for_location(table.metadata_location))
        [task] = [t for t in TableScan(commit_table.io, commit_table.metadata()).plan_files() if t.position_deletes]
        data_file = task.data_file
        writer = DeletionVectorWriter(commit_table.io, f"{commit_table.location}/data")
        writer.merge_existing(data_file.file_path, task.position_deletes, data_file.spec_id, data_file.partition)
        writer.delete(data_file.file_path, [1], data_file.spec_id, data_file.partition)
        commit_table.commit(RowDelta([], writer.close(), removed_delete_files=writer.replaced))
    assert main([*base, "files", "db.people"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "dv=2 deleted in " in out and ".puffin@4" in out and "position-deletes=0" in out
    assert main([*base, "scan", "db.people", "--limit", "100"]) == EXIT_OK
    assert len(capsys.readouterr().out.strip().splitlines()) == 8  # the old position delete, merged, and one more
    assert main([*base, "rewrite-position-deletes", "db.people"]) == EXIT_OK  # the merge replaced the only one
    assert "has no position delete files to rewrite" in capsys.readouterr().out


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
    assert out.count("ok   ") == 5, out
    assert "ok   spark local[*]: local mode, " in out
    assert "ok   table db.events: will be created on the first start" in out


@pytest.mark.kafka
def test_check_reaches_a_warehouse_on_s3_and_a_spark_master(tmp_path, kafka_bootstrap, s3proxy, capsys,
                                                            monkeypatch):
    import socket

    for name in s3proxy.environment():  # the configuration alone must lead there
        monkeypatch.delenv(name, raising=False)
    bucket = s3proxy.create_bucket("check-" + tmp_path.name.lower().replace("_", "-")[-40:].strip("-"))
    path = _config(tmp_path, kafka_bootstrap)
    data = yaml.safe_load(path.read_text())
    data["catalog"]["warehouse"] = f"{bucket}/warehouse"
    data["storage"] = {"s3": {"endpoint": s3proxy.endpoint, "region": "us-east-1", "path_style_access": True,
                              "access_key_id": "floe-test-access", "secret_access_key": "floe-test-secret-key"}}
    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        port = master.getsockname()[1]
        data["spark"] = {"master": f"spark://127.0.0.1:{port}"}
        path.write_text(yaml.safe_dump(data))
        main(["check", "--config", str(path)])
    out = capsys.readouterr().out
    assert f"ok   spark spark://127.0.0.1:{port}: master reachable at 127.0.0.1:{port}" in out, out
    assert (f"ok   warehouse {bucket}/warehouse: writable and readable (S3 at {s3proxy.endpoint}, path-style, "
            "region us-east-1)") in out, out
    assert "floe-test-secret-key" not in out


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


def test_version_and_the_options_after_the_subcommand(registered_table, capsys):
    base, _ = registered_table
    with pytest.raises(SystemExit) as version:
        main(["--version"])
    assert version.value.code == 0 and re.fullmatch(r"floe \S+\n", capsys.readouterr().out)

    after = ["table", "list", *base[1:]]  # --catalog-uri and --warehouse after the subcommand
    assert main(after) == EXIT_OK
    assert capsys.readouterr().out.split() == ["db.people"]
    assert main([*base, "scan", "db.people", "--columns", "id,name", "--limit", "2"]) == EXIT_OK
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 2 and all(set(r) == {"id", "name"} for r in rows)
    assert main(["table", "scan", "db.people", "--columns", "name", *base[1:]]) == EXIT_OK
    assert all(set(json.loads(line)) == {"name"} for line in capsys.readouterr().out.strip().splitlines())
    with pytest.raises(SystemExit):
        main(["table", "scan", "--help"])
    assert "rows to print at most (default: 20)" in capsys.readouterr().out


def test_table_errors_are_one_line_that_says_what_to_do(registered_table, capsys):
    base, _ = registered_table
    assert main([*base, "describe", "db.nope"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "floe table describe: table 'db.nope' does not exist: it is not in the catalog; "
        "'floe table list' shows the tables of the catalog"
    ]
    assert main([*base, "scan", "db.people", "--columns", "id,nope"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "floe table scan: table db.people has no column 'nope'; its columns are: id, name"
    ]
    assert "Traceback" not in err


def test_inspection_never_creates_a_catalog(tmp_path, capsys):
    missing = tmp_path / "nonexist" / "cat.db"
    code = main(["table", "--catalog-uri", f"sqlite:///{missing}", "--warehouse", str(tmp_path), "list"])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED and not missing.exists() and not missing.parent.exists()
    assert err.strip() == (f"floe table list: no Floe catalog at sqlite:///{missing}: the file {missing} does not exist; "
                           "check the catalog URI (inspection never creates a catalog)")

    code = main(["table", "--catalog-uri", "sqlite:///relative.db", "--warehouse", str(tmp_path), "list"])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED and not Path("relative.db").exists()
    assert "names a relative path; use sqlite:////absolute/path.db" in err

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()  # a database, but no catalog in it
    code = main(["table", "--catalog-uri", f"sqlite:///{empty}", "--warehouse", str(tmp_path), "list"])
    assert code == EXIT_FAILED and "the database has no Iceberg catalog tables" in capsys.readouterr().err
    assert sqlite3.connect(empty).execute("select count(*) from sqlite_master").fetchone() == (0,)

    older = tmp_path / "older.db"  # the catalog schema before iceberg_type (a v0 JDBC catalog)
    with sqlite3.connect(older) as db:
        db.execute("CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) "
                   "NOT NULL, table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), "
                   "previous_metadata_location VARCHAR(1000), PRIMARY KEY (catalog_name, table_namespace, table_name))")
        db.execute("CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace "
                   "VARCHAR(255) NOT NULL, property_key VARCHAR(255), property_value VARCHAR(1000), "
                   "PRIMARY KEY (catalog_name, namespace, property_key))")
    code = main(["table", "--catalog-uri", f"sqlite:///{older}", "--warehouse", str(tmp_path), "list"])
    assert code == EXIT_FAILED
    assert "the catalog database lacks iceberg_tables.iceberg_type (an older" in capsys.readouterr().err


def test_a_taken_http_port_is_one_line(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, f"127.0.0.1:{free_port()}")
        data = yaml.safe_load(config.read_text())
        data["http"] = {"host": "127.0.0.1", "compact_port": port}
        config.write_text(yaml.safe_dump(data))
        code = main(["compact", "--once", "--config", str(config)])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED
    assert (f"floe compact: http.compact_port {port} is already in use on 127.0.0.1 (another Floe process?): "
            "stop that process, or set http.compact_port to a free port") in err.splitlines()
    assert "Traceback" not in err


def test_a_reader_that_goes_away_ends_the_output_quietly(tmp_path):
    config = _config(tmp_path, f"127.0.0.1:{free_port()}")
    floe = Path(sys.executable).with_name("floe")
    done = subprocess.run(f"'{floe}' check --show-config --config '{config}' 2>'{tmp_path / 'err'}' | head -n 1",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert done.stdout == "configuration: valid\n"
    assert "Traceback" not in (tmp_path / "err").read_text() and "BrokenPipe" not in (tmp_path / "err").read_text()
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line: every write fails
    try:
        gone = subprocess.run([str(floe), "check", "--show-config", "--config", str(config)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (gone.returncode, gone.stderr) == (141, "")


@pytest.mark.parametrize("variable,value,allowed", [
    ("FLOE_LOG_LEVEL", "LOUD", "DEBUG, INFO, WARNING, ERROR"),
    ("FLOE_LOG_FORMAT", "xml", "auto, text, json"),
])
def test_a_bad_log_variable_is_one_line_naming_it(monkeypatch, capsys, variable, value, allowed):
    monkeypatch.setenv(variable, value)
    assert main(["table", "list"]) == EXIT_CONFIG
    assert capsys.readouterr().err == f"floe: {variable}: expected one of {allowed}, got '{value}'\n"


def test_the_debug_traceback_is_redacted_too(capsys):
    import argparse
    import logging

    from service.cli import _fail

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)  # what FLOE_LOG_LEVEL=DEBUG leaves behind
    try:
        raise RuntimeError("sasl.password=hunter2 rejected by the broker")
    except RuntimeError as error:
        assert _fail(argparse.Namespace(command="check"), error) == EXIT_FAILED
    finally:
        root.setLevel(level)
    err = capsys.readouterr().err
    assert "Traceback" in err and "sasl.password=***" in err
    assert "hunter2" not in err


@pytest.mark.parametrize(("argv", "choices"), [([], "{check,ingest,compact,table,index,demo}"),
                                               (["table"], "{list,describe,history,files,scan,upgrade,"
                                                           "rewrite-position-deletes}"),
                                               (["index"], "{check,rebuild}")])
def test_a_missing_subcommand_is_named_by_its_choices(argv: list[str], choices: str, capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith(f"the following arguments are required: {choices}"), last
