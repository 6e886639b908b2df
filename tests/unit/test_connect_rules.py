"""What lakelog does on a Spark Connect session without asking its JVM, Spark-free: the sessions are
stand-ins of Connect's classes (``is_connect`` asks the object's kind, not the process's)."""

from __future__ import annotations

import pytest

from log_store.delta_classes import per_session
from log_store.delta_sql import table_ref
from log_store.errors import SetupError
from log_store.frames import cached_rows, deterministic, observed, row_bound
from log_store.session import LazySession, hadoop_settings, is_connect, s3a_settings


class _Conf:
    def __init__(self, settings: dict[str, str]) -> None:
        self.getAll = settings


class ConnectSession:
    """A stand-in of ``pyspark.sql.connect.session.SparkSession``: settings, no JVM."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.conf = _Conf(settings)

    def __getattr__(self, name: str):
        raise AttributeError(f"[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute {name} is not supported in Spark Connect")


class ConnectFrame:
    """A stand-in of a Connect DataFrame: no ``_jdf``."""


class ConnectObservation:
    def __init__(self, result: dict) -> None:
        self.get = result


for stand_in, module in ((ConnectSession, "session"), (ConnectFrame, "dataframe"), (ConnectObservation, "observation")):
    stand_in.__module__ = f"pyspark.sql.connect.{module}"

S3A = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000", "spark.hadoop.fs.s3a.access.key": "server",
       "spark.sql.shuffle.partitions": "2"}


def test_connect_is_told_by_the_object():
    assert is_connect(ConnectSession({})) and is_connect(ConnectFrame()) and is_connect(ConnectObservation({}))
    assert not is_connect(object())
    assert is_connect(LazySession(lambda: ConnectSession({})))


def test_s3a_settings_of_a_connect_session_are_its_spark_hadoop_settings_over_the_configurations():
    spark = ConnectSession(S3A)
    assert hadoop_settings(spark, "fs.s3a.") == {"endpoint": "http://127.0.0.1:9000", "access.key": "server"}
    lazy = LazySession(lambda: spark, {"spark.hadoop.fs.s3a.access.key": "given", "spark.hadoop.fs.s3a.region": "r1"})
    assert s3a_settings(lazy) == {"access.key": "given", "region": "r1"}  # not started: the configuration's
    lazy.session()
    assert s3a_settings(lazy) == {"endpoint": "http://127.0.0.1:9000", "access.key": "server", "region": "r1"}


def test_plans_are_not_asked_on_connect_and_observations_fall_back_when_empty():
    frame = ConnectFrame()
    assert row_bound(frame) is None and cached_rows(frame) is None and deterministic(frame) is False
    assert observed(ConnectObservation({"n": 3}), lambda: {"n": -1}) == {"n": 3}
    assert observed(ConnectObservation({}), lambda: {"n": -1}) == {"n": -1}


def test_delta_engine_lookups_on_connect_are_a_setup_error_naming_why():
    with pytest.raises(SetupError, match="Spark Connect session does not reach"):
        per_session(ConnectSession({}), "k", lambda: pytest.fail("looked up"))


def test_table_ref_quotes_backticks():
    assert table_ref("/r/a`b") == "delta.`/r/a``b`"


@pytest.mark.s3
def test_reads_around_commits_and_files_on_s3_need_no_jvm_from_a_connect_session(s3):
    """From a Connect session, an S3 table's version, application ids and the changes to them are
    read with the session's S3A settings, as on a local disk, and report files written and read
    with pyarrow (the JVM ways would fail: no JVM)."""
    from pyspark.sql.types import LongType, StructField, StructType

    from log_store import commits
    from log_store.engine import app_version_changes, app_versions, table_version
    from log_store.files import list_names, read_file, write_file
    from log_store.table_create import create_table, table_exists

    spark = ConnectSession(s3.spark_conf())
    path = f"s3://{s3.create_bucket('connect-reads')}/root/t"
    assert table_version(spark, path) == -1 and not table_exists(spark, path)
    create_table(spark, path, StructType([StructField("n", LongType())]), {})
    for beat in (1, 2):
        txn = commits.start(spark, path)
        txn.commit({"hb.m1": beat})
    assert table_version(spark, path) == 2 and table_exists(spark, path)
    assert app_versions(spark, path) == {"hb.m1": 2}
    assert {k: v for k, (v, _at) in app_version_changes(spark, path, 1, "hb.").items()} == {"hb.m1": 2}
    write_file(spark, "s3://connect-reads/root/audit/report.md", b"# PASSED\n")
    assert read_file(spark, "s3://connect-reads/root/audit/report.md") == b"# PASSED\n"
    assert read_file(spark, "s3://connect-reads/root/audit/none.md") is None
    assert list_names(spark, "s3://connect-reads/root/audit") == ["report.md"]
    assert list_names(spark, "s3://connect-reads/root/nothing") == []
