"""``format("lakelog")`` over a log with transactions, as Spark's Kafka source reads one: no marker
is a row; ``kafka.isolation.level=read_committed`` stops at the last stable offset and leaves out
aborted transactions' records, in batch reads (Spark's Parquet reader and the delta-rs tasks) and
in a stream, whose offsets wait at an open transaction and go on once it is committed."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from control_plane.topics import TopicAdmin
from pipelines.spark.reading import DataLossError
from tests.pipelines.test_txn_consume import Producers, rows

LEVEL = "kafka.isolation.level"

# partition 0: p0, ab0, n0 (no producer id), co0, ab1, [abort ab], co1, [commit co], op0 (open), p1
# partition 1: co2, [commit co], p2
EVERY = [(0, 0, "p0"), (0, 1, "ab0"), (0, 2, "n0"), (0, 3, "co0"), (0, 4, "ab1"), (0, 6, "co1"), (0, 8, "op0"),
         (0, 9, "p1"), (1, 0, "co2"), (1, 2, "p2")]
COMMITTED = [(0, 0, "p0"), (0, 2, "n0"), (0, 3, "co0"), (0, 6, "co1"), (1, 0, "co2"), (1, 2, "p2")]


def anonymous(log, partition: int, values: list[str]) -> None:
    """Records without a producer id (a plain produce that numbers nothing)."""
    table = rows("x", partition, values)
    table = table.set_column(table.schema.get_field_index("producer_id"), "producer_id",
                             pa.nulls(len(values), pa.string()))
    log.append_rows(table, 2, {})


def interleaved(spark, root) -> Producers:
    admin = TopicAdmin(spark, root)
    admin.create("t", 2)
    log = admin.log("t")
    tx = Producers(log)
    tx.send("plain", 0, ["p0"])
    tx.send("ab", 0, ["ab0"], epoch=0)
    anonymous(log, 0, ["n0"])
    tx.send("co", 0, ["co0"], epoch=0)
    tx.send("co", 1, ["co2"], epoch=0)
    tx.send("ab", 0, ["ab1"], epoch=0)
    assert tx.end("ab", 0, False, [0]) == {0: 5}
    tx.send("co", 0, ["co1"], epoch=0)
    assert tx.end("co", 0, True, [0, 1]) == {0: 7, 1: 1}
    tx.send("open", 0, ["op0"], epoch=0)
    tx.send("plain", 0, ["p1"])
    tx.send("plain", 1, ["p2"])
    return tx


def got(rows_) -> list[tuple]:
    return sorted((r["partition"], r["offset"], bytes(r["value"]).decode()) for r in rows_)


def read(spark, **options):
    reader = spark.read.format("lakelog").option("subscribe", "t")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_a_batch_read_delivers_by_isolation_level_and_no_marker(lakelog, root):
    interleaved(lakelog, root)
    for tasks in ({}, {"minPartitions": "3"}):  # Spark's Parquet reader; delta-rs in Python tasks
        assert got(read(lakelog, **tasks).collect()) == EVERY
        assert got(read(lakelog, **{LEVEL: "read_uncommitted"}, **tasks).collect()) == EVERY
        assert got(read(lakelog, **{LEVEL: "READ_COMMITTED"}, **tasks).collect()) == COMMITTED
        # endingOffsets: latest is the last stable offset; a given end past it stops there too
        ends = json.dumps({"t": {"0": 4, "1": -1}})
        assert got(read(lakelog, **{LEVEL: "read_committed", "endingOffsets": ends}, **tasks).collect()) == [
            (0, 0, "p0"), (0, 2, "n0"), (0, 3, "co0"), (1, 0, "co2"), (1, 2, "p2")]
        past = json.dumps({"t": {"0": 10, "1": 3}})
        assert got(read(lakelog, **{LEVEL: "read_committed", "endingOffsets": past}, **tasks).collect()) == COMMITTED
        assert got(read(lakelog, **{"endingOffsets": past}, **tasks).collect()) == EVERY


def test_an_unknown_isolation_level_is_refused_naming_the_option_and_the_levels(lakelog, root):
    TopicAdmin(lakelog, root).create("t", 1)
    with pytest.raises(Exception, match="kafka.isolation.level must be read_uncommitted .* or read_committed"):
        read(lakelog, **{LEVEL: "committed"})
    with pytest.raises(Exception, match="kafka.* options do not apply"):
        read(lakelog, **{"kafka.bootstrap.servers": "x:9092"})


def test_real_loss_in_a_partition_with_markers_still_fails(lakelog, root):
    """The delta-rs tasks count a marker's and an aborted record's offsets as rows: a record
    removed from under the log (no log start raised) is still data loss."""
    interleaved(lakelog, root)
    assert got(read(lakelog, minPartitions="2").collect()) == EVERY
    DeltaTable(TopicAdmin(lakelog, root).log("t").path).delete('"partition" = 0 AND "offset" = 3')
    for level, end in (("read_uncommitted", 9), ("read_committed", 7)):
        with pytest.raises(Exception, match=f"{DataLossError.__name__}.*partition 0 offsets 0-{end} should hold"):
            read(lakelog, minPartitions="2", **{LEVEL: level}).collect()


def stream(spark, checkpoint: str, seen: list[list[tuple]], **options):
    """One availableNow run of a stream on ``checkpoint``: each micro-batch's rows, in order."""
    reader = spark.readStream.format("lakelog").option("subscribe", "t").option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)

    def batch(df, _i) -> None:
        seen.append([(r["partition"], r["offset"], bytes(r["value"]).decode())
                     for r in df.orderBy("partition", "offset").collect()])

    query = reader.load().writeStream.foreachBatch(batch).option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None


def test_a_read_committed_stream_waits_at_an_open_transaction_and_goes_on_after_its_commit(lakelog, root, tmp_path):
    """Restarted on its checkpoint while ``open`` is open, then after its commit: each committed
    record exactly once, in order, no aborted one; no micro-batch passes the open transaction."""
    tx = interleaved(lakelog, root)
    ck, seen = str(tmp_path / "ck"), []
    stream(lakelog, ck, seen, **{LEVEL: "read_committed", "maxOffsetsPerTrigger": "2"})
    assert sorted(r for b in seen for r in b) == COMMITTED
    assert all(r[1] < 8 for b in seen for r in b if r[0] == 0)
    first = len(seen)
    stream(lakelog, ck, seen, **{LEVEL: "read_committed", "maxOffsetsPerTrigger": "2"})
    assert len(seen) == first, "nothing committed since: no batch"
    tx.send("open", 0, ["op1"], epoch=0)
    tx.send("plain", 1, ["p3"])
    assert tx.end("open", 0, True, [0]) == {0: 11}
    stream(lakelog, ck, seen, **{LEVEL: "read_committed", "maxOffsetsPerTrigger": "2"})
    later = [r for b in seen[first:] for r in b]
    assert sorted(later) == [(0, 8, "op0"), (0, 9, "p1"), (0, 10, "op1"), (1, 3, "p3")]
    every = [r for b in seen for r in b]
    assert sorted(every) == sorted(COMMITTED + later) and len(set(every)) == len(every)
    for p in (0, 1):
        offsets = [o for q, o, _v in every if q == p]
        assert offsets == sorted(offsets), "in order"


def test_a_read_uncommitted_stream_delivers_open_and_aborted_records_and_no_marker(lakelog, root, tmp_path):
    tx = interleaved(lakelog, root)
    ck, seen = str(tmp_path / "ck"), []
    stream(lakelog, ck, seen, maxOffsetsPerTrigger="3")
    assert sorted(r for b in seen for r in b) == EVERY
    assert tx.end("open", 0, False, [0]) == {0: 10}
    tx.send("plain", 0, ["p9"])
    first = len(seen)
    stream(lakelog, ck, seen)
    assert [r for b in seen[first:] for r in b] == [(0, 11, "p9")]


def test_the_sink_writes_after_markers_and_readers_read_past_them(lakelog, root):
    interleaved(lakelog, root)
    (lakelog.createDataFrame([(b"s0", 0), (b"s1", 1)], "value binary, partition int")
     .write.format("lakelog").option("topic", "t").mode("append").save())
    assert got(read(lakelog).collect()) == sorted(EVERY + [(0, 10, "s0"), (1, 3, "s1")])
    assert got(read(lakelog, **{LEVEL: "read_committed"}).collect()) == sorted(COMMITTED + [(1, 3, "s1")])


def test_the_python_data_source_reads_by_isolation_level_too(spark, root):
    """The Spark Python data source (Spark Connect, no jar) drives the same planner and reads
    the ranges with delta-rs (``reading.read_range``); here on a classic session."""
    from pipelines.spark.python_source import register

    interleaved(spark, root)
    assert register(spark, root, "lakelog_python")
    for level, expected in (("read_uncommitted", EVERY), ("read_committed", COMMITTED)):
        found = spark.read.format("lakelog_python").option("subscribe", "t").option(LEVEL, level).load().collect()
        assert got(found) == expected
