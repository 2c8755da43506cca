"""Tests of table/io.py on local disk (object stores are not reachable here)."""

from __future__ import annotations

import io as pyio
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from table.errors import NotFoundError, TableError
from table.io import FileIO, FileIOError, MissingFileError, to_fs_path

segment = st.text(alphabet="abcxyz0129_-. ", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(segment, min_size=1, max_size=4))
def test_to_fs_path_accepts_plain_paths_and_file_uris(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    assert to_fs_path(path) == path
    assert to_fs_path("file:" + path) == path
    assert to_fs_path("file://" + path) == path
    assert to_fs_path("file://localhost" + path) == path


def test_to_fs_path_of_object_store_uri_is_bucket_and_key() -> None:
    assert to_fs_path("s3://bucket/a/b.avro") == "bucket/a/b.avro"
    assert to_fs_path("gs://bucket/k") == "bucket/k"


@pytest.mark.parametrize(
    "location", ["relative/path", "file:relative", "file://otherhost/x", "s3:/bucket/k", ""]
)
def test_to_fs_path_rejects_non_absolute_locations(location: str) -> None:
    with pytest.raises(FileIOError) as info:
        to_fs_path(location)
    assert info.value.operation == "resolve"
    assert info.value.path == location


@pytest.mark.parametrize("form", ["{}", "file:{}", "file://{}"])
def test_write_then_read_bytes_in_every_local_form(tmp_path: Path, form: str) -> None:
    location = form.format(tmp_path / "a" / "b" / "f.bin")
    fio = FileIO.for_location(location)
    fio.write_bytes(location, b"hello")  # parents are created
    assert fio.read_bytes(location) == b"hello"
    assert (tmp_path / "a" / "b" / "f.bin").read_bytes() == b"hello"
    assert fio.exists(location)
    assert fio.size(location) == 5


def test_forms_of_one_file_are_interchangeable(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    fio.write_bytes(f"file:{tmp_path}/x", b"1")
    assert fio.read_bytes(f"file://{tmp_path}/x") == b"1"
    assert fio.read_bytes(f"{tmp_path}/x") == b"1"


def test_write_replaces_existing_file(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "f")
    fio.write_bytes(location, b"first version")
    fio.write_bytes(location, b"2nd")
    assert fio.read_bytes(location) == b"2nd"


def test_open_input_is_seekable(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "f")
    fio.write_bytes(location, bytes(range(100)))
    with fio.open_input(location) as f:
        assert f.seekable()
        f.seek(90)
        assert f.read(3) == bytes([90, 91, 92])
        f.seek(1)
        assert f.read(1) == b"\x01"


def test_open_output_and_input_work_with_parquet(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    location = f"file:{tmp_path}/data/part-0.parquet"
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", None, "c"]})
    with fio.open_output(location) as out:
        pq.write_table(data, out)
    with fio.open_input(location) as f:
        assert pq.read_table(f).equals(data)
    assert pq.ParquetFile(fio.open_input(location)).metadata.num_rows == 3


def test_open_output_and_input_work_with_fastavro(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "x.avro")
    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    with fio.open_output(location) as out:
        fastavro.writer(out, schema, [{"a": i} for i in range(1000)], codec="deflate")
    with fio.open_input(location) as f:
        assert [r["a"] for r in fastavro.reader(f)] == list(range(1000))


def test_missing_file_errors_are_typed_and_name_path_and_operation(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "nope")
    with pytest.raises(MissingFileError) as info:
        fio.open_input(location)
    assert isinstance(info.value, NotFoundError) and isinstance(info.value, TableError)
    assert location in str(info.value) and "reading" in str(info.value)
    with pytest.raises(MissingFileError):
        fio.read_bytes(location)
    with pytest.raises(MissingFileError) as size_info:
        fio.size(location)
    assert size_info.value.operation == "get size of"
    assert not fio.exists(location)


def test_os_errors_become_file_io_errors(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    (tmp_path / "plain-file").write_bytes(b"x")
    location = str(tmp_path / "plain-file" / "child")  # parent is a file
    with pytest.raises(FileIOError) as info:
        fio.write_bytes(location, b"y")
    assert info.value.path == location
    assert isinstance(info.value.__cause__, OSError)


def test_delete_is_idempotent(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    location = str(tmp_path / "f")
    fio.write_bytes(location, b"x")
    fio.delete(location)
    assert not fio.exists(location)
    fio.delete(location)  # missing: not an error
    fio.delete(str(tmp_path / "never" / "existed"))


def test_delete_many_tries_every_file_before_failing(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fio.write_bytes(a, b"1")
    fio.write_bytes(b, b"2")
    directory = tmp_path / "dir"
    directory.mkdir()
    (directory / "inner").write_bytes(b"3")
    with pytest.raises(FileIOError) as info:
        fio.delete_many([a, str(directory), b, str(tmp_path / "missing")])
    assert str(directory) in str(info.value)
    assert not fio.exists(a) and not fio.exists(b)


def test_delete_many_of_existing_and_missing_files(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    locations = [str(tmp_path / f"f{i}") for i in range(5)]
    for location in locations[:3]:
        fio.write_bytes(location, b"x")
    fio.delete_many(locations)
    assert not any(fio.exists(location) for location in locations)


def test_exists_is_false_for_directories(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    fio.write_bytes(str(tmp_path / "d" / "f"), b"x")
    assert not fio.exists(str(tmp_path / "d"))
    assert fio.exists(str(tmp_path / "d" / "f"))


@pytest.mark.parametrize("form", ["{}", "file:{}", "file://{}"])
def test_list_prefix_is_recursive_and_keeps_the_location_form(tmp_path: Path, form: str) -> None:
    root = form.format(tmp_path / "table")
    fio = FileIO.for_location(root)
    files = {f"{root}/data/a.parquet": b"12", f"{root}/metadata/v1.json": b"123", f"{root}/x": b""}
    for location, data in files.items():
        fio.write_bytes(location, data)
    listed = {entry.location: entry.size for entry in fio.list_prefix(root)}
    assert listed == {location: len(data) for location, data in files.items()}
    assert all(e.mtime_ms and e.mtime_ms > 0 for e in fio.list_prefix(root + "/"))
    assert [e.location for e in fio.list_prefix(root + "/data")] == [f"{root}/data/a.parquet"]


def test_list_prefix_of_missing_directory_is_empty(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    assert list(fio.list_prefix(str(tmp_path / "nothing-here"))) == []


def test_local_file_io_refuses_other_schemes(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    with pytest.raises(FileIOError) as info:
        fio.read_bytes("s3://bucket/key")
    assert "s3" in str(info.value)


def test_unknown_scheme_is_a_typed_error() -> None:
    with pytest.raises(FileIOError) as info:
        FileIO.for_location("nosuchfs://bucket/key")
    assert info.value.operation == "open file system for"


def test_read_bytes_of_large_file(tmp_path: Path) -> None:
    fio = FileIO.for_location(str(tmp_path))
    data = bytes(range(256)) * 20_000
    with fio.open_output(str(tmp_path / "big")) as out:
        stream = pyio.BytesIO(data)
        while chunk := stream.read(65536):
            out.write(chunk)
    assert fio.read_bytes(str(tmp_path / "big")) == data
    assert fio.size(str(tmp_path / "big")) == len(data)


# --------------------------------------------------------------------------- on a real S3 server (S3Proxy)


@pytest.fixture()
def bucket(s3proxy) -> str:
    import uuid

    return s3proxy.create_bucket(f"io-{uuid.uuid4().hex[:12]}")


def test_s3_write_read_size_list_and_delete(bucket: str) -> None:
    io = FileIO.for_location(bucket)
    assert not io.is_local
    io.write_bytes(f"{bucket}/t/data/a.parquet", b"a" * 10)
    io.write_bytes(f"{bucket}/t/metadata/m.json", b"{}")
    assert io.read_bytes(f"{bucket}/t/data/a.parquet") == b"a" * 10
    assert io.size(f"{bucket}/t/data/a.parquet") == 10 and io.exists(f"{bucket}/t/metadata/m.json")
    listed = sorted(e.location for e in io.list_prefix(f"{bucket}/t"))
    assert listed == [f"{bucket}/t/data/a.parquet", f"{bucket}/t/metadata/m.json"]
    io.delete_many([f"{bucket}/t/data/a.parquet", f"{bucket}/t/data/missing.parquet"])
    assert not io.exists(f"{bucket}/t/data/a.parquet")


def test_s3a_and_s3_name_the_same_objects(bucket: str) -> None:
    io = FileIO.for_location(bucket)
    io.write_bytes(f"{bucket}/x", b"same")
    assert io.read_bytes(bucket.replace("s3://", "s3a://") + "/x") == b"same"


def test_s3_multipart_write_and_seekable_read(bucket: str) -> None:
    payload = bytes(range(256)) * (40 * 1024)  # 10 MiB: more than one upload part
    io = FileIO.for_location(bucket)
    io.write_bytes(f"{bucket}/big", payload)
    with io.open_input(f"{bucket}/big") as f:
        f.seek(5 * 1024 * 1024 + 3)
        assert f.read(4) == payload[5 * 1024 * 1024 + 3: 5 * 1024 * 1024 + 7]


def test_s3_missing_file_and_missing_bucket_are_typed(bucket: str) -> None:
    io = FileIO.for_location(bucket)
    with pytest.raises(MissingFileError, match=f"cannot open for reading {bucket}/nope: file does not exist"):
        io.read_bytes(f"{bucket}/nope")
    with pytest.raises(FileIOError, match="no-such-bucket-floe"):
        io.write_bytes("s3://no-such-bucket-floe/x", b"x")


def test_a_bad_s3_setting_in_the_environment_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "not-a-url")
    with pytest.raises(FileIOError, match="AWS_ENDPOINT_URL_S3='not-a-url': expected http"):
        FileIO.for_location("s3://b/x")
