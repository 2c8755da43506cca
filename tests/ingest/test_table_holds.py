"""Held tables of a shared query: tried again after a jittered backoff that doubles up to a bound. Pure."""

from __future__ import annotations

from ingest.driver.table_holds import FIRST_RETRY_S, MAX_RETRY_S, TableHolds


def test_the_backoff_doubles_jittered_within_a_quarter_and_stays_bounded():
    now = [100.0]
    for draw, factor in ((0.0, 0.75), (0.5, 1.0), (0.999999, 1.25)):
        holds = TableHolds(clock=lambda: now[0], draw=lambda d=draw: d)
        delays = [holds.hold("db.t", "refused").retry_at - now[0] for _ in range(10)]
        assert [round(d, 3) for d in delays[:3]] == [round(FIRST_RETRY_S * 2**i * factor, 3) for i in range(3)]
        assert max(delays) <= MAX_RETRY_S and delays[-1] == min(MAX_RETRY_S, MAX_RETRY_S * factor)
        assert holds.waits("db.t") and holds.due() == []


def test_a_table_that_lands_is_released_and_starts_again_from_the_first_step():
    now = [0.0]
    holds = TableHolds(clock=lambda: now[0], draw=lambda: 0.5)
    holds.hold("db.a", "x")
    holds.hold("db.a", "x")
    now[0] = 1_000.0
    assert holds.due() == ["db.a"] and holds.next_retry_in() == 0.0
    assert holds.release("db.a").failures == 2 and holds.release("db.a") is None
    assert holds.hold("db.a", "y").retry_at == now[0] + FIRST_RETRY_S


def test_a_held_table_that_lands_makes_the_tables_held_for_the_same_cause_due():
    """The catalog answers again for one table: the others held for the catalog try now, not minutes on."""
    now = [0.0]
    holds = TableHolds(clock=lambda: now[0], draw=lambda: 0.5)
    for failure in range(6):
        if failure < 3:
            holds.hold("db.a", "503", "catalog")  # its third failure: tried again after 20 s
        holds.hold("db.b", "503", "catalog")  # its sixth: after 160 s
        holds.hold("db.c", "refused", "storage")
        holds.hold("db.d", "schema", "other")
    now[0] = 100.0
    assert holds.due() == ["db.a"]
    holds.release("db.a")
    assert holds.due() == ["db.b"], "only the table held for the same cause"
    holds.release("db.d")  # an "other" failure tells nothing about the others
    assert holds.due() == ["db.b"]
