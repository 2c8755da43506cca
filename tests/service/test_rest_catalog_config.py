"""``catalog.type: rest``: validation, the headers Floe sends, OAuth2 client credentials, and the
``floe table`` and ``floe check`` commands against Iceberg's own REST server."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any, Optional

from commit.catalog.rest.auth import ClientCredentials, OAuthTokens, Token, client_credentials_token
from commit.catalog.rest.catalog import RestCatalog
from commit.catalog.rest.client import RestClient
from ingest.job import CatalogSpec
from service.cli import EXIT_OK, main
from service.config import load_config
from service.jobs import catalog_spec
from tests.commit.producer_support import CommitTable
from tests.service.test_config import minimal, problems_of, write
from tests.support.dropping_proxy import DroppingProxy


def rest(**catalog: Any) -> dict[str, Any]:
    data = minimal()
    data["catalog"] = {"type": "rest", "uri": "http://127.0.0.1:8181", "warehouse": "/tmp/floe-test/wh", **catalog}
    return data


def test_rest_settings_are_checked_and_named(tmp_path: Path) -> None:
    assert sorted(problems_of(rest(uri="grpc://catalog:8181", password="p", token="t", credential="no-colon"),
                              tmp_path)) == sorted([
        "catalog.uri: expected http(s)://host:port for a REST catalog, got 'grpc://catalog:8181'",
        "catalog.password: only used with a postgresql:// catalog uri; a REST catalog takes token or credential",
        "catalog.token: set token or credential, not both",
        "catalog.credential: expected client_id:client_secret",
    ])
    sql = minimal()
    sql["catalog"]["token"] = "t"
    sql["catalog"]["access_delegation"] = "vended-credentials"
    sql["catalog"]["request_timeout"] = "5s"
    assert sorted(problems_of(sql, tmp_path)) == ["catalog.access_delegation: only used with type: rest",
                                                  "catalog.request_timeout: only used with type: rest",
                                                  "catalog.token: only used with type: rest"]
    [timeout] = problems_of(rest(request_timeout="0s"), tmp_path)
    assert timeout.startswith("catalog.request_timeout: ") and "'0s'" in timeout, timeout
    [signing] = problems_of(rest(access_delegation="remote-signing"), tmp_path)
    assert signing.startswith("catalog.access_delegation: ") and "vended-credentials" in signing, signing


def test_a_token_and_extra_headers_are_sent_and_masked(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    config = load_config(write(tmp_path, rest(token_file=str(token), headers={"X-Tenant": "a"}, prefix="main",
                                              request_timeout="5s")), {})
    spec = catalog_spec(config)
    assert dict(spec.headers) == {"X-Tenant": "a", "Authorization": "Bearer s3cr3t-token"}
    assert spec.uri == "http://127.0.0.1:8181" and spec.prefix == "main" and spec.request_timeout_seconds == 5


def test_a_ca_file_reaches_the_job_and_is_only_for_rest(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("a CA")
    spec = catalog_spec(load_config(write(tmp_path, rest(uri="https://catalog:8181", ca_file="ca.crt")), {}))
    assert spec.ca_file == str(tmp_path / "ca.crt")
    assert CatalogSpec(**dataclasses.asdict(spec)) == spec
    sql = minimal()
    sql["catalog"]["ca_file"] = str(tmp_path / "ca.crt")
    assert problems_of(sql, tmp_path) == ["catalog.ca_file: only used with type: rest"]


def test_client_credentials_tokens_are_fetched_by_the_client_and_replaced_after_a_401(tmp_path: Path,
                                                                                     rest_catalog_server) -> None:
    refuse_next = [False]

    def rule(method: str, path: str) -> Optional[str]:
        if refuse_next[0] and "/oauth/" not in path:
            refuse_next[0] = False
            return "401"
        return None

    with DroppingProxy(rest_catalog_server.uri, rule) as proxy:
        spec = catalog_spec(load_config(write(tmp_path, rest(uri=proxy.uri, credential="floe:secret")), {}))
        assert "Authorization" not in dict(spec.headers)  # not exchanged once at start-up: the client does it
        namespace = f"ns_{uuid.uuid4().hex[:8]}"
        with spec.open() as catalog:
            catalog.create_namespace(namespace)
            refuse_next[0] = True
            assert catalog.namespace_exists(namespace)  # refused once, then sent again with a new token
    token_requests = [seen for seen in proxy.seen if seen[1] == "/v1/oauth/tokens"]
    catalog_requests = [seen for seen in proxy.seen if seen[1] != "/v1/oauth/tokens"]
    assert len(token_requests) == 2, proxy.seen
    assert all(authorization.startswith("Bearer client-credentials-token") for _, _, authorization in catalog_requests)
    assert [path for _, path, _ in catalog_requests][-2:] == [f"/v1/namespaces/{namespace}"] * 2


def test_a_token_is_fetched_again_before_it_expires(rest_catalog_server) -> None:
    now = [0.0]

    def fetch_lasting_a_minute(credentials: ClientCredentials) -> Token:
        return dataclasses.replace(client_credentials_token(credentials), expires_in_s=60.0)

    with DroppingProxy(rest_catalog_server.uri) as proxy:
        tokens = OAuthTokens(ClientCredentials(f"{proxy.uri}/v1/oauth/tokens", "floe", "secret"),
                             clock=lambda: now[0], fetch=fetch_lasting_a_minute)
        with RestCatalog(proxy.uri, rest_catalog_server.warehouse, client=RestClient(proxy.uri, auth=tokens)) as catalog:
            catalog.list_namespaces()
            now[0] = 47.0
            catalog.list_namespaces()
            now[0] = 48.0  # a fifth of its life left
            catalog.list_namespaces()
    assert [path for _, path, _ in proxy.seen].count("/v1/oauth/tokens") == 2 == tokens.fetches


def test_floe_table_commands_and_check_through_rest(tmp_path: Path, rest_catalog_server, capsys) -> None:
    with catalog_spec(load_config(write(tmp_path, rest(uri=rest_catalog_server.uri,
                                                       warehouse=str(tmp_path / "wh"))), {})).open() as catalog:
        name = f"ns_{uuid.uuid4().hex[:8]}.t"
        table = CommitTable.create(catalog, name)  # type: ignore[arg-type]
        table.append([1, 2])
    base = ["table", "--catalog-uri", rest_catalog_server.uri, "--warehouse", str(tmp_path / "wh")]
    assert main([*base, "list"]) == EXIT_OK
    assert name in capsys.readouterr().out.split()
    assert main([*base, "scan", name]) == EXIT_OK
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    assert main([*base, "history", name]) == EXIT_OK
    assert "append" in capsys.readouterr().out
    config = rest(uri=rest_catalog_server.uri, warehouse=str(tmp_path / "wh"))
    config["kafka"]["bootstrap_servers"] = "127.0.0.1:1"  # no broker: only the catalog line matters here
    main(["check", "--config", str(write(tmp_path, config, "check.yaml"))])
    out = capsys.readouterr().out
    assert f"ok   catalog {rest_catalog_server.uri}: reachable;" in out, out
    config["catalog"]["access_delegation"] = "vended-credentials"
    main(["check", "--config", str(write(tmp_path, config, "check.yaml"))])
    out = capsys.readouterr().out
    assert f"warehouse {tmp_path / 'wh'}: not probed: the REST catalog vends storage credentials" in out, out
