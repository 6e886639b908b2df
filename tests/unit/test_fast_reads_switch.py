"""``LAKELOG_FAST_READS=0`` sends every read to Spark: the read commands and jobs' own reads of
the control tables share one switch (``log_store.object_store.delta_rs_reads``; docs/cli.md).
Otherwise delta-rs reads a local root, and an S3 root with the storage options of the
configuration's S3A settings, taken without starting the session."""

from log_store.files import reads_with_delta_rs
from log_store.object_store import delta_rs_reads
from log_store.session import LazySession

S3A = {"spark.hadoop.fs.s3a.endpoint": "127.0.0.1:9000", "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
       "spark.hadoop.fs.s3a.access.key": "k", "spark.hadoop.fs.s3a.secret.key": "s"}


def not_started() -> LazySession:
    def build():
        raise AssertionError("the session was started")
    return LazySession(build, S3A)


def test_local_tables_are_read_with_delta_rs_unless_switched_off(monkeypatch, tmp_path):
    monkeypatch.delenv("LAKELOG_FAST_READS", raising=False)
    assert reads_with_delta_rs(str(tmp_path)) and reads_with_delta_rs(f"file:{tmp_path}")
    assert not reads_with_delta_rs("s3://bucket/root/control/topics"), "a remote store needs its storage options"
    assert delta_rs_reads(not_started(), str(tmp_path)) == (True, None)
    monkeypatch.setenv("LAKELOG_FAST_READS", "0")
    assert not reads_with_delta_rs(str(tmp_path))
    assert delta_rs_reads(not_started(), str(tmp_path)) == (False, None)


def test_s3_tables_are_read_with_delta_rs_with_the_configurations_s3a_settings(monkeypatch):
    monkeypatch.delenv("LAKELOG_FAST_READS", raising=False)
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    here, storage = delta_rs_reads(not_started(), "s3a://bucket/root/control/topics")
    assert here and storage == {"aws_endpoint_url": "http://127.0.0.1:9000", "aws_access_key_id": "k",
                                "aws_secret_access_key": "s", "aws_allow_http": "true"}
    assert delta_rs_reads(not_started(), "gs://bucket/root/control/topics") == (False, None), "GCS: Spark's"
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")  # Delta's engine commits there: Spark reads too
    assert delta_rs_reads(not_started(), "s3a://bucket/root/control/topics") == (False, None)
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION")
    monkeypatch.setenv("LAKELOG_FAST_READS", "0")
    assert delta_rs_reads(not_started(), "s3a://bucket/root/control/topics") == (False, None)


def test_jobs_and_control_tables_use_the_switch(monkeypatch, tmp_path):
    from control_plane.layout import RootLayout
    from control_plane.tables import ControlTables
    from jobs.context import Context

    monkeypatch.setenv("LAKELOG_FAST_READS", "0")
    tables = ControlTables(spark=not_started(), layout=RootLayout(str(tmp_path)))
    assert not tables.reads_without_spark("offset_commits")
    assert not Context(None, str(tmp_path)).fast_reads()
    monkeypatch.delenv("LAKELOG_FAST_READS")
    assert Context(None, "s3a://bucket/root").fast_reads() and Context(None, str(tmp_path)).fast_reads()
