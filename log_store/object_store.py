"""One root in S3, reached three ways: Spark's S3A (Hadoop settings ``fs.s3a.*``), delta-rs
(storage options ``aws_*``) and pyarrow (``S3FileSystem``). A user configures S3A once, for the
Spark session; the reads and files lakelog makes without the JVM take the same endpoint and
credentials from here (``storage_from_s3a``), unless ``storage.*`` options or the environment
(``AWS_*``) give their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

from log_store.errors import InvalidConfigurationError
from log_store.files import FAST_READS_ENV, is_remote, local_path, reads_with_delta_rs

S3_SCHEMES = ("s3", "s3a")

# S3A's setting -> delta-rs's storage option (the same meaning).
_S3A_TO_DELTA_RS = {
    "endpoint": "aws_endpoint_url",
    "access.key": "aws_access_key_id",
    "secret.key": "aws_secret_access_key",
    "session.token": "aws_session_token",
    "endpoint.region": "aws_region",
}


def is_s3(uri: str) -> bool:
    return is_remote(uri) and uri.split(":", 1)[0].lower() in S3_SCHEMES


def bucket_of(uri: str) -> str:
    return urlparse(uri).netloc


def storage_from_s3a(props: Mapping[str, str], uri: str) -> dict[str, str]:
    """delta-rs storage options for the S3 root ``uri`` from S3A's settings (``props``: the Hadoop
    configuration's ``fs.s3a.*`` entries, without the prefix); a bucket's own settings
    (``fs.s3a.bucket.<bucket>.<key>``) over the general ones. Empty for a root not on S3."""
    if not is_s3(uri):
        return {}
    own = f"bucket.{bucket_of(uri)}."
    merged = {k: v for k, v in props.items() if not k.startswith("bucket.")}
    merged |= {k[len(own):]: v for k, v in props.items() if k.startswith(own)}
    out = {option: merged[key] for key, option in _S3A_TO_DELTA_RS.items() if merged.get(key)}
    endpoint = out.get("aws_endpoint_url")
    if endpoint and "://" not in endpoint:  # S3A takes a host; its scheme follows connection.ssl.enabled
        ssl = merged.get("connection.ssl.enabled", "true").lower() != "false"
        out["aws_endpoint_url"] = endpoint = f"{'https' if ssl else 'http'}://{endpoint}"
    if endpoint and endpoint.startswith("http://"):
        out["aws_allow_http"] = "true"
    if merged.get("path.style.access", "").lower() == "true":
        out["aws_virtual_hosted_style_request"] = "false"
    return out


def _option(storage: Mapping[str, str], *names: str) -> str | None:
    lowered = {k.lower(): v for k, v in storage.items()}
    return next((lowered[n] for n in names if lowered.get(n)), None)


def arrow_filesystem(uri: str, storage: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system for a local path or an ``s3://``/``s3a://`` URI, and the path in it.
    S3's endpoint and credentials come from delta-rs storage options (``storage``) where given,
    else from pyarrow's own defaults (the environment's ``AWS_*``, the instance's role)."""
    if not is_remote(uri):
        return pafs.LocalFileSystem(), str(local_path(uri))
    if not is_s3(uri):
        raise InvalidConfigurationError(
            f"{uri}: lakelog writes files outside Spark to local and S3 roots (s3://, s3a://) only; give such a root")
    storage = storage or {}
    kwargs: dict = {}
    endpoint = _option(storage, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        kwargs["scheme"] = "http" if endpoint.startswith("http://") else "https"
    for key, names in (("access_key", ("aws_access_key_id", "access_key_id")),
                       ("secret_key", ("aws_secret_access_key", "secret_access_key")),
                       ("session_token", ("aws_session_token", "session_token", "token")),
                       ("region", ("aws_region", "region"))):
        value = _option(storage, *names)
        if value:
            kwargs[key] = value
    parsed = urlparse(uri)
    return pafs.S3FileSystem(**kwargs), f"{parsed.netloc}{parsed.path}".rstrip("/")


def s3_storage(spark, uri: str) -> dict[str, str]:
    """delta-rs storage options for the S3 root ``uri`` from ``spark``'s S3A settings (of a session
    not started yet, those its configuration gives: ``session.s3a_settings``)."""
    from log_store.session import s3a_settings

    return storage_from_s3a(s3a_settings(spark), uri)


def engine_s3(uri: str) -> bool:
    """Whether lakelog's engine (delta-rs) commits to the table at ``uri``: an S3 root, outside
    Databricks, whose runtime commits to S3 through its own commit service (multi-cluster writes),
    which a writer of another engine must not race; there Delta's engine commits."""
    import os

    return is_s3(uri) and "DATABRICKS_RUNTIME_VERSION" not in os.environ


def delta_rs_reads(spark, uri: str) -> tuple[bool, dict[str, str] | None]:
    """Whether lakelog reads the table at ``uri`` with delta-rs, and the storage options then: on a
    local root (``reads_with_delta_rs``), and on an S3 root where delta-rs commits (``engine_s3``)
    with the options its commits take (``s3_storage``: a session not started stays so); with
    Spark otherwise, and everywhere when ``LAKELOG_FAST_READS=0``."""
    import os

    if reads_with_delta_rs(uri):
        return True, None
    if engine_s3(uri) and os.environ.get(FAST_READS_ENV, "1") != "0":
        return True, s3_storage(spark, uri)
    return False, None
