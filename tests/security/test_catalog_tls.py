"""The PostgreSQL catalog over TLS with the server verified (issue 35).

PostgreSQL serves TLS with a certificate from a CA made at run time and refuses any TCP connection
without it (``hostssl`` only). Floe's catalog URI carries libpq's own settings,
``sslmode=verify-full&sslrootcert=<CA file>``: ingest lands exactly through it, and a CA that did not sign
the server's certificate is refused at start in one line.
"""

from __future__ import annotations

import psycopg
import pytest
import yaml

from commit.catalog import open_catalog
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
from tests.support.postgres import PostgresServer
from tests.support.refused_runs import the_one_error_line
from tests.support.secret_scan import assert_no_secret


@pytest.mark.kafka
@pytest.mark.spark
def test_ingest_lands_through_a_verified_tls_catalog_and_an_untrusted_one_is_refused(kafka_bootstrap, tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    server_cert = ca.issue("postgres", server=True)
    with PostgresServer() as server:
        plain_uri = server.create_database("floe")
        server.require_tls(server_cert.cert, server_cert.key)
        with pytest.raises(psycopg.OperationalError, match="no encryption"):
            psycopg.connect(plain_uri + "?sslmode=disable").close()  # TLS or nothing

        topic = create_topic(kafka_bootstrap, "tls-catalog", partitions=2)
        delivered = produce(kafka_bootstrap, topic, change_events(500, 50, seed=39))
        other = CertificateAuthority(tmp_path / "other", "Some other CA")
        refused = run_floe("ingest", "--config", str(config(tmp_path / "refused", kafka_bootstrap, topic,
                                                            f"{plain_uri}?sslmode=verify-full&sslrootcert={other.ca_file}")),
                           timeout=300)
        line = the_one_error_line(refused)
        assert line.endswith(f": connection failed: connection to server at \"127.0.0.1\", port {server.port} "
                             "failed: SSL error: certificate verify failed"), line

        uri = f"{plain_uri}?sslmode=verify-full&sslrootcert={ca.ca_file}"
        home = tmp_path / "landed"
        landed = run_floe("ingest", "--config", str(config(home, kafka_bootstrap, topic, uri)), timeout=600)
        assert landed.returncode == 0, landed.stdout[-3000:] + landed.stderr[-3000:]
        with open_catalog(uri, str(home / "warehouse"), "floe", create=False) as catalog:
            loaded = catalog.load_table("db.events")
            assert normalized(TableScan(loaded.io, loaded.metadata).to_arrow()) == expected_table(delivered)
        assert_no_secret({"refused": refused.stdout + refused.stderr, "landed": landed.stdout + landed.stderr},
                         {"the PostgreSQL server's key": server_cert.key.read_text()})


def config(home, bootstrap: str, topic: str, uri: str):
    home.mkdir(parents=True)
    raw = events_config(home, bootstrap, topic, trigger={"available_now": True})
    raw["catalog"] = {"uri": uri, "warehouse": str(home / "warehouse")}
    raw["log_format"] = "json"
    path = home / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
