"""table.properties and table.locations: one key, one default, one parser; one way to place files."""

from __future__ import annotations

import pytest

from table import properties as props
from table.locations import data_location, metadata_location, table_roots
from table.metadata import new_table_metadata
from table.partitioning import UNPARTITIONED_SPEC
from table.properties import PropertyError
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER
from table.types import LongType, NestedField


@pytest.mark.parametrize("raw, value", [("536870912", 536870912), (" 42 ", 42), ("+7", 7)])
def test_integers_parse_as_java_does(raw: str, value: int) -> None:
    assert props.TARGET_FILE_SIZE.read({props.TARGET_FILE_SIZE.key: raw}) == value


@pytest.mark.parametrize("raw, reason", [
    ("1_000", "is not an integer"), ("12.5", "is not an integer"), ("", "is not an integer"),
    (str(2**63), "is out of the range of a 64-bit integer"), ("0", "must be > 0"),
])
def test_a_bad_value_names_key_value_and_rule(raw: str, reason: str) -> None:
    with pytest.raises(PropertyError) as caught:
        props.TARGET_FILE_SIZE.read({"write.target-file-size-bytes": raw})
    assert str(caught.value) == f"table property 'write.target-file-size-bytes': {raw!r} {reason}"


def test_flags_read_leniently_where_java_does_and_strictly_elsewhere() -> None:
    assert props.METADATA_DELETE_AFTER_COMMIT.read({props.METADATA_DELETE_AFTER_COMMIT.key: "TRUE"}) is True
    assert props.METADATA_DELETE_AFTER_COMMIT.read({props.METADATA_DELETE_AFTER_COMMIT.key: "yes"}) is False
    with pytest.raises(PropertyError, match="must be true or false"):
        props.MANIFEST_MERGE_ENABLED.read({props.MANIFEST_MERGE_ENABLED.key: "yes"})


def metadata(location: str, **properties: str):  # type: ignore[no-untyped-def]
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    return new_table_metadata(schema, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, location, properties)


def test_locations_default_under_the_table_and_join_with_one_slash() -> None:
    md = metadata("s3://b/wh/db/t/")
    assert (data_location(md), metadata_location(md)) == ("s3://b/wh/db/t/data", "s3://b/wh/db/t/metadata")
    moved = metadata("/wh/db/t", **{"write.data.path": "/data/t//", "write.metadata.path": "/wh/db/t/meta/"})
    assert (data_location(moved), metadata_location(moved)) == ("/data/t", "/wh/db/t/meta")
    assert table_roots(moved) == ["/wh/db/t", "/data/t"], "a path under the table location adds no root"


def test_a_blank_path_property_is_unset() -> None:
    md = metadata("/wh/db/t", **{"write.data.path": "  ", "write.metadata.path": "/"})
    assert (data_location(md), metadata_location(md), table_roots(md)) == ("/wh/db/t/data", "/wh/db/t/metadata",
                                                                           ["/wh/db/t"])
