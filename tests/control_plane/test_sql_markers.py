"""``lakelog sql`` over a log with transactions: a log's view holds its rows as they are, a
transaction's markers too, told by the ``control`` column (commit or abort; null on a record), in
Spark's answer and in the one without a JVM alike; ``WHERE control IS NULL`` leaves the records."""

from __future__ import annotations

import pyarrow as pa
import pytest

from control_plane.fast_sql import FastSql, _with_control
from control_plane.layout import RootLayout
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from log_store.session import LazySession
from tests.pipelines.test_txn_consume import Producers

QUERY = "SELECT partition, offset, control FROM log_t ORDER BY partition, offset"
ROWS = [{"partition": 0, "offset": 0, "control": None}, {"partition": 0, "offset": 1, "control": None},
        {"partition": 0, "offset": 2, "control": "abort"}, {"partition": 0, "offset": 3, "control": None},
        {"partition": 0, "offset": 4, "control": "commit"}]


def made(spark, root: str) -> str:
    admin = TopicAdmin(spark, root)
    admin.create("t", 1)
    tx = Producers(admin.log("t"), count=1)
    tx.send("plain", 0, ["p0"])
    tx.send("ab", 0, ["ab0"], epoch=0)
    tx.end("ab", 0, False, [0])
    tx.send("co", 0, ["co0"], epoch=0)
    tx.end("co", 0, True, [0])
    return root


def test_without_a_jvm_markers_show_as_what_they_are(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKELOG_NO_JVM", "1")
    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    root = made(spark, str(tmp_path / "root"))
    sql = FastSql(root, None)
    assert sql.query(QUERY, 100) == ROWS
    assert [r["offset"] for r in sql.query("SELECT offset FROM log_t WHERE control IS NULL ORDER BY 1", 100)] == [0, 1, 3]


def test_a_log_without_the_column_yet_reads_as_records():
    log = pa.table({"offset": pa.array([0, 1], pa.int64())})
    assert _with_control(log).column("control").to_pylist() == [None, None]


def test_spark_answers_the_same(spark, tmp_path):
    root = made(spark, str(tmp_path / "root"))
    assert ControlTables(spark, RootLayout(root)).query(QUERY, 100) == ROWS
