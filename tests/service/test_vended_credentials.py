"""Access delegation: a REST catalog vends the storage credentials, and Floe holds no S3 keys of its own.

Iceberg's own REST server (``include-credentials``) answers every table load
with the keys of the S3Proxy warehouse. The processes under test have the
endpoint but no keys (and no instance metadata to fall back on), so every file
they write, on the driver and in Spark's Python workers, is written with the
vended keys or not at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from commit.catalog.rest.catalog import RestCatalog
from commit.catalog.rest.options import RestOptions
from table.io import FileIO, FileIOError, _s3_fs
from table.object_store import CREDENTIAL_VARIABLES
from tests.commit.producer_support import CommitTable
from tests.ingest.e2e_support import REPO, change_events, expected_table, normalized, produce
from tests.service.test_ingest_command import events_config
from tests.support.rest_catalog import RestCatalogServer
from tests.support.s3proxy import REGION, s3_file_io_properties

FLOE = [sys.executable, "-m", "service.cli"]
NO_INSTANCE_METADATA = {"AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def vending_catalog(s3proxy, tmp_path_factory: pytest.TempPathFactory):
    """A REST catalog over an S3Proxy warehouse that vends the store's keys with each table."""
    bucket = s3proxy.create_bucket(f"vended-{uuid.uuid4().hex[:12]}")
    properties = {**s3_file_io_properties(s3proxy), "include-credentials": "true"}
    with RestCatalogServer(tmp_path_factory.mktemp("vending-catalog"), f"{bucket}/wh",
                           properties=properties) as server:
        yield server


@pytest.fixture()
def without_own_keys(monkeypatch: pytest.MonkeyPatch):
    """This process has the S3 endpoint but no keys, and forgets every client and credential it had."""
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in NO_INSTANCE_METADATA.items():
        monkeypatch.setenv(name, value)
    _s3_fs.cache_clear()
    yield
    _s3_fs.cache_clear()


def test_a_table_is_created_written_and_read_with_the_keys_the_catalog_vends(vending_catalog,
                                                                             without_own_keys) -> None:
    probe = f"{vending_catalog.warehouse}/probe-{uuid.uuid4().hex}"
    with pytest.raises(FileIOError):  # the control: without vended keys this process cannot write
        FileIO.for_location(probe).write_bytes(probe, b"x")
    name = f"ns_{uuid.uuid4().hex[:8]}.t"
    options = RestOptions(access_delegation="vended-credentials")
    with RestCatalog(vending_catalog.uri, vending_catalog.warehouse, options=options) as catalog:
        table = CommitTable.create(catalog, name)  # type: ignore[arg-type]  # staged create: keys first
        table.append([1, 2, 3])
        assert table.ids() == [1, 2, 3]
        loaded = catalog.load_table(name)
        assert loaded.io.credentials.for_location(f"{table.location}/metadata/v1.json") is not None
        sibling = CommitTable.create(catalog, f"{name}_v2")  # type: ignore[arg-type]  # its own keys, not t's
        sibling.append([4])
        assert sibling.ids() == [4]
        siblings = catalog.load_table(f"{name}_v2").io.credentials
        assert siblings.for_location(f"{sibling.location}/data/x.parquet").prefix == f"{sibling.location}/"
        assert loaded.io.credentials.for_location(f"{sibling.location}/data/x.parquet") is None, "t's keys are t's"


def test_without_vended_keys_a_create_fails_in_one_line(rest_catalog_server, s3proxy, without_own_keys) -> None:
    """A catalog that vends nothing: the first file's write fails, naming the location."""
    bucket = s3proxy.create_bucket(f"unvended-{uuid.uuid4().hex[:12]}")
    name = f"ns_{uuid.uuid4().hex[:8]}.t"
    with RestCatalog(rest_catalog_server.uri, f"{bucket}/wh",
                     options=RestOptions(access_delegation="vended-credentials")) as catalog:
        catalog.create_namespace(name.split(".")[0])
        with pytest.raises(FileIOError) as refused:
            CommitTable.create(catalog, name)  # type: ignore[arg-type]
    assert f"{bucket}/wh" in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.kafka
@pytest.mark.spark
def test_floe_ingest_and_compact_on_vended_credentials_only(kafka_bootstrap, new_topic, vending_catalog, s3proxy,
                                                           tmp_path: Path) -> None:
    topic = new_topic("vended", partitions=2)
    delivered = produce(kafka_bootstrap, topic, change_events(2_000, 400, seed=3))
    config = tmp_path / "floe.yaml"
    config.write_text(yaml.safe_dump(vended_config(tmp_path, kafka_bootstrap, topic, vending_catalog, s3proxy)))
    env = {name: value for name, value in os.environ.items()
           if name not in CREDENTIAL_VARIABLES and not name.startswith("AWS_")}
    env.update(NO_INSTANCE_METADATA, PYTHONUNBUFFERED="1")
    for command in (["ingest"], ["compact", "--once"]):
        done = subprocess.run([*FLOE, *command, "--config", str(config)], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=420)
        assert done.returncode == 0, f"floe {command[0]}: {done.stdout[-3000:]}{done.stderr[-3000:]}"

    from pyiceberg.catalog import load_catalog

    reader = load_catalog("vended", type="rest", uri=vending_catalog.uri, **{
        "s3.endpoint": s3proxy.endpoint, "s3.region": REGION, "header.X-Iceberg-Access-Delegation": "vended-credentials"})
    table = reader.load_table("db.events")
    assert normalized(table.scan().to_arrow()) == expected_table(delivered)
    operations = [snapshot.summary.operation.value for snapshot in table.snapshots()]
    assert "replace" in operations, operations  # the compactor's Spark tasks rewrote files, with vended keys too


def vended_config(tmp: Path, bootstrap: str, topic: str, catalog: RestCatalogServer, s3proxy: Any) -> dict[str, Any]:
    """Upserts through the vending catalog; the store's endpoint but no keys; a Spark-run compaction."""
    return events_config(
        tmp, bootstrap, topic,
        catalog={"type": "rest", "uri": catalog.uri, "warehouse": catalog.warehouse,
                 "access_delegation": "vended-credentials"},
        storage={"s3": {"endpoint": s3proxy.endpoint, "region": REGION, "path_style_access": True}},
        trigger={"available_now": True},
        spark={"master": "local[2]"},
        compaction={"executor": "spark", "rewrite_options": {"min-input-files": "2"},
                    "remove_orphans": {"enabled": False}, "expire_snapshots": {"enabled": False}},
    )
