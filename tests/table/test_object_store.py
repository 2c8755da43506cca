"""S3 settings from the environment: what each process reads, and what it gives pyarrow and Hadoop's S3A."""

from __future__ import annotations

import pytest

from table.object_store import ObjectStoreSettingError, S3Settings


def test_nothing_set_leaves_every_choice_to_the_aws_sdk() -> None:
    settings = S3Settings.from_environment({})
    assert settings == S3Settings(None, None, False)
    assert settings.pyarrow_options() == {"force_virtual_addressing": False}
    assert settings.hadoop_options() == {"fs.s3a.path.style.access": "false"}


def test_the_s3_specific_endpoint_wins_over_the_general_one() -> None:
    settings = S3Settings.from_environment({"AWS_ENDPOINT_URL": "http://general:1", "AWS_ENDPOINT_URL_S3":
                                            "https://s3only:9000", "AWS_DEFAULT_REGION": "eu-west-1"})
    assert settings.endpoint == "https://s3only:9000" and settings.region == "eu-west-1"


def test_a_path_style_endpoint_for_pyarrow_and_s3a() -> None:
    settings = S3Settings.from_environment({"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_REGION": "us-east-1",
                                            "FLOE_S3_PATH_STYLE_ACCESS": "TRUE"})
    assert settings.pyarrow_options() == {"force_virtual_addressing": False, "endpoint_override": "127.0.0.1:9000",
                                          "scheme": "http", "region": "us-east-1"}
    assert settings.hadoop_options() == {"fs.s3a.path.style.access": "true", "fs.s3a.endpoint": "http://127.0.0.1:9000",
                                         "fs.s3a.connection.ssl.enabled": "false",
                                         "fs.s3a.endpoint.region": "us-east-1"}


def test_an_endpoint_without_path_style_is_addressed_virtually() -> None:
    settings = S3Settings(endpoint="https://storage.example.com")
    assert settings.pyarrow_options()["force_virtual_addressing"] is True
    assert settings.hadoop_options()["fs.s3a.connection.ssl.enabled"] == "true"


def test_the_environment_round_trips(tmp_path) -> None:
    (tmp_path / "ca.pem").write_text("a CA")
    for settings in (S3Settings("http://h:1", "r", True), S3Settings("https://h:1", None, True, str(tmp_path / "ca.pem"))):
        assert S3Settings.from_environment(settings.environment()) == settings


def test_a_ca_bundle_is_what_pyarrow_trusts(tmp_path) -> None:
    (tmp_path / "ca.pem").write_text("a CA")
    settings = S3Settings.from_environment({"AWS_ENDPOINT_URL_S3": "https://h:9000", "AWS_CA_BUNDLE":
                                            str(tmp_path / "ca.pem")})
    assert settings.pyarrow_options()["tls_ca_file_path"] == str(tmp_path / "ca.pem")
    assert "tls_ca_file_path" not in S3Settings("https://h:9000").pyarrow_options()


@pytest.mark.parametrize(("environ", "named"), [
    ({"AWS_ENDPOINT_URL_S3": "127.0.0.1:9000"}, "AWS_ENDPOINT_URL_S3='127.0.0.1:9000'"),
    ({"AWS_ENDPOINT_URL": "http://h:1/bucket"}, "AWS_ENDPOINT_URL='http://h:1/bucket'"),
    ({"FLOE_S3_PATH_STYLE_ACCESS": "maybe"}, "FLOE_S3_PATH_STYLE_ACCESS='maybe'"),
    ({"AWS_CA_BUNDLE": "/nowhere/ca.pem"}, "AWS_CA_BUNDLE='/nowhere/ca.pem': no such file"),
])
def test_a_bad_value_names_its_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ObjectStoreSettingError, match="^" + named.replace("(", r"\(").replace("[", r"\[")):
        S3Settings.from_environment(environ)
