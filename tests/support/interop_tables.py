"""A corpus of tables written by ``table/``, each with its expected rows.

The expected rows are computed here in plain Python, independently of
Floe's reader, by replaying appends and deletes on lists of dicts. The
interop tests read the same tables with Floe, pyiceberg and Iceberg Java.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from table.manifest import DataFile
from table.schema import Schema
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from tests.support.table_builder import HandWrittenTable

EPOCH = dt.datetime(1970, 1, 1)
UTC = dt.timezone.utc


@dataclass
class Scenario:
    """A written table and the rows a correct reader returns for it."""

    name: str
    table: HandWrittenTable
    expected: list[dict[str, Any]]
    has_equality_deletes: bool = False
    has_time_column: bool = False


def _micros(ts: dt.datetime) -> int:
    base = dt.datetime(1970, 1, 1, tzinfo=ts.tzinfo)
    return (ts - base) // dt.timedelta(microseconds=1)


def all_types_schema(with_time: bool = True) -> Schema:
    """Every v2 primitive plus struct, list and map. Spark cannot load a table
    with a ``time`` column at all, so the Java oracle gets a variant without it."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "flag", BooleanType()),
        NestedField(3, "small", IntegerType()),
        NestedField(4, "ratio", FloatType()),
        NestedField(5, "amount", DoubleType()),
        NestedField(6, "price", DecimalType(12, 3)),
        NestedField(7, "day", DateType()),
        NestedField(8, "at_time", TimeType()),
        NestedField(9, "local_ts", TimestampType()),
        NestedField(10, "event_ts", TimestamptzType()),
        NestedField(11, "name", StringType()),
        NestedField(12, "uid", UUIDType()),
        NestedField(13, "code", FixedType(4)),
        NestedField(14, "blob", BinaryType()),
        NestedField(
            15,
            "address",
            StructType(NestedField(16, "city", StringType()), NestedField(17, "zip", IntegerType())),
        ),
        NestedField(18, "tags", ListType(19, StringType(), element_required=False)),
        NestedField(20, "attrs", MapType(21, StringType(), 22, LongType(), value_required=False)),
    )
    return schema if with_time else Schema(*[f for f in schema.fields if f.name != "at_time"])


def all_types_rows(ids: range, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for i in ids:
        maybe = (lambda v: None) if i % 11 == 5 else (lambda v: v)
        rows.append(
            {
                "id": i,
                "flag": maybe(i % 3 == 0),
                "small": maybe(rng.randint(-(2**31), 2**31 - 1)),
                "ratio": maybe(float(rng.randint(-1000, 1000)) / 8),
                "amount": maybe(rng.uniform(-1e6, 1e6)),
                "price": maybe(decimal.Decimal(rng.randint(-10**11, 10**11)).scaleb(-3)),
                "day": maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))),
                "at_time": maybe(dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), rng.randint(0, 999999))),
                "local_ts": maybe(EPOCH + dt.timedelta(microseconds=rng.randint(0, 2_000_000_000_000_000))),
                "event_ts": maybe(dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=rng.randint(0, 90 * 86400))),
                "name": maybe(rng.choice(["alpha", "beta", "gamma", "δέλτα", "e" * 40, ""]) + str(i % 7)),
                "uid": maybe(uuid.UUID(int=rng.getrandbits(128))),
                "code": maybe(rng.getrandbits(32).to_bytes(4, "big")),
                "blob": maybe(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 30)))),
                "address": maybe({"city": rng.choice(["Oslo", "Lima", None]), "zip": rng.randint(1000, 9999)}),
                "tags": maybe([rng.choice(["a", "b", None]) for _ in range(rng.randint(0, 3))]),
                "attrs": maybe([(f"k{j}", rng.choice([j, None])) for j in range(rng.randint(0, 3))]),
            }
        )
    return rows


def to_arrow(schema: Schema, rows: list[dict[str, Any]]) -> pa.Table:
    from table.arrow_schema import schema_to_arrow

    arrow_schema = schema_to_arrow(schema)
    columns = {}
    for field in arrow_schema:
        values = [r.get(field.name) for r in rows]
        if field.type == pa.uuid():
            columns[field.name] = pa.array([v.bytes if v else None for v in values], pa.binary(16)).cast(pa.uuid())
        else:
            columns[field.name] = pa.array(values, field.type)
    return pa.table(columns, schema=arrow_schema)


def position_of(table: HandWrittenTable, data_file: DataFile) -> list[dict[str, Any]]:
    """The rows of one data file in file order (to pick positions to delete)."""
    import pyarrow.parquet as pq

    with table.io.open_input(data_file.file_path) as f:
        return pq.ParquetFile(f).read().to_pylist()


# -- scenarios ----------------------------------------------------------------------


def append_only(root: Path, with_time: bool = True) -> Scenario:
    rng = random.Random(1)
    name = "append_only" if with_time else "append_only_without_time"
    t = HandWrittenTable.create(str(root / name), all_types_schema(with_time))
    expected = []
    for batch in (range(0, 300), range(300, 500)):
        rows = all_types_rows(batch, rng)
        if not with_time:
            rows = [{k: v for k, v in r.items() if k != "at_time"} for r in rows]
        t.commit(t.write_data(to_arrow(t.metadata.schema(), rows)))
        expected += rows
    return Scenario(name, t, expected, has_time_column=with_time)


def _partitioned_events(root: Path, name: str, fields: list[tuple]) -> tuple[HandWrittenTable, list[dict]]:
    rng = random.Random(hash(name) & 0xFFFF)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "category", StringType()),
        NestedField(3, "name", StringType()),
        NestedField(4, "event_ts", TimestamptzType()),
        NestedField(5, "local_ts", TimestampType()),
        NestedField(6, "day", DateType()),
        NestedField(7, "amount", DecimalType(10, 2)),
        NestedField(8, "qty", IntegerType()),
    )
    t = HandWrittenTable.create(str(root / name), schema, fields)
    rows = []
    for i in range(400):
        rows.append(
            {
                "id": i,
                "category": rng.choice(["books", "games", "tools", None]),
                "name": rng.choice(["anna", "bob", "carla", "dmitri", "ölaf", None]),
                "event_ts": dt.datetime(2025, 12, 30, tzinfo=UTC) + dt.timedelta(minutes=rng.randint(0, 5 * 24 * 60)),
                "local_ts": dt.datetime(2023, 11, 1) + dt.timedelta(hours=rng.randint(0, 24 * 120)),
                "day": dt.date(2024, 2, 27) + dt.timedelta(days=rng.randint(0, 400)),
                "amount": rng.choice([None, decimal.Decimal(rng.randint(-99999, 99999)).scaleb(-2)]),
                "qty": rng.choice([None, rng.randint(-50, 50)]),
            }
        )
    return t, rows


def _delete_positions(t: HandWrittenTable, files: list[DataFile], every: int) -> tuple[list[DataFile], set[int]]:
    """Position-deletes every ``every``-th row of each file; returns delete files and deleted ids."""
    deletes, deleted_ids = [], set()
    for f in files:
        rows = position_of(t, f)
        positions = [p for p in range(len(rows)) if p % every == 0]
        if positions:
            deletes.append(t.write_position_deletes(f, positions))
            deleted_ids |= {rows[p]["id"] for p in positions}
    return deletes, deleted_ids


def partitioned(root: Path, name: str, fields: list[tuple], with_position_deletes: bool) -> Scenario:
    t, rows = _partitioned_events(root, name, fields)
    first = t.write_data(to_arrow(t.metadata.schema(), rows[:250]))
    t.commit(first)
    t.commit(t.write_data(to_arrow(t.metadata.schema(), rows[250:])))
    expected = rows
    if with_position_deletes:
        deletes, deleted = _delete_positions(t, first, every=4)
        t.commit(deletes, "delete")
        expected = [r for r in rows if r["id"] not in deleted]
    return Scenario(name, t, expected)


def schema_and_spec_evolution(root: Path) -> Scenario:
    """Rows written before and after add/rename/drop/reorder/promote and a new spec."""
    from table.types import LongType as Long

    t, rows = _partitioned_events(root, "evolution", [("day", "event_ts")])
    old = rows[:200]
    first = t.write_data(to_arrow(t.metadata.schema(), old))
    t.commit(first)

    def change(u):
        u.add_column("note", StringType())
        u.rename_column("name", "customer")
        u.delete_column("local_ts")
        u.update_column("qty", Long())
        u.move_first("category")

    t.evolve_schema(change)
    t.evolve_spec([("day", "event_ts"), ("bucket[4]", "id")])
    new = [
        {**{k: v for k, v in r.items() if k not in ("name", "local_ts")}, "customer": r["name"], "note": f"n{r['id']}"}
        for r in rows[200:]
    ]
    second = t.write_data(to_arrow(t.metadata.schema(), new))
    t.commit(second)
    deletes, deleted = _delete_positions(t, first + second, every=5)
    t.commit(deletes, "delete")

    expected_old = [
        {**{k: v for k, v in r.items() if k not in ("name", "local_ts")}, "customer": r["name"], "note": None} for r in old
    ]
    expected = [r for r in expected_old + new if r["id"] not in deleted]
    return Scenario("evolution", t, expected)


def equality_deletes(root: Path, partitioned_by_key: bool) -> Scenario:
    """Upsert-shaped history: equality deletes of keys, re-inserted rows, a position delete."""
    name = "eq_partitioned" if partitioned_by_key else "eq_global"
    fields = [("bucket[4]", "id")] if partitioned_by_key else []
    t, rows = _partitioned_events(root, name, fields)
    t.commit(t.write_data(to_arrow(t.metadata.schema(), rows[:300])))
    state = {r["id"]: r for r in rows[:300]}

    # Delete 60 keys; re-insert 20 of them with new values in the same commit
    # (same sequence number: the delete must not remove the new rows).
    doomed = list(range(0, 300, 5))
    reinserted = [{**state[i], "name": "again", "qty": 7} for i in doomed[:20]]
    data = t.write_data(to_arrow(t.metadata.schema(), reinserted))
    deletes = _equality_deletes(t, doomed, partitioned_by_key)
    t.commit(data + deletes, "overwrite")
    for i in doomed:
        state.pop(i)
    state.update({r["id"]: r for r in reinserted})

    # A later append, then deletes that include a key whose only row is newer.
    later = rows[300:]
    t.commit(t.write_data(to_arrow(t.metadata.schema(), later)))
    state.update({r["id"]: r for r in later})
    doomed2 = [301, 302, 7, 11]
    t.commit(_equality_deletes(t, doomed2, partitioned_by_key), "delete")
    for i in doomed2:
        state.pop(i, None)

    # Null keys match null for equality deletes: delete rows whose category is null.
    if not partitioned_by_key:
        keys = pa.table({"category": pa.array([None], pa.string())})
        t.commit([t.write_equality_deletes(keys)], "delete")
        state = {k: r for k, r in state.items() if r["category"] is not None}
    return Scenario(name, t, list(state.values()), has_equality_deletes=True)


def _equality_deletes(t: HandWrittenTable, ids: list[int], by_partition: bool) -> list[DataFile]:
    keys = pa.table({"id": pa.array(ids, pa.int64())})
    if not by_partition:
        return [t.write_equality_deletes(keys)]
    spec = t.metadata.spec()
    transform = spec.fields[0].transform
    buckets: dict[int, list[int]] = {}
    for i in ids:
        buckets.setdefault(transform.apply(LongType(), i), []).append(i)
    return [t.write_equality_deletes(pa.table({"id": pa.array(v, pa.int64())}), (b,)) for b, v in buckets.items()]


SCENARIOS: dict[str, Callable[[Path], Scenario]] = {
    "append_only": append_only,
    "append_only_without_time": lambda root: append_only(root, with_time=False),
    "identity_bucket_truncate": lambda root: partitioned(
        root, "identity_bucket_truncate", [("identity", "category"), ("bucket[8]", "id"), ("truncate[2]", "name")], True
    ),
    "day_hour": lambda root: partitioned(root, "day_hour", [("day", "event_ts"), ("hour", "local_ts")], True),
    "month_year_decimal": lambda root: partitioned(
        root, "month_year_decimal", [("month", "day"), ("year", "event_ts"), ("truncate[100]", "amount")], False
    ),
    "void_truncate_int": lambda root: partitioned(root, "void_truncate_int", [("void", "category"), ("truncate[10]", "qty")], True),
    "evolution": schema_and_spec_evolution,
    "eq_global": lambda root: equality_deletes(root, False),
    "eq_partitioned": lambda root: equality_deletes(root, True),
}
