"""One root on S3 reached by S3A, delta-rs and pyarrow: S3A's settings translated once."""

import pyarrow.fs as pafs
import pytest

from log_store.errors import InvalidConfigurationError
from log_store.object_store import arrow_filesystem, storage_from_s3a

S3A = {"endpoint": "http://127.0.0.1:9000", "access.key": "k", "secret.key": "s", "endpoint.region": "eu-west-1",
       "path.style.access": "true", "bucket.other.endpoint": "https://other.example", "bucket.other.access.key": "k2"}


def test_s3a_settings_become_delta_rs_storage_options_with_a_buckets_own_first():
    assert storage_from_s3a(S3A, "s3a://lake/lakelog") == {
        "aws_endpoint_url": "http://127.0.0.1:9000", "aws_allow_http": "true", "aws_access_key_id": "k",
        "aws_secret_access_key": "s", "aws_region": "eu-west-1", "aws_virtual_hosted_style_request": "false"}
    other = storage_from_s3a(S3A, "s3://other/x")
    assert other["aws_endpoint_url"] == "https://other.example" and other["aws_access_key_id"] == "k2"
    assert "aws_allow_http" not in other
    assert storage_from_s3a(S3A, "/local/root") == {} and storage_from_s3a(S3A, "gs://b/r") == {}


def test_an_endpoint_without_a_scheme_follows_s3as_ssl_setting():
    assert storage_from_s3a({"endpoint": "minio:9000", "connection.ssl.enabled": "false"}, "s3a://b/r") == {
        "aws_endpoint_url": "http://minio:9000", "aws_allow_http": "true"}
    assert storage_from_s3a({"endpoint": "s3.eu-west-1.amazonaws.com"}, "s3a://b/r") == {
        "aws_endpoint_url": "https://s3.eu-west-1.amazonaws.com"}


def test_pyarrow_file_systems_for_local_and_s3_roots(tmp_path):
    fs, path = arrow_filesystem(str(tmp_path / "r"))
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "r")
    fs, path = arrow_filesystem("s3a://lake/lakelog/_staging/", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                                                               "aws_region": "us-east-1"})
    assert isinstance(fs, pafs.S3FileSystem) and path == "lake/lakelog/_staging"
    assert fs.region == "us-east-1"
    with pytest.raises(InvalidConfigurationError, match="local and S3 roots"):
        arrow_filesystem("abfss://c@a.dfs.core.windows.net/r")


def test_lakelogs_engine_commits_to_s3_except_on_databricks(monkeypatch):
    """Databricks' runtime commits to S3 through its own commit service: a delta-rs writer must
    not race it there, so Delta's engine commits; elsewhere an S3 root is the engine's."""
    from log_store.object_store import engine_s3

    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    assert engine_s3("s3a://b/root/t") and engine_s3("s3://b/root/t")
    assert not engine_s3("abfss://c@a.dfs.core.windows.net/root") and not engine_s3("/tmp/root")
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "19.0")
    assert not engine_s3("s3://b/root/t")
