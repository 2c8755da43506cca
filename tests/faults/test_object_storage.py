"""Object storage fails under a running ``floe ingest`` (issue 34, case 5).

S3Proxy of the test's own holds the warehouse (the catalog is a SQLite file);
two upsert tables in one shared query, records paced in throughout, then:

1. **Writes refused for 60 s**: S3Proxy answers reads and refuses every
   write (its read-only store). Both tables are held, ingest stays up, and
   both land again by themselves once writes are taken.
2. **Killed mid-upload, back after 30 s**: uploads are slowed, large records
   make a data file larger than the multipart part size (10 MiB), and S3Proxy
   is SIGKILLed while that file's multipart upload is in flight. It starts
   again 30 s later on the same objects; both tables land again by themselves.

At the end every table holds exactly what its records imply, in Floe and
Iceberg Java (S3FileIO), and every offset is committed once.
"""

from __future__ import annotations

import base64
import json
import os
import random
import time
from pathlib import Path

import pytest

from tests.commit.test_catalog_oracles import use_jdbc_catalog
from tests.faults.rig import FaultRig
from tests.ingest.e2e_support import Event, row_value
from tests.support.s3proxy import S3Proxy, s3_file_io_properties

REFUSED_S = 60.0
KILLED_S = 30.0
READ_ONLY = {"s3proxy.read-only-blobstore": "true"}
SLOW_UPLOADS = {"s3proxy.latency-blobstore": "true", "s3proxy.latency-blobstore.upload-part.speed": "2000"}  # KB/s
BIG_RECORDS, BIG_VALUE = 2_000, 16_000  # a batch of 1,000 of them: a data file over the 10 MiB part size


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.oracle
def test_refused_writes_and_a_kill_mid_upload_lose_and_repeat_nothing(kafka_bootstrap, iceberg_oracle, tmp_path):
    with S3Proxy(tmp_path / "s3") as s3:
        bucket = s3.create_bucket("faults")
        catalog_uri = f"sqlite:///{tmp_path / 'catalog.db'}"
        catalog = {"uri": catalog_uri, "warehouse": f"{bucket}/wh", "name": "faults_s3"}
        env = {**os.environ, **s3.environment()}
        # Unpartitioned: the big records of a batch go to one data file.
        with FaultRig(tmp_path, kafka_bootstrap, catalog, table={"partition_spec": []}, env=env) as rig:
            rig.wait_for("both tables committing", lambda: all(rig.commits(t) for t in rig.tables), 300)
            writes_refused(rig, s3)
            killed_mid_upload(rig, s3)
            use_jdbc_catalog(iceberg_oracle, "faults_s3", catalog_uri, tmp_path / "warehouse",
                             **s3_file_io_properties(s3), **{"cache-enabled": "false"})
            saved = {name: os.environ.get(name) for name in s3.environment()}
            os.environ.update(s3.environment())  # Floe's reader in this process reaches the test's S3Proxy
            try:
                rig.finish(lambda loaded: iceberg_oracle.sql(f"SELECT * FROM faults_s3.{loaded_name(loaded)}"))
            finally:
                for name, value in saved.items():
                    os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def loaded_name(loaded) -> str:
    """db.tN, from the table's location (``.../wh/db/tN``)."""
    return ".".join(loaded.metadata.location.rstrip("/").split("/")[-2:])


def writes_refused(rig: FaultRig, s3: S3Proxy) -> None:
    """Every write refused for REFUSED_S: both tables held, both land again by themselves after."""
    s3.restart(READ_ONLY)
    began = time.time()
    for table in rig.tables:
        rig.wait_for(f"{table} held", lambda t=table: rig.metric("floe_ingest_table_held", t) == 1, REFUSED_S)
    time.sleep(max(0.0, REFUSED_S - (time.time() - began)))
    s3.restart(SLOW_UPLOADS)
    back = time.time()
    recovery = {t: rig.wait_for(f"{t} landing again", lambda t=t: rig.committed_since(t, back)) for t in rig.tables}
    no_longer_held(rig)
    floe = [line for line in rig.lines_between(began, time.time()) if line.startswith("batch ")]
    assert 2 <= len(floe) <= 14, f"a line per held try of each table, not per attempt: {floe}"
    assert all(rig.metric("floe_ingest_table_failures_total", t, cause="storage") for t in rig.tables), \
        "each table's failures counted as storage's"
    alert = rig.alerted("FloeIngestTableHeld", rig.tables, began)
    print(f"FIGURES S3 writes refused {REFUSED_S:.0f}s: landed again {recovery} s after; {len(floe)} Floe line(s); "
          f"FloeIngestTableHeld pending {alert:.0f}s")


def killed_mid_upload(rig: FaultRig, s3: S3Proxy) -> None:
    """S3Proxy SIGKILLed while a data file over the part size is being uploaded; started again KILLED_S later."""
    uploads = s3.work_dir / "blobs" / "faults"
    rig.produce("db.t0", big_records())
    rig.wait_for("a multipart upload in flight", lambda: in_flight(uploads), 180)
    began = time.time()
    s3.kill()
    time.sleep(KILLED_S)
    s3.restart()
    back = time.time()
    recovery = {t: rig.wait_for(f"{t} landing again", lambda t=t: rig.committed_since(t, back)) for t in rig.tables}
    no_longer_held(rig)
    floe = [line for line in rig.lines_between(began, time.time()) if line.startswith("batch ")]
    assert 1 <= len(floe) <= 14, f"a line per held try of each table, not per attempt: {floe}"
    alert = rig.alerted("FloeIngestTableHeld", ["db.t0"], began)
    print(f"FIGURES S3 killed mid-upload, back after {KILLED_S:.0f}s: landed again {recovery} s after; "
          f"{len(floe)} Floe line(s); FloeIngestTableHeld pending {alert:.0f}s")


def no_longer_held(rig: FaultRig) -> None:
    for table in rig.tables:
        rig.wait_for(f"{table} no longer held", lambda t=table: rig.metric("floe_ingest_table_held", t) == 0, 60)


def in_flight(bucket_dir: Path) -> bool:
    """A data file's first part is being uploaded: the file has reached the 10 MiB part size, and more of
    it follows. (S3Proxy keeps an open multipart upload's parts under ``.mpus-<upload id>-<key>-<part>``.)"""
    return any(bucket_dir.glob(".mpus-*/db/t0/data/*.parquet-1-*"))


def big_records() -> list[Event]:
    """Inserts of keys the paced records never touch (so each is a row of the batch that reads it), with
    names of BIG_VALUE random characters: they do not compress, and a batch of them is a file over 10 MiB."""
    rng = random.Random(34)
    events = []
    for i in range(BIG_RECORDS):
        key = 1_000_000 + i
        value = row_value(key, key, "c")
        value["name"] = base64.b64encode(rng.randbytes(BIG_VALUE * 3 // 4)).decode()
        events.append(Event(json.dumps(key).encode(), json.dumps(value).encode()))
    return events
