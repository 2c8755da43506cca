"""The REST catalog over HTTPS, with OAuth2 client credentials whose tokens expire during the run (issue 35).

Iceberg's REST catalog server sits behind a gateway (tests/support/oauth_proxy.py) that serves TLS on a
certificate from a CA made at run time and lets a request through only with a live token; its tokens live
a few seconds. ``catalog.ca_file`` names the CA and ``catalog.credential_file`` the client's credentials:
``floe ingest`` lands exactly while its tokens expire again and again, and a CA that did not sign the
gateway's certificate is refused at start in one line. Neither the client secret nor any token is printed.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import yaml

from commit.catalog import RestOptions, open_catalog
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
from tests.support.oauth_proxy import OAuthTlsProxy
from tests.support.refused_runs import the_one_error_line
from tests.support.secret_scan import assert_no_secret

CLIENT_ID, CLIENT_SECRET = "floe", f"secret-{uuid.uuid4().hex}"
TOKEN_TTL_S = 4.0


@pytest.mark.kafka
@pytest.mark.spark
def test_ingest_lands_through_an_https_rest_catalog_while_its_tokens_expire_and_an_untrusted_ca_is_refused(
        kafka_bootstrap, rest_catalog_server, tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    (tmp_path / "credential").write_text(f"{CLIENT_ID}:{CLIENT_SECRET}\n")
    table = f"tls_{uuid.uuid4().hex[:8]}.events"
    with OAuthTlsProxy(rest_catalog_server.uri, ca.issue("catalog", server=True), CLIENT_ID, CLIENT_SECRET,
                       TOKEN_TTL_S) as proxy:
        topic = create_topic(kafka_bootstrap, "tls-rest", partitions=2)
        delivered = produce(kafka_bootstrap, topic, change_events(3000, 200, seed=41))

        other = CertificateAuthority(tmp_path / "other", "Some other CA")
        refused = run_floe("ingest", "--config", str(config(tmp_path / "refused", kafka_bootstrap, topic, proxy,
                                                            rest_catalog_server.warehouse, table, other.ca_file,
                                                            tmp_path / "credential")), timeout=300)
        line = the_one_error_line(refused)
        assert re.fullmatch(
            rf"an ingest query could not start: REST catalog get a token from {proxy.uri}/v1/oauth/tokens: no answer "
            r"SSLError: .*\[SSL: CERTIFICATE_VERIFY_FAILED\] certificate verify failed: self-signed certificate in "
            r"certificate chain .*", line), line
        assert not proxy.tokens, "nothing was asked of an untrusted server"

        landed = run_floe("ingest", "--config", str(config(tmp_path / "landed", kafka_bootstrap, topic, proxy,
                                                           rest_catalog_server.warehouse, table, ca.ca_file,
                                                           tmp_path / "credential")), timeout=600)
        assert landed.returncode == 0, landed.stdout[-3000:] + landed.stderr[-3000:]
        assert len(proxy.tokens) >= 3, f"the run outlived its tokens: {len(proxy.tokens)} token(s)"
        rest = RestOptions(credential=f"{CLIENT_ID}:{CLIENT_SECRET}", ca_file=str(ca.ca_file))
        with open_catalog(proxy.uri, rest_catalog_server.warehouse, create=False, rest=rest) as catalog:
            loaded = catalog.load_table(table)
        assert normalized(TableScan(loaded.io, loaded.metadata).to_arrow()) == expected_table(delivered)
        outputs = {"refused": refused.stdout + refused.stderr, "landed": landed.stdout + landed.stderr}
        assert_no_secret(outputs, {"the client secret": CLIENT_SECRET,
                                   **{f"token {i}": token for i, token in enumerate(proxy.tokens)}})
        print(f"FIGURES REST over TLS: {len(proxy.tokens)} tokens of {TOKEN_TTL_S:.0f}s, "
              f"{proxy.expired_refusals} request(s) refused for an expired token and sent again")


def config(home: Path, bootstrap: str, topic: str, proxy: OAuthTlsProxy, warehouse: str, table: str,
           ca_file: Path, credential_file: Path) -> Path:
    home.mkdir(parents=True)
    raw = events_config(home, bootstrap, topic, trigger={"available_now": True}, table={"identifier": table})
    raw["kafka"]["max_offsets_per_trigger"] = 300  # batches over several token lifetimes
    raw["catalog"] = {"type": "rest", "uri": proxy.uri, "warehouse": warehouse, "ca_file": str(ca_file),
                      "credential_file": str(credential_file)}
    raw["log_format"] = "json"
    path = home / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
