"""Partition and sort terms as written in the config: ``bucket(16, id)``, ``day(ts) desc nulls last``.

The config keeps the strings (so dumps show what was written); these parse
them into Iceberg transform names for the table layer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from service.config.problems import raise_all


class Term(NamedTuple):
    """A transform of a source column: ``bucket[16]`` of ``id``, in Iceberg's transform names."""

    transform: str
    column: str


class SortTerm(NamedTuple):
    transform: str
    column: str
    direction: str  # "asc" | "desc"
    null_order: str  # "nulls-first" | "nulls-last"


_TERM = re.compile(
    r"^\s*(?:(?P<fn>[A-Za-z_]+)\s*\(\s*(?:(?P<arg>\d+)\s*,\s*)?(?P<col>[^()\s,]+)\s*\)|(?P<bare>[^()\s,]+))\s*$"
)
_TRANSFORM_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
_WITH_ARGUMENT = ("bucket", "truncate")
_WITHOUT_ARGUMENT = ("identity", "year", "month", "day", "hour", "void")
_TERM_HINT = (
    "'column' or 'transform(column)' with identity, year, month, day, hour, void, "
    "bucket(N, column), truncate(W, column)"
)
_SORT = re.compile(r"^(?P<term>.+?)(?:\s+(?P<dir>asc|desc))?(?:\s+nulls\s+(?P<nulls>first|last))?\s*$", re.IGNORECASE)


def parse_term(text: str) -> Term:
    """``"bucket(16, id)"`` → ``Term("bucket[16]", "id")``; ``"country"`` is identity."""
    m = _TERM.match(text)
    if not m:
        raise ValueError(f"expected {_TERM_HINT}, got {text!r}")
    if m["bare"]:
        return Term("identity", m["bare"])
    fn = _TRANSFORM_ALIASES.get(m["fn"].lower(), m["fn"].lower())
    if fn in _WITH_ARGUMENT and m["arg"] and int(m["arg"]) > 0:
        return Term(f"{fn}[{int(m['arg'])}]", m["col"])
    if fn in _WITHOUT_ARGUMENT and not m["arg"]:
        return Term(fn, m["col"])
    raise ValueError(f"expected {_TERM_HINT}, got {text!r}")


def parse_sort_term(text: str) -> SortTerm:
    """``"day(ts) desc nulls last"`` → a sort term; nulls default as in Iceberg (first when ascending)."""
    m = _SORT.match(text)
    try:
        term = parse_term(m["term"]) if m else None
    except ValueError:
        term = None
    if m is None or term is None:
        raise ValueError(f"expected '<column or transform(column)> [asc|desc] [nulls first|nulls last]', got {text!r}")
    direction = (m["dir"] or "asc").lower()
    nulls = (m["nulls"] or ("first" if direction == "asc" else "last")).lower()
    return SortTerm(term.transform, term.column, direction, f"nulls-{nulls}")


def terms_validator(parse: Callable[[str], Any]) -> Callable[[list[str]], list[str]]:
    """An after-validator: every item of the list parses with ``parse`` (one problem line per bad item)."""

    def check(value: list[str]) -> list[str]:
        problems = []
        for i, item in enumerate(value):
            try:
                parse(item)
            except ValueError as exc:
                problems.append((f"[{i}]", str(exc)))
        raise_all(problems)
        return value

    return check
