"""The Spark read paths of a log with transactions: a DataFrame handler, the exactly-once sink and
``lakelog consume --partition`` (Spark's read of a batch) never get a marker, nor its control
column; under read_committed they get no aborted or open transaction's record."""

from __future__ import annotations

from deltalake import DeltaTable

from control_plane.topics import TopicAdmin
from pipelines.consumer import Consumer
from pipelines.partition_read import read_partition
from pipelines.settings import ConsumerSettings
from tests.pipelines.test_txn_consume import COMMITTED, Producers


def test_spark_reads_skip_markers_and_read_committed_skips_aborted_and_open_records(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("t", 2)
    tx = Producers(admin.log("t"))
    tx.send("ab", 0, ["ab0"], epoch=0)
    tx.end("ab", 0, False, [0])
    tx.send("co", 0, ["co0"], epoch=0)
    tx.send("open", 1, ["op0"], epoch=0)
    tx.end("co", 0, True, [0])
    tx.send("plain", 1, ["p0"])

    seen: list[tuple] = []
    columns: list[list[str]] = []

    def handler(df, _ranges) -> None:
        columns.append(df.columns)
        seen.extend((r["partition"], r["offset"], bytes(r["value"]).decode()) for r in df.collect())

    result = Consumer(spark, root, "t", "u").run(handler)
    assert sorted(seen) == [(0, 0, "ab0"), (0, 2, "co0"), (1, 0, "op0"), (1, 1, "p0")] and result.records == 4
    assert all("control" not in c for c in columns)

    sink = f"{root}/sink"
    result = Consumer(spark, root, "t", "c", COMMITTED).run_to_sink(sink)
    got = sorted((r["partition"], r["offset"], r["value"]) for r in DeltaTable(sink).to_pyarrow_table().to_pylist())
    assert got == [(0, 2, b"co0")] and result.positions == {0: 4, 1: 0} and result.records == 1
    assert "control" not in DeltaTable(sink).schema().to_arrow().names

    one = read_partition(spark, root, "t", 0, "earliest", settings=COMMITTED).to_pylist()
    assert [(r["offset"], bytes(r["value"])) for r in one] == [(2, b"co0")]
    every = read_partition(spark, root, "t", 0, "earliest", settings=ConsumerSettings()).to_pylist()
    assert [r["offset"] for r in every] == [0, 2]


def test_format_lakelog_delivers_no_marker(lakelog, root):
    admin = TopicAdmin(lakelog, root)
    admin.create("t", 1)
    tx = Producers(admin.log("t"), count=1)
    tx.send("co", 0, ["co0"], epoch=0)
    tx.end("co", 0, True, [0])
    rows = lakelog.read.format("lakelog").option("subscribe", "t").load().collect()
    assert [(r["offset"], bytes(r["value"])) for r in rows] == [(0, b"co0")]
