"""Object storage over HTTPS on a CA of one's own (issue 35).

S3Proxy serves HTTPS only, on a certificate from a CA made at run time. ``storage.s3.ca_file`` names that CA:
``floe ingest`` lands exactly on an ``s3://`` warehouse through it, and a CA that did not sign the server's
certificate is refused at start in one line (an ERROR line once Spark is up, as the catalog's). Neither run prints the secret key.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from table.scan import TableScan
from tests.ingest.e2e_support import (
    change_events,
    create_topic,
    expected_table,
    normalized,
    produce,
)
from tests.security.test_secured_kafka import run_floe
from tests.service.test_ingest_command import events_config
from tests.support.certificates import CertificateAuthority
from tests.support.refused_runs import the_one_error_line
from tests.support.s3proxy import ACCESS_KEY, REGION, SECRET_KEY, S3Proxy
from tests.support.secret_scan import assert_no_secret


@pytest.mark.kafka
@pytest.mark.spark
def test_ingest_lands_on_https_storage_through_its_ca_and_an_untrusted_one_is_refused(
        kafka_bootstrap, tmp_path, monkeypatch):
    ca = CertificateAuthority(tmp_path / "ca")
    with S3Proxy(tmp_path / "s3", tls=ca.issue("s3proxy", server=True), ca_file=ca.ca_file) as s3:
        warehouse = s3.create_bucket("warehouse") + "/wh"
        topic = create_topic(kafka_bootstrap, "tls-storage", partitions=2)
        delivered = produce(kafka_bootstrap, topic, change_events(500, 50, seed=40))

        other = CertificateAuthority(tmp_path / "other", "Some other CA")
        refused = run_floe("ingest", "--config", str(config(tmp_path / "refused", kafka_bootstrap, topic, s3,
                                                            warehouse, other.ca_file)), timeout=300)
        line = the_one_error_line(refused)
        assert re.fullmatch(
            rf"an ingest query could not start: FileIOError: cannot open for writing {warehouse}/db/events/metadata/"
            r"[\w-]+\.metadata\.json: .* curlCode: 60, SSL peer certificate or SSH remote key was not OK; "
            r"Details: SSL certificate problem: self-signed certificate in certificate chain", line), line

        home = tmp_path / "landed"
        landed = run_floe("ingest", "--config", str(config(home, kafka_bootstrap, topic, s3, warehouse,
                                                           ca.ca_file)), timeout=600)
        assert landed.returncode == 0, landed.stdout[-3000:] + landed.stderr[-3000:]
        monkeypatch.setenv("AWS_CA_BUNDLE", str(ca.ca_file))
        for name, value in s3.environment().items():
            monkeypatch.setenv(name, value)
        with SqlCatalog(f"sqlite:///{home / 'catalog.db'}", warehouse) as catalog:
            loaded = catalog.load_table("db.events")
        assert loaded.metadata_location.startswith(warehouse + "/")
        assert normalized(TableScan(loaded.io, loaded.metadata).to_arrow()) == expected_table(delivered)
        assert_no_secret({"refused": refused.stdout + refused.stderr, "landed": landed.stdout + landed.stderr},
                         {"the S3 secret key": SECRET_KEY})


def config(home: Path, bootstrap: str, topic: str, s3: S3Proxy, warehouse: str, ca_file: Path) -> Path:
    home.mkdir(parents=True)
    raw = events_config(home, bootstrap, topic, trigger={"available_now": True})
    raw["catalog"] = {"uri": f"sqlite:///{home / 'catalog.db'}", "warehouse": warehouse}
    raw["storage"] = {"s3": {"endpoint": s3.endpoint, "region": REGION, "path_style_access": True,
                             "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY, "ca_file": str(ca_file)}}
    raw["log_format"] = "json"
    path = home / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
