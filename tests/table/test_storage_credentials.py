"""Vended storage credentials: read from a load answer, chosen by prefix, carried to Spark tasks (pure)."""

from __future__ import annotations

import pickle

import pytest

from table.io import FileIO, _s3_settings
from table.object_store import S3Settings
from table.storage_credentials import (
    NO_CREDENTIALS,
    RefreshingCredentials,
    S3Credential,
    StorageCredentials,
    vended_credentials,
)

TABLE = "s3://bucket/wh/db/events"
PREFIXES = (f"{TABLE}/", f"{TABLE}.floe-key-index/")
KEYS = {"s3.access-key-id": "AKIA1", "s3.secret-access-key": "secret1", "s3.session-token": "token1",
        "s3.session-token-expires-at-ms": "1893456000000"}


def test_storage_credentials_come_first_and_config_counts_only_without_them() -> None:
    table_keys = {**KEYS, "s3.access-key-id": "TABLE"}
    found = vended_credentials(PREFIXES, table_keys, [
        {"prefix": f"{TABLE}/data", "config": KEYS},
        {"prefix": "gs://other", "config": {"gcs.oauth2.token": "x"}},  # not S3: skipped
        "not an entry", {"prefix": "s3://x", "config": "not a map"},  # malformed: skipped
    ])
    assert [(c.prefix, c.access_key_id) for c in found] == [(f"{TABLE}/data", "AKIA1")]
    assert found[0].session_token == "token1" and found[0].expires_at_ms == 1893456000000
    found = vended_credentials(PREFIXES, table_keys, [{"prefix": "gs://other", "config": {"gcs.oauth2.token": "x"}}])
    assert [(c.prefix, c.access_key_id) for c in found] == [(p, "TABLE") for p in PREFIXES]
    assert vended_credentials(PREFIXES, {"s3.access-key-id": "only-half"}, None) == []
    assert vended_credentials(PREFIXES, None, "not a list") == []


def test_the_longest_covering_prefix_wins_and_s3a_is_s3() -> None:
    credentials = StorageCredentials((S3Credential("s3://bucket/wh/", "WH", "s"),
                                      *(S3Credential(p, "TABLE", "s") for p in PREFIXES)))
    assert credentials.for_location("s3a://bucket/wh/db/events/data/a.parquet").access_key_id == "TABLE"
    assert credentials.for_location(f"{TABLE}.floe-key-index/segments/1.parquet").access_key_id == "TABLE"
    assert credentials.for_location("s3://bucket/wh/db/events_v2/metadata/v1.json").access_key_id == "WH"
    assert credentials.for_location("s3://bucket/wh2/x") is None  # not under any prefix
    assert credentials.for_location("gs://bucket/wh/db/events/x") is None
    assert not NO_CREDENTIALS and NO_CREDENTIALS.for_location(f"{TABLE}/x") is None


def test_a_credential_about_to_expire_is_refreshed_through_its_table_load_once_in_a_while() -> None:
    now_ms = [0]
    loads = []

    def reload() -> StorageCredentials:  # what the REST catalog's reload does: load the table again
        loads.append(1)
        return StorageCredentials((S3Credential(f"{TABLE}/", f"K{len(loads)}", "s", expires_at_ms=now_ms[0] + 3_600_000),))

    first = StorageCredentials((S3Credential(f"{TABLE}/", "K0", "s", expires_at_ms=3_600_000),))
    credentials = RefreshingCredentials(first, reload, clock_ms=lambda: now_ms[0])
    assert credentials.for_location(f"{TABLE}/a").access_key_id == "K0" and loads == []
    now_ms[0] = 3_600_000 - 5 * 60 * 1000  # five minutes left
    assert credentials.for_location(f"{TABLE}/a").access_key_id == "K1" and len(loads) == 1
    now_ms[0] += 3_600_000  # due again, but refreshed less than 30 s ago (monotonic): kept
    assert credentials.for_location(f"{TABLE}/a").access_key_id == "K1" and len(loads) == 1
    assert credentials.current().credentials[0].access_key_id == "K1"


def test_a_failed_refresh_keeps_the_old_keys(caplog) -> None:
    def reload() -> StorageCredentials:
        raise OSError("catalog down")

    first = StorageCredentials((S3Credential(f"{TABLE}/", "K0", "s", expires_at_ms=60_000),))
    credentials = RefreshingCredentials(first, reload, clock_ms=lambda: 0)
    assert credentials.for_location(f"{TABLE}/a").access_key_id == "K0"
    assert "could not refresh the vended storage credentials" in caplog.text


def test_file_io_reaches_s3_with_the_vended_keys_for_its_location() -> None:
    assert _s3_settings(f"{TABLE}/data/a.parquet", NO_CREDENTIALS).access_key is None
    vended = StorageCredentials(tuple(vended_credentials(PREFIXES, KEYS, None)))
    settings = _s3_settings(f"{TABLE}/data/a.parquet", vended)
    options = settings.pyarrow_options()
    assert (options["access_key"], options["secret_key"], options["session_token"]) == ("AKIA1", "secret1", "token1")
    assert _s3_settings("s3://bucket/elsewhere/x", vended).access_key is None
    assert "secret1" not in repr(settings) and "token1" not in repr(settings)
    assert "secret1" not in repr(vended) and "token1" not in repr(vended)


def test_a_tables_file_io_travels_to_a_task_with_its_credentials_and_without_its_reload() -> None:
    """What Spark ships to a worker: the table's FileIO, its keys as they are now, no catalog."""
    vended = StorageCredentials(tuple(vended_credentials(PREFIXES, KEYS, None)))
    io = FileIO.for_location(f"{TABLE}/metadata/v1.json", RefreshingCredentials(vended, _no_reload))
    shipped = pickle.loads(pickle.dumps(io))
    assert shipped.credentials == vended
    assert shipped.credentials.for_location(f"{TABLE}/data/a.parquet").access_key_id == "AKIA1"
    other = FileIO.for_location("s3://bucket/wh/db/other/metadata/v1.json")
    assert pickle.loads(pickle.dumps(other)).credentials == NO_CREDENTIALS  # another table's keys never travel
    local = pickle.loads(pickle.dumps(FileIO.for_location("/tmp/x")))
    assert local.is_local


def _no_reload() -> StorageCredentials:
    raise AssertionError("a task never reloads")


def test_plain_settings_have_no_keys() -> None:
    assert "access_key" not in S3Settings().pyarrow_options()


def test_a_tables_own_keys_cover_its_location_its_key_index_and_paths_set_elsewhere() -> None:
    from table.locations import table_file_prefixes
    from table.metadata import new_table_metadata
    from table.partitioning import UNPARTITIONED_SPEC
    from table.schema import Schema
    from table.sort_order import UNSORTED_SORT_ORDER

    metadata = new_table_metadata(Schema(), UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, TABLE + "/",
                                  {"write.data.path": "s3://other/data"})
    assert table_file_prefixes(metadata) == (*PREFIXES, "s3://other/data/")
