"""ingest.tasks.routing: tables sharing a topic each take their records by a field; what none takes is
dead-lettered once, by the topic's owner."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.job import decode_spec_from_json, decode_spec_to_json
from ingest.tasks.decode_records import DecodeSpec, decode_records
from ingest.tasks.record_errors import DecodeError, RecordError
from ingest.tasks.routing import RouteError, RouteSpec, TopicRoute, route_records, route_value
from service.config.tables import TableConfig
from service.jobs import route_specs
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.ingest.test_decode_records import kafka_batch

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "kind", StringType()))
ROUTES = {"orders": ("order",), "payments": ("pay", "refund"), "audits": ("5", "true")}
"""Three tables sharing the topic ``orders`` (kafka_batch's topic); ``orders`` comes first, so it owns
what no route takes."""


def table_config(name: str, values: tuple[str, ...], topics: tuple[str, ...] = ("orders",)) -> TableConfig:
    return TableConfig.model_validate({
        "identifier": f"db.{name}", "topics": list(topics), "bad_records": "dead-letter",
        "dead_letter_topic": f"dlq-{name}", "route": {"field": "kind", "values": list(values)},
        "schema": [{"name": "id", "type": "long", "required": True}, {"name": "kind", "type": "string"}],
    })


def specs() -> dict[str, DecodeSpec]:
    routes = route_specs([table_config(name, values) for name, values in ROUTES.items()])
    return {name: DecodeSpec(SCHEMA, route=routes[i]) for i, name in enumerate(ROUTES)}


def test_route_specs_name_the_siblings_values_and_the_owner() -> None:
    configs = [table_config("orders", ("order",), ("orders", "misc")), table_config("payments", ("pay",)),
               table_config("misc", ("x",), ("misc",))]
    routes = route_specs(configs)
    assert routes[0] == RouteSpec("kind", frozenset({"order"}), (
        TopicRoute("orders", frozenset({"pay"}), owns_unrouted=True),
        TopicRoute("misc", frozenset({"x"}), owns_unrouted=True)))
    assert routes[1].topics == (TopicRoute("orders", frozenset({"order"}), owns_unrouted=False),)
    assert routes[2].topics == (TopicRoute("misc", frozenset({"order"}), owns_unrouted=False),)


def test_route_values_are_strings_integers_and_booleans_as_json_text() -> None:
    assert [route_value({"kind": v}, "kind") for v in ("a", 5, True, False, 1.5, None, [1])] == [
        "a", "5", "true", "false", None, None, None]
    assert route_value({"meta": {"kind": "a"}}, "meta.kind") == "a"
    assert route_value({"meta": "a"}, "meta.kind") is None
    assert route_value(None, "kind") is None


def test_the_owner_keeps_what_no_route_takes_with_the_reason_and_the_others_drop_it() -> None:
    records: list[Any] = [{"kind": "order"}, {"kind": "pay"}, {"kind": "other"}, {"id": 1}, None, "text", None]
    failures: dict[int, RecordError] = {6: DecodeError("not JSON")}
    owner = RouteSpec("kind", frozenset({"order"}), (TopicRoute("t", frozenset({"pay"}), True),))
    assert route_records(["t"] * 7, records, owner, failures) == [0, 2, 3, 4, 5, 6]
    assert {i: str(e) for i, e in failures.items()} == {
        2: "field 'kind': value 'other' is routed to no table",
        3: "field 'kind': the record has no value to route by (a string, integer or boolean)",
        4: "field 'kind': a tombstone has no field to route by",
        5: "field 'kind': the record has no value to route by (a string, integer or boolean)",
        6: "not JSON",
    }
    failures = {6: DecodeError("not JSON")}
    sibling = RouteSpec("kind", frozenset({"pay"}), (TopicRoute("t", frozenset({"order"}), False),))
    assert route_records(["t"] * 7, records, sibling, failures) == [1]
    assert failures == {}


def test_a_topic_without_a_route_is_taken_whole() -> None:
    spec = RouteSpec("kind", frozenset({"a"}), (TopicRoute("routed", frozenset(), True),))
    assert route_records(["plain", "routed", "plain"], [{"kind": "b"}, {"kind": "a"}, None], spec, {}) == [0, 1, 2]


def test_a_decode_spec_with_a_route_survives_the_job_file() -> None:
    spec = specs()["payments"]
    assert decode_spec_from_json(json.loads(json.dumps(decode_spec_to_json(spec)))) == spec


def payload(kind: Any, i: int) -> bytes | None:
    if kind == "tombstone":
        return None
    if kind == "garbage":
        return b"{not json"
    return json.dumps({"id": i, "kind": kind} if kind != "missing" else {"id": i}).encode()


KINDS = st.sampled_from(["order", "pay", "refund", 5, True, False, "other", "missing", "tombstone", "garbage"])


@settings(max_examples=60, deadline=None)
@given(st.lists(KINDS, max_size=40))
def test_every_record_lands_in_exactly_one_table_or_the_owners_dead_letters(kinds: list[Any]) -> None:
    batch = kafka_batch([payload(kind, i) for i, kind in enumerate(kinds)])
    outs = {name: decode_records(batch, spec) for name, spec in specs().items()}
    seen: list[int] = []
    for name, out in outs.items():
        assert out.rows.num_rows + out.dead_letters.num_rows + out.routed_away == batch.num_rows
        assert set(out.rows.column("kind").to_pylist()) <= set(ROUTES[name])
        seen += out.rows.column("_floe_offset").to_pylist() + out.dead_letters.column("source_offset").to_pylist()
    assert sorted(seen) == batch.column("offset").to_pylist()
    assert outs["payments"].dead_letters.num_rows == 0
    audits = outs["audits"].dead_letters.to_pylist()  # its own bad records: its kind column is a string
    assert [d["source_offset"] for d in audits] == [100 + i for i, kind in enumerate(kinds) if kind in (5, True)]
    assert {d["error_class"] for d in audits} <= {"FieldError"}
    unrouted = outs["orders"].dead_letters.to_pylist()
    assert [d["source_offset"] for d in unrouted] == [
        100 + i for i, kind in enumerate(kinds) if kind in ("other", "missing", "tombstone", "garbage", False)
    ]
    assert {d["error_class"] for d in unrouted} <= {RouteError.__name__, DecodeError.__name__}
