"""``LAKELOG_FAST_READS=0`` sends every read to Spark: the read commands and jobs' own reads of
the control tables share one switch (``log_store.files.reads_with_delta_rs``; docs/cli.md)."""

from log_store.files import reads_with_delta_rs


def test_local_tables_are_read_with_delta_rs_unless_switched_off(monkeypatch, tmp_path):
    monkeypatch.delenv("LAKELOG_FAST_READS", raising=False)
    assert reads_with_delta_rs(str(tmp_path)) and reads_with_delta_rs(f"file:{tmp_path}")
    assert not reads_with_delta_rs("s3://bucket/root/control/topics"), "remote storage needs Spark's file systems"
    monkeypatch.setenv("LAKELOG_FAST_READS", "0")
    assert not reads_with_delta_rs(str(tmp_path))


def test_jobs_and_control_tables_use_the_switch(monkeypatch, tmp_path):
    from control_plane.layout import RootLayout
    from control_plane.tables import ControlTables
    from jobs.context import Context

    monkeypatch.setenv("LAKELOG_FAST_READS", "0")
    tables = ControlTables(spark=None, layout=RootLayout(str(tmp_path)))
    assert not tables.reads_without_spark("offset_commits")
    assert not Context.fast_reads(type("C", (), {"root": str(tmp_path)})())
