"""``catalog.type: rest``: validation, the headers Floe sends, OAuth2 client credentials, and the
``floe table`` and ``floe check`` commands against Iceberg's own REST server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from service.cli import EXIT_OK, main
from service.config import load_config
from service.jobs import catalog_spec
from tests.commit.producer_support import CommitTable
from tests.service.test_config import minimal, problems_of, write


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
    assert problems_of(sql, tmp_path) == ["catalog.token: only used with type: rest"]


def test_a_token_and_extra_headers_are_sent_and_masked(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    config = load_config(write(tmp_path, rest(token_file=str(token), headers={"X-Tenant": "a"}, prefix="main")), {})
    spec = catalog_spec(config)
    assert dict(spec.headers) == {"X-Tenant": "a", "Authorization": "Bearer s3cr3t-token"}
    assert spec.uri == "http://127.0.0.1:8181" and spec.prefix == "main"


def test_client_credentials_are_exchanged_for_a_token(tmp_path: Path, rest_catalog_server) -> None:
    config = load_config(write(tmp_path, rest(uri=rest_catalog_server.uri, credential="floe:secret")), {})
    authorization = dict(catalog_spec(config).headers)["Authorization"]
    assert authorization.startswith("Bearer ") and len(authorization) > len("Bearer ")


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
