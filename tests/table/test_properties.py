"""table.properties and table.locations: one key, one default, one parser; one way to place files."""

from __future__ import annotations

import pyarrow as pa
import pytest

from table import properties as props
from table.locations import data_location, locations_outside_table, metadata_location
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


@pytest.mark.parametrize("flag", [props.METADATA_DELETE_AFTER_COMMIT, props.MANIFEST_MERGE_ENABLED])
def test_flags_read_as_javas_boolean_parse(flag: props.Property[bool]) -> None:
    """Another engine may have written ``yes``: Java reads it as false, and so must Floe, without failing."""
    assert flag.read({flag.key: "TRUE"}) is True
    assert flag.read({flag.key: "yes"}) is False


def test_the_metadata_codec_is_none_or_gzip() -> None:
    assert props.METADATA_COMPRESSION.read({props.METADATA_COMPRESSION.key: " GZIP "}) == "gzip"
    with pytest.raises(PropertyError, match=r"'gz' is not one of \['gzip', 'none'\]"):
        props.METADATA_COMPRESSION.read({props.METADATA_COMPRESSION.key: "gz"})


@pytest.mark.parametrize("codec, level", [("snappy", None), ("uncompressed", None), ("zstd", 9), ("gzip", 9)])
def test_a_compression_level_applies_only_to_codecs_that_take_one(tmp_path, codec: str, level) -> None:
    import pyarrow.parquet as pq

    from table.arrow_schema import cast_to_schema
    from table.io import FileIO
    from table.parquet.writer import DataFileWriter, WriterOptions

    md = metadata(str(tmp_path), **{"write.parquet.compression-codec": codec, "write.parquet.compression-level": "9"})
    options = WriterOptions.for_table(md)
    assert options.compression_level == level
    io = FileIO.for_location(str(tmp_path))
    writer = DataFileWriter(io, str(tmp_path / "data"), md.schema(), UNPARTITIONED_SPEC, (), **options.for_data())
    writer.write(cast_to_schema(pa.table({"id": pa.array([1, 2], pa.int64())}), md.schema()))
    [written] = writer.close()
    assert pq.ParquetFile(written.file_path).metadata.row_group(0).column(0).compression.lower() in (
        codec, "uncompressed")


def metadata(location: str, **properties: str):  # type: ignore[no-untyped-def]
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    return new_table_metadata(schema, UNPARTITIONED_SPEC, UNSORTED_SORT_ORDER, location, properties)


def test_locations_default_under_the_table_and_join_with_one_slash() -> None:
    md = metadata("s3://b/wh/db/t/")
    assert (data_location(md), metadata_location(md)) == ("s3://b/wh/db/t/data", "s3://b/wh/db/t/metadata")
    moved = metadata("/wh/db/t", **{"write.data.path": "/data/t//", "write.metadata.path": "/wh/db/t/meta/"})
    assert (data_location(moved), metadata_location(moved)) == ("/data/t", "/wh/db/t/meta")
    assert locations_outside_table(moved) == ["/data/t"], "a path under the table location is inside it"


def test_a_blank_path_property_is_unset() -> None:
    md = metadata("/wh/db/t", **{"write.data.path": "  ", "write.metadata.path": "/"})
    assert (data_location(md), metadata_location(md), locations_outside_table(md)) == (
        "/wh/db/t/data", "/wh/db/t/metadata", [])
