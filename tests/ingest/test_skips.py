"""Skipping named records (ingest.skips): the notation, the Arrow filter, and how a batch accounts for them.

Pure: no Kafka, no Spark. The end-to-end recipe is tests/service/test_skip_records.py.
"""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest

from ingest.tasks.decode_records import DecodeSpec, decode_records
from ingest.tasks.frame import TaskStats, decoded_batches, stats_rows
from ingest.job import IngestJob, JobSpecError, SourceSpec, TableSpec, decode_spec_from_json, decode_spec_to_json
from ingest.driver.offset_accounting import batch_stats
from ingest.tasks.record_errors import BadRecordError
from ingest.skips import RecordRef, RecordRefError, format_refs, parse_record_ref, record_refs, split_skipped
from tests.ingest.test_decode_records import ORDERS, js, kafka_batch

GOOD = [js({"id": i}) for i in range(6)]


def test_a_ref_parses_from_the_notation_floes_messages_use():
    assert parse_record_ref("orders/0@50") == RecordRef("orders", 0, 50)
    assert parse_record_ref(" shop.orders-v2_x/12@0 ") == RecordRef("shop.orders-v2_x", 12, 0)
    assert str(RecordRef("orders", 3, 7)) == "orders/3@7"


@pytest.mark.parametrize("text", ["orders/0", "orders@50", "orders/-1@5", "orders/0@x", "orders/0@5@6", "/0@5",
                                  "or ders/0@5", "orders/0@", "", "orders/0@50,orders/0@51"])
def test_anything_else_is_refused_saying_what_was_expected_and_what_came(text):
    with pytest.raises(RecordRefError) as caught:
        parse_record_ref(text)
    assert str(caught.value) == f"expected TOPIC/PARTITION@OFFSET (e.g. orders/0@50), got {text!r}"


def test_refs_normalize_sorted_without_repeats_from_text_refs_or_json_triples():
    refs = record_refs(["b/0@2", RecordRef("a", 1, 9), ["b", 0, 2], ("a", "1", "3")])
    assert refs == (RecordRef("a", 1, 3), RecordRef("a", 1, 9), RecordRef("b", 0, 2))
    assert format_refs(refs) == "a/1@3,a/1@9,b/0@2"


def test_split_takes_out_exactly_the_named_records_of_their_topic_and_partition():
    batch = pa.concat_batches([kafka_batch(GOOD, partition=0, first_offset=48), kafka_batch(GOOD, partition=1, first_offset=48)])
    skip = record_refs(["orders/0@50", "orders/1@53", "orders/0@99", "other/0@49"])
    kept, taken = split_skipped(batch, skip)
    assert taken == (RecordRef("orders", 0, 50), RecordRef("orders", 1, 53))
    assert list(zip(kept.column("partition").to_pylist(), kept.column("offset").to_pylist())) == [
        (0, 48), (0, 49), (0, 51), (0, 52), (0, 53), (1, 48), (1, 49), (1, 50), (1, 51), (1, 52)]


def test_an_empty_skip_list_or_no_hit_returns_the_batch_itself():
    batch = kafka_batch(GOOD)
    assert split_skipped(batch, ()) == (batch, ())
    for skip in (["orders/4@99", "orders/4@106"], ["orders/5@101", "other/4@101"]):  # outside its range; no hit
        kept, taken = split_skipped(batch, record_refs(skip))
        assert kept is batch and taken == (), skip


def test_a_skipped_poison_record_is_neither_row_nor_dead_letter_and_the_rest_decodes():
    batch = kafka_batch([GOOD[0], GOOD[1], b"{not json", GOOD[2]], partition=0, first_offset=49)
    without = decode_records(batch, DecodeSpec(ORDERS))
    assert without.dead_letters.column("source_offset").to_pylist() == [51]
    out = decode_records(batch, DecodeSpec(ORDERS, skip_records=("orders/0@51",)))
    assert out.rows.column("_floe_offset").to_pylist() == [49, 50, 52]
    assert out.dead_letters.num_rows == 0 and out.skipped == (RecordRef("orders", 0, 51),)


def test_a_named_record_is_skipped_whatever_it_holds():
    out = decode_records(kafka_batch(GOOD[:3], first_offset=0), DecodeSpec(ORDERS, skip_records=("orders/4@1",)))
    assert out.rows.column("id").to_pylist() == [0, 2] and out.skipped == (RecordRef("orders", 4, 1),)


def test_the_fail_policy_passes_a_skipped_record_and_the_task_reports_it_for_the_commit():
    batch = kafka_batch([GOOD[0], b"{not json", GOOD[1]], partition=0, first_offset=49)
    stats = TaskStats()
    with pytest.raises(BadRecordError, match="bad record at orders/0@50"):
        list(decoded_batches(iter([batch]), DecodeSpec(ORDERS), stats, "db.t"))
    stats = TaskStats()
    decode = DecodeSpec(ORDERS, skip_records=("orders/0@50",))
    rows = [rows for _, rows in decoded_batches(iter([batch]), decode, stats, "db.t")]
    assert [r.column("_floe_offset").to_pylist() for r in rows] == [[49, 51]]
    folded = batch_stats(stats_rows([stats.payload()]))
    assert folded.offsets == {"orders": {0: (49, 52)}}, "the skipped record's offset is covered"
    assert (folded.records, folded.rows, folded.bad_records) == (3, 2, 0)
    assert folded.skipped == (("orders", 0, 50),)


def test_a_batch_of_only_skipped_records_still_covers_their_offsets():
    stats = TaskStats()
    decode = DecodeSpec(ORDERS, skip_records=("orders/0@7",))
    list(decoded_batches(iter([kafka_batch([b"{", ], partition=0, first_offset=7)]), decode, stats, "db.t"))
    folded = batch_stats(stats_rows([stats.payload()]))
    assert not folded.empty and folded.offsets == {"orders": {0: (7, 8)}} and folded.rows == 0


def test_the_skip_list_travels_with_the_decode_spec_through_json_and_pickle():
    spec = DecodeSpec(ORDERS, skip_records=("orders/0@50", "orders/2@1"))
    again = decode_spec_from_json(json.loads(json.dumps(decode_spec_to_json(spec))))
    assert again == spec and pickle.loads(pickle.dumps(spec)) == spec
    assert decode_spec_to_json(spec)["skip_records"] == ["orders/0@50", "orders/2@1"]
    with pytest.raises(ValueError, match=r"skip_records: expected TOPIC/PARTITION@OFFSET .* got 'orders:0:50'"):
        DecodeSpec(ORDERS, skip_records=("orders:0:50",))


def test_a_job_refuses_to_skip_a_record_of_a_topic_it_does_not_read():
    table = TableSpec("db.t", DecodeSpec(ORDERS, skip_records=("payments/0@5",)))
    with pytest.raises(JobSpecError) as caught:
        IngestJob(SourceSpec("k:9092", topics=("orders",)), table, None, "/tmp/cp")  # type: ignore[arg-type]
    assert str(caught.value) == ("table.decode.skip_records: 'payments/0@5' names topic 'payments', "
                                 "which the source does not read")
    by_pattern = IngestJob(SourceSpec("k:9092", topic_pattern="pay.*"), table, None, "/tmp/cp")  # type: ignore[arg-type]
    assert by_pattern.table.decode.skip_records == (RecordRef("payments", 0, 5),)
