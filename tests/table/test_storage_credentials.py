"""Vended storage credentials: read from a load answer, chosen by prefix, carried to Spark tasks (pure)."""

from __future__ import annotations

import pickle

import pytest

from table.io import _s3_settings
from table.object_store import S3Settings
from table.storage_credentials import VENDED, CredentialStore, S3Credential, vended_credentials

TABLE = "s3://bucket/wh/db/events"
KEYS = {"s3.access-key-id": "AKIA1", "s3.secret-access-key": "secret1", "s3.session-token": "token1",
        "s3.session-token-expires-at-ms": "1893456000000"}


@pytest.fixture(autouse=True)
def empty_store():
    VENDED.forget_all()
    yield
    VENDED.forget_all()


def test_a_load_answer_vends_per_prefix_and_for_the_whole_table() -> None:
    found = vended_credentials(TABLE, {**KEYS, "s3.access-key-id": "TABLE"}, [
        {"prefix": f"{TABLE}/data", "config": KEYS},
        {"prefix": "gs://other", "config": {"gcs.oauth2.token": "x"}},  # not S3: skipped
    ])
    assert [(c.prefix, c.access_key_id) for c in found] == [(f"{TABLE}/data", "AKIA1"), (TABLE, "TABLE")]
    assert found[0].session_token == "token1" and found[0].expires_at_ms == 1893456000000
    assert vended_credentials(TABLE, {"s3.access-key-id": "only-half"}, None) == []
    assert vended_credentials(TABLE, None, None) == []


def test_the_longest_covering_prefix_wins_and_s3a_is_s3() -> None:
    store = CredentialStore()
    store.remember([S3Credential("s3://bucket/wh/", "WH", "s"), S3Credential(TABLE, "TABLE", "s")])
    assert store.for_location("s3a://bucket/wh/db/events/data/a.parquet").access_key_id == "TABLE"
    assert store.for_location(f"{TABLE}.floe-key-index/segments/1.parquet").access_key_id == "TABLE"
    assert store.for_location("s3://bucket/wh/db/other/metadata/v1.json").access_key_id == "WH"
    assert store.for_location("s3://bucket/wh2/x") is None  # not under any prefix
    assert store.for_location("gs://bucket/wh/db/events/x") is None
    store.remember([S3Credential(TABLE, "NEWER", "s")])
    assert store.for_location(f"{TABLE}/data/a.parquet").access_key_id == "NEWER"


def test_file_io_reaches_s3_with_the_vended_keys_for_its_location() -> None:
    assert _s3_settings(f"{TABLE}/data/a.parquet").access_key is None
    VENDED.remember(vended_credentials(TABLE, KEYS, None))
    settings = _s3_settings(f"{TABLE}/data/a.parquet")
    options = settings.pyarrow_options()
    assert (options["access_key"], options["secret_key"], options["session_token"]) == ("AKIA1", "secret1", "token1")
    assert _s3_settings("s3://bucket/elsewhere/x").access_key is None
    assert "secret1" not in repr(settings) and "token1" not in repr(settings)
    assert "secret1" not in repr(VENDED.snapshot())


def test_a_task_carries_the_credentials_to_the_process_that_runs_it() -> None:
    assert VENDED.carried(len) is len  # nothing vended: the task is unchanged
    VENDED.remember(vended_credentials(TABLE, KEYS, None))
    shipped = pickle.dumps(VENDED.carried(_probe))  # what Spark sends to a worker
    VENDED.forget_all()  # the worker's process starts with none
    assert pickle.loads(shipped)(f"{TABLE}/data/a.parquet") == "AKIA1"


def _probe(location: str) -> str:
    credential = VENDED.for_location(location)
    return credential.access_key_id if credential else ""


def test_plain_settings_have_no_keys() -> None:
    assert "access_key" not in S3Settings().pyarrow_options()
