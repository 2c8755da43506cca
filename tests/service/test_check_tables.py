"""``floe check``'s table lines: each configured table against the catalog, read only.

Real SQLite catalogs on tmp_path. The tables are created by ``ensure_table``
from a first configuration, the way ``floe ingest`` creates them; the check
then runs against a second configuration that keeps one table, adds one,
evolves one and changes one in a way Floe refuses.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from commit.metadata_committer import commit_metadata_change
from ingest.driver.table_setup import TablePropertyError, ensure_table
from service.check import check_tables
from service.cli import EXIT_FAILED, main
from service.config import FloeConfig, parse_config
from service.jobs import table_spec
from service.local_kafka import free_port
from table.partitioning import build_partition_spec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.types import LongType, NestedField, TimestamptzType


def orders(identifier: str) -> dict[str, Any]:
    return {
        "identifier": identifier,
        "topics": [identifier],
        "key": ["id"],
        "schema": [
            {"name": "id", "type": "long", "required": True},
            {"name": "qty", "type": "int"},
            {"name": "status", "type": "string"},
        ],
        "partition_spec": ["bucket(4, id)"],
    }


def config_data(tmp_path: Path, tables: list[dict[str, Any]], catalog_file: str = "catalog.db") -> dict[str, Any]:
    (tmp_path / "wh").mkdir(exist_ok=True)
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        "catalog": {"uri": f"sqlite:///{tmp_path / catalog_file}", "warehouse": str(tmp_path / "wh")},
        "checkpoint_location": str(tmp_path / "checkpoints"),
        "tables": tables,
    }


def create_tables(config: FloeConfig) -> None:
    """The tables as the first ``floe ingest`` creates them."""
    with SqlCatalog(config.catalog.connection_uri(), config.catalog.warehouse) as catalog:
        for table in config.tables:
            ensure_table(catalog, table_spec(table))


def changed_tables() -> list[dict[str, Any]]:
    """The second configuration: shop.same kept, shop.new added, shop.more evolved, shop.bad refused."""
    more, bad = orders("shop.more"), orders("shop.bad")
    more["schema"] = [*more["schema"][:1], {"name": "qty", "type": "long"}, *more["schema"][2:],
                      {"name": "note", "type": "string"}]
    bad["schema"] = [bad["schema"][0], {"name": "qty", "type": "string"}, *bad["schema"][2:]]
    return [orders("shop.same"), orders("shop.new"), more, bad]


EXPECTED = [
    "ok   table shop.same: exists and matches",
    "ok   table shop.new: will be created on the first start",
    "ok   table shop.more: will evolve: widen column qty from int to long, add column note (string)",
    "FAIL table shop.bad: column 'qty': int in the table, string in the configuration: Iceberg promotes only int "
    "to long, float to double and decimal(P,S) to decimal(P',S) with P' > P. Fix: change the configuration back "
    "to int, or land the new type in a column of another name",
]


def catalog_state(config: FloeConfig) -> dict[str, str]:
    with SqlCatalog(config.catalog.connection_uri(), config.catalog.warehouse, create=False) as catalog:
        return {str(ident): catalog.load_pointer(ident).metadata_location for ident in catalog.list_tables("shop")}


def test_each_table_is_matched_created_evolved_or_refused_and_nothing_changes(tmp_path):
    create_tables(parse_config(config_data(tmp_path, [orders(t) for t in ("shop.same", "shop.more", "shop.bad")])))
    config = parse_config(config_data(tmp_path, changed_tables()))
    before = catalog_state(config)
    files_before = sorted(p for p in (tmp_path / "wh").rglob("*"))

    results = check_tables(config)

    assert [r.line() for r in results] == EXPECTED
    assert catalog_state(config) == before and len(before) == 3, "the check never creates or changes a table"
    assert sorted(p for p in (tmp_path / "wh").rglob("*")) == files_before


def test_a_renamed_or_dropped_optional_column_is_named_with_what_happens_to_it(tmp_path, caplog):
    # An optional column renamed in the configuration reads as a new column plus a kept one: Floe cannot tell a
    # rename from an add, so the check says both and gives the rename to run by hand; a dropped one is kept as null.
    create_tables(parse_config(config_data(tmp_path, [orders("shop.renamed"), orders("shop.dropped")])))
    renamed, dropped = orders("shop.renamed"), orders("shop.dropped")
    renamed["schema"][2] = {"name": "state", "type": "string"}
    dropped["schema"] = dropped["schema"][:2]
    config = parse_config(config_data(tmp_path, [renamed, dropped]))

    assert [r.line() for r in check_tables(config)] == [
        "ok   table shop.renamed: will evolve: add column state (string); keeps column status (string), no longer "
        "configured: written as null; if state is status renamed, rename it by hand before the start instead: "
        "ALTER TABLE shop.renamed RENAME COLUMN status TO state",
        "ok   table shop.dropped: exists and matches; keeps column status (string), no longer configured: "
        "written as null",
    ]
    with caplog.at_level("WARNING", logger="floe"):
        create_tables(config)  # the start says the same, once per kept column
    assert [r.getMessage() for r in caplog.records if "keeps column" in r.getMessage()] == [
        "table shop.renamed keeps column status (string), no longer configured: written as null; if state is status "
        "renamed, rename it by hand before the start instead: ALTER TABLE shop.renamed RENAME COLUMN status TO state",
        "table shop.dropped keeps column status (string), no longer configured: written as null",
    ]


def test_a_missing_catalog_means_every_table_will_be_created_and_is_not_created(tmp_path):
    config = parse_config(config_data(tmp_path, [orders("shop.a"), orders("shop.b")], "nowhere.db"))
    assert [r.line() for r in check_tables(config)] == [
        "ok   table shop.a: will be created on the first start",
        "ok   table shop.b: will be created on the first start",
    ]
    assert not (tmp_path / "nowhere.db").exists()


def test_an_upsert_table_that_needs_an_unpartitioned_spec_says_so(tmp_path):
    table = {**orders("shop.upserts"), "mode": "upsert", "partition_spec": ["day(ts)"],
             "schema": [{"name": "id", "type": "long", "required": True}, {"name": "ts", "type": "timestamptz"}]}
    config = parse_config(config_data(tmp_path, [table]))
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", TimestamptzType()),
                    identifier_field_ids=[1])
    with SqlCatalog(config.catalog.connection_uri(), config.catalog.warehouse) as catalog:  # created by another tool
        catalog.create_namespace("shop")
        catalog.create_table("shop.upserts", schema, build_partition_spec(schema, [("day", "ts")]),
                             UNSORTED_SORT_ORDER, {})
    [result] = check_tables(config)
    assert result.line() == ("ok   table shop.upserts: exists and matches; "
                             "will add an unpartitioned spec for global equality deletes")


def test_a_table_property_the_writers_refuse_fails_at_start_not_at_the_first_batch(tmp_path):
    from service.jobs import table_spec

    CODEC = "write.parquet.compression-codec"

    config = parse_config(config_data(tmp_path, [orders("shop.lzo")]))
    create_tables(config)
    with SqlCatalog(config.catalog.connection_uri(), config.catalog.warehouse) as catalog:  # set by another engine
        commit_metadata_change(
            catalog, "shop.lzo", lambda loaded, _: loaded.metadata.set_properties({CODEC: "lzo"}),
            lambda metadata: metadata.properties.get(CODEC) == "lzo", what="property change")
        [result] = check_tables(config)
        with pytest.raises(TablePropertyError) as refused:
            ensure_table(catalog, table_spec(config.tables[0]))
    assert result.line() == refused.value.detail.join(("FAIL table shop.lzo: ", ""))
    assert str(refused.value) == (
        "table shop.lzo: table property 'write.parquet.compression-codec': 'lzo' is not one of ['brotli', 'gzip', "
        "'lz4', 'none', 'snappy', 'uncompressed', 'zstd']; set it right, or unset it: "
        "ALTER TABLE shop.lzo UNSET TBLPROPERTIES ('write.parquet.compression-codec')")


def test_an_unreadable_table_fails_its_line_only(tmp_path):
    config = parse_config(config_data(tmp_path, [orders("shop.gone"), orders("shop.fresh")]))
    create_tables(parse_config(config_data(tmp_path, [orders("shop.gone")])))
    Path(catalog_state(config)["shop.gone"]).unlink()
    lines = [r.line() for r in check_tables(config)]
    assert lines[0].startswith("FAIL table shop.gone: ") and "metadata.json" in lines[0], lines
    assert lines[1] == "ok   table shop.fresh: will be created on the first start"


def test_floe_check_prints_the_table_lines(tmp_path, capsys):
    first = config_data(tmp_path, [orders(t) for t in ("shop.same", "shop.more", "shop.bad")])
    create_tables(parse_config(first))
    second = copy.deepcopy(first)
    second["tables"] = changed_tables()
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(second))

    code = main(["check", "--config", str(path)])

    out = capsys.readouterr().out.splitlines()
    assert code == EXIT_FAILED  # the refused table (and the unreachable Kafka)
    assert [line for line in out if " table " in line[:11]] == EXPECTED


@pytest.mark.kafka
def test_a_template_entry_lists_each_topic_it_matches_now_and_what_its_table_would_become(
        tmp_path, kafka_bootstrap, new_topic):
    """Tables from a pattern whose columns come from the registry: one line per matching topic, changing nothing."""
    from tests.support.schema_registry import SchemaRegistry

    prefix = f"chk{uuid.uuid4().hex[:8]}"
    existing, fresh = new_topic(f"{prefix}.orders"), new_topic(f"{prefix}.items")
    registry = SchemaRegistry()
    url = registry.serve()
    v1 = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}
    v2 = {**v1, "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}
    try:
        for topic in (existing, fresh):
            registry.register(f"{topic}-value", {"schema": json.dumps(v1)})
        template = {"identifier": "raw.{topic}", "topic_pattern": f"{prefix}\\..*",
                    "format": {"type": "confluent", "registry_url": url}}
        data = config_data(tmp_path, [template])
        data["kafka"]["bootstrap_servers"] = kafka_bootstrap
        config = parse_config(data)
        create_tables(config.with_tables_per_topic([existing]))
        registry.register(f"{existing}-value", {"schema": json.dumps(v2)})
        lines = [r.line() for r in check_tables(config)]
    finally:
        registry.close()
    name = lambda topic: "raw." + topic.replace(".", "_").replace("-", "_")  # noqa: E731
    assert sorted(lines) == sorted([
        f"ok   table {name(existing)} (topic {existing}): will evolve: add column note (string)",
        f"ok   table {name(fresh)} (topic {fresh}): will be created on the first start",
    ]), lines
