"""The engine facade reads an S3 table's log itself, as it does a local one's: the latest version,
the application ids set since a version, all of them, and whether an ordered control table
tracks rows, with the storage options of the session's S3A settings, no JVM asked (heartbeats,
serve's ticks and topic admin call these from classic sessions). The session here may not start:
using it fails the test. Checked against delta-rs with the emulator's options. ``make test-s3``."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable
from pyspark.sql.types import LongType, StructField, StructType

from control_plane.layout import RootLayout
from control_plane.tables import ControlTables
from log_store import commits
from log_store.engine import app_version_changes, app_versions, table_version
from log_store.session import LazySession
from log_store.table_create import create_table

pytestmark = pytest.mark.s3


@pytest.fixture
def session(s3):
    def build():
        raise AssertionError("a read of an S3 table's log started the session (a JVM)")
    return LazySession(build, s3.spark_conf())


def test_versions_and_app_ids_of_an_s3_table_are_read_without_the_jvm(s3, session, monkeypatch):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):  # the S3A settings only
        monkeypatch.delenv(key, raising=False)
    path = f"s3a://{s3.create_bucket('engine-log-reads')}/t"
    assert table_version(session, path) == -1 and app_versions(session, path) == {}
    create_table(session, path, StructType([StructField("v", LongType())]), {})
    for beats in ({"hb-a": 1, "x": 5}, {"hb-a": 2, "hb-b": 7}, {"hb-b": 8}):
        commits.start(session, path).commit(beats)
    latest = DeltaTable(path, storage_options=s3.environment()).version()
    assert table_version(session, path) == latest == 3
    changes = app_version_changes(session, path, 1, "hb-")
    assert {k: v for k, (v, _ms) in changes.items()} == {"hb-a": 2, "hb-b": 8}
    assert all(ms is not None for _v, ms in changes.values())
    assert app_versions(session, path) == {"hb-a": 2, "hb-b": 8, "x": 5}

    tables = ControlTables(session, RootLayout("s3a://engine-log-reads/root"))
    tables.ensure_table("offset_commits")
    assert tables.row_tracked("offset_commits") is False
    assert not session.started
