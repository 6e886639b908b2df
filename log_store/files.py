"""Paths and plain files (reports, pictures) under a local root or a URI (s3://, abfss://, dbfs:/)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pyspark.sql import SparkSession

from log_store.errors import StorageError

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:/")


def is_remote(path: str) -> bool:
    """True for URIs such as s3://, abfss://, dbfs:/ (anything but a local path or file:/)."""
    return bool(_URI.match(path)) and not path.startswith("file:/")


FAST_READS_ENV = "LAKELOG_FAST_READS"


def reads_with_delta_rs(path: str) -> bool:
    """Whether lakelog reads the table at ``path`` with delta-rs rather than Spark: on local
    storage, unless ``LAKELOG_FAST_READS=0`` (remote storage needs Spark's credentials and file
    systems). The one switch for the read commands and for jobs' own reads of control tables."""
    return not is_remote(path) and os.environ.get(FAST_READS_ENV, "1") != "0"


def local_path(path: str) -> Path:
    """A local path or ``file:/`` URI as an absolute path."""
    return Path(path[len("file:"):] if path.startswith("file:/") else path).expanduser().resolve()


def local_checksum(path: str, version: int) -> dict | None:
    """The checksum Delta wrote for ``version`` of the local table at ``path`` (its ``.crc`` file, what
    Delta itself reads for that version's state); None for a remote table or when there is none yet."""
    if is_remote(path) or version < 0:
        return None
    try:
        return json.loads((local_path(path) / "_delta_log" / f"{version:020d}.crc").read_text())
    except (OSError, ValueError):
        return None


def write_file(spark: SparkSession | None, path: str, data: bytes, in_table: bool = False) -> None:
    """Write a local file, or through Hadoop's FileSystem for a URI (with pyarrow on S3, as
    delta-rs's commits write theirs: ``_without_jvm``). ``in_table``: a data file of
    a table, whose folder must exist (only a partition's folder in it is made): a root that is lost
    or not mounted is a StorageError, never a folder made again where it was."""
    if not is_remote(path):
        target = local_path(path)
        try:
            if in_table:
                target.parent.mkdir(exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc.strerror or exc} (the root is lost, not mounted or "
                               "not writable); nothing was committed") from exc
        return
    if _without_jvm(spark, path):
        fs, where = _arrow_fs(spark, path)
        with fs.open_output_stream(where) as out:
            out.write(data)
        return
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    out = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(hpath, True)
    try:
        out.write(data)
    finally:
        out.close()


def _without_jvm(spark: SparkSession | None, path: str) -> bool:
    """Whether a URI is reached without Hadoop's FileSystem: one on S3 where delta-rs commits
    (``engine_s3``: its data files are written by pyarrow already, with the same settings), or any
    from a session of Spark Connect (no JVM in this process) or none."""
    from log_store.object_store import engine_s3
    from log_store.session import is_connect

    return spark is None or engine_s3(path) or is_connect(spark)


def _arrow_fs(spark: SparkSession | None, path: str):
    """pyarrow's file system for an S3 URI, with the session's S3A endpoint and credentials; other
    stores are reached through Hadoop's FileSystem only, which a Spark Connect client has not."""
    from log_store.object_store import arrow_filesystem, s3_storage

    return arrow_filesystem(path, s3_storage(spark, path) if spark is not None else None)


def read_file(spark: SparkSession, path: str) -> bytes | None:
    """A local file's bytes, or through Hadoop's FileSystem for a URI (pyarrow's on S3, as
    ``write_file``); None if there is none."""
    if not is_remote(path):
        target = local_path(path)
        return target.read_bytes() if target.is_file() else None
    if _without_jvm(spark, path):
        import pyarrow.fs as pafs

        fs, where = _arrow_fs(spark, path)
        if fs.get_file_info(where).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(where) as stream:
            return stream.read()
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return None
    stream = fs.open(hpath)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def list_names(spark: SparkSession, folder: str) -> list[str]:
    """The names in a local folder, or through Hadoop's FileSystem for a URI (pyarrow's on S3, as
    ``write_file``); none if it is absent."""
    if not is_remote(folder):
        target = local_path(folder)
        return sorted(p.name for p in target.iterdir()) if target.is_dir() else []
    if _without_jvm(spark, folder):
        import pyarrow.fs as pafs

        fs, where = _arrow_fs(spark, folder)
        found = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
        return sorted(info.base_name for info in found)
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(folder)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return []
    return sorted(str(status.getPath().getName()) for status in fs.listStatus(hpath))
