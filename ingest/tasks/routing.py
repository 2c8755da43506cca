"""Routing: which records of a shared topic a table takes, by the value of one field of the record.

Several tables may read one topic and each take the records whose route field
holds one of its values (Kafka Connect's route field; Flink's dynamic sink
does it with code). Every table decodes the topic's records and keeps its own
share; so that a record no table takes is neither lost nor dead-lettered twice,
exactly one table of each routed topic, its *owner* (the first in the
configuration), dead-letters what no route takes: a tombstone, an undecodable
value, a record without the field, or a value no table lists. The other
tables pass such records over in silence, as they do the records routed to a
sibling.

Pure logic: no Kafka, no Spark, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.tasks.record_errors import RecordError


class RouteError(RecordError):
    """No table's route takes the record: it goes to the dead letters of its topic's owner."""


@dataclass(frozen=True)
class TopicRoute:
    """How one topic this table reads is shared: the values its other tables take, and who owns the rest."""

    topic: str
    elsewhere: frozenset[str]
    owns_unrouted: bool


@dataclass(frozen=True)
class RouteSpec:
    """One table's route: its field (a dotted path into the record value) and values, per routed topic."""

    field: str
    values: frozenset[str]
    topics: tuple[TopicRoute, ...]

    def topic(self, name: str) -> TopicRoute | None:
        """The routing of ``name``, or None when the table takes all of that topic's records."""
        return next((t for t in self.topics if t.topic == name), None)


def route_value(record: Any, field: str) -> str | None:
    """The record's value of ``field`` as routes list it, or None when it has none a route can name.

    Strings match as they are; integers and booleans as their JSON text (``5``, ``true``)."""
    value = record
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return route_text(value)


def route_text(value: Any) -> str | None:
    """A value as routes list it: a string as it is, an integer or boolean as its JSON text (``5``, ``true``);
    None for anything else. The configuration reads route values through it too, so both sides agree."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    return None


def route_records(
    topics: Sequence[str], decoded: Sequence[Any], spec: RouteSpec, failures: dict[int, RecordError]
) -> list[int]:
    """The positions of the records this table keeps, in order: those its route takes, and on topics it
    owns, those no route takes (each with a :class:`RouteError` in ``failures``, or its decode error).

    A dropped record's failure is removed from ``failures``: it is another table's to report."""
    kept: list[int] = []
    for i, (topic, record) in enumerate(zip(topics, decoded)):
        route = spec.topic(topic)
        if route is None:
            kept.append(i)
            continue
        value = None if i in failures else route_value(record, spec.field)
        if value is not None and value in spec.values:
            kept.append(i)
        elif value is not None and value in route.elsewhere:
            failures.pop(i, None)
        elif route.owns_unrouted:
            failures.setdefault(i, _unrouted(record, value, spec.field))
            kept.append(i)
        else:
            failures.pop(i, None)
    return kept


def _unrouted(record: Any, value: str | None, field: str) -> RouteError:
    if record is None:
        return RouteError("a tombstone has no field to route by", field)
    if value is None:
        return RouteError("the record has no value to route by (a string, integer or boolean)", field)
    return RouteError(f"value {value!r} is routed to no table", field)
