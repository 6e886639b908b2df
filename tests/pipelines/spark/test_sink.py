"""``df.write`` / ``df.writeStream`` with ``format("lakelog")``: records land through the fenced
producer, partitioned by key as Kafka's partitioner does, with dense offsets; bad writes fail
before anything lands. Read back with delta-rs, not through lakelog."""

from __future__ import annotations

import shutil

import pytest

from control_plane.topics import TopicAdmin
from log_store.partitioner import partition_for
from pipelines.spark.sink import BATCH_SHIFT
from tests.support import TOMBSTONE_VALUES, check_tombstones, log_rows, make_records

T = "orders"


def dense(rows: list[dict]) -> bool:
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
    return all(sorted(offsets) == list(range(len(offsets))) for offsets in by_partition.values())


def test_a_batch_write_lands_partitioned_by_key_with_dense_offsets(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 5)
    df = make_records(lakelog, 500, keys=37).selectExpr(  # Kafka's headers: ordered, a key may repeat
        "key", "value", "array(named_struct('key', 'h', 'value', cast(key as binary)), "
        "named_struct('key', 'a', 'value', cast('1' as binary)), named_struct('key', 'h', 'value', cast('2' as binary))) "
        "as headers")
    df.write.format("lakelog").option("topic", T).mode("append").save()
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(500))
    assert all(r["partition"] == partition_for(r["key"], 5) for r in rows), "Kafka's partitioner"
    assert dense(rows)
    assert all([(h["key"], h["value"]) for h in r["headers"]] == [("h", r["key"]), ("a", b"1"), ("h", b"2")]
               for r in rows), "headers kept in order, a repeated key too"


def test_a_null_value_is_written_and_read_back_null_and_an_empty_one_empty(lakelog, root):
    """Through lakelog's JVM sink and source: a tombstone stays null, an empty value empty."""
    TopicAdmin(lakelog, root).create(T, 2)
    df = lakelog.range(6).selectExpr("cast(id as string) as key", TOMBSTONE_VALUES)
    df.write.format("lakelog").option("topic", T).mode("append").save()
    check_tombstones(log_rows(root, T, ["key", "value"]))
    check_tombstones([r.asDict() for r in lakelog.read.format("lakelog").option("subscribe", T).load().collect()])


@pytest.mark.parametrize("records", [600, 30_000])  # written from the driver; by Spark's tasks
def test_a_batch_write_keeps_each_keys_rows_in_the_order_the_dataframe_holds_them(lakelog, root, records):
    """Rows of one key land in the order of the written DataFrame's tasks and rows, whatever
    size each task's share has (Spark reads bigger files first)."""
    TopicAdmin(lakelog, root).create(T, 4)
    third = records // 3
    df = lakelog.range(0, records, 1, 3).selectExpr(  # the last task's rows are the longest
        "cast(id % 7 as string) as key", f"rpad(cast(id as string), 12 + cast(id div {third} as int) * 60, 'x') as value")
    df.write.format("lakelog").option("topic", T).mode("append").save()
    rows = sorted(log_rows(root, T), key=lambda r: (r["partition"], r["offset"]))
    by_key: dict[bytes, list[int]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(int(r["value"].rstrip(b"x")))
    assert sum(len(v) for v in by_key.values()) == records and dense(rows)
    assert all(values == sorted(values) for values in by_key.values()), "a key's rows out of the DataFrame's order"
    sequences = {r["sequence"] for r in rows}
    assert sequences == set(range(records)), "the write's rows numbered 0.. in the DataFrame's order"


def test_a_topic_column_writes_several_topics(lakelog, root):
    admin = TopicAdmin(lakelog, root)
    admin.create("a", 2)
    admin.create("b", 3)
    df = make_records(lakelog, 100, keys=10).selectExpr("if(sequence % 2 = 0, 'a', 'b') as topic", "key", "value")
    df.write.format("lakelog").mode("append").save()
    assert sorted(int(r["value"]) for r in log_rows(root, "a")) == list(range(0, 100, 2))
    assert sorted(int(r["value"]) for r in log_rows(root, "b")) == list(range(1, 100, 2))


def test_a_retried_batch_write_with_sequences_lands_once(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 3)
    df = make_records(lakelog, 200, keys=20)  # key, value, sequence
    for _ in range(2):
        df.write.format("lakelog").option("topic", T).option("producerId", "feed").mode("append").save()
    assert sorted(int(r["value"]) for r in log_rows(root, T)) == list(range(200))


@pytest.mark.parametrize("build, option, mode, message", [
    (lambda s: s.range(3).selectExpr("cast(id as string) as key"), {"topic": T}, "append", "needs a 'value' column"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value", "'0' as partition"), {"topic": T}, "append",
     "column 'partition' is string: give an integer partition number"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value", "5 as partition"), {"topic": T}, "append",
     "records name partition(s) of 'orders' that cannot be written: 5 does not exist"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T, "acks": "0"}, "append",
     "acks=0: a lakelog write always returns once its append is committed"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T, "kafka.acks": "all"}, "append",
     "give .option('acks', '1' or 'all')"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {}, "append", "no topic"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value", "id"), {"topic": T}, "append",
     "are not record fields"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": "nope"}, "append", "unknown topic 'nope'"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T}, "overwrite", "never overwritten"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T, "subscribe": T}, "append",
     "unknown option(s) 'subscribe'"),
])
def test_a_bad_write_fails_with_a_clear_message_and_writes_nothing(lakelog, root, build, option, mode, message):
    TopicAdmin(lakelog, root).create(T, 2)
    writer = build(lakelog).write.format("lakelog").mode(mode)
    for k, v in option.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception) as err:
        writer.save()
    assert message in str(err.value)
    assert log_rows(root, T) == []


@pytest.mark.long
def test_a_stream_writes_each_micro_batch_once_under_the_querys_producer(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 3)
    source = str(tmp_path / "source")
    for start in (0, 100, 200):
        make_records(lakelog, 100, keys=9, start=start).write.format("delta").mode("append").save(source)
    query = (lakelog.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
             .select("key", "value").writeStream.format("lakelog").option("topic", T)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(300)) and dense(rows)
    assert len({r["producer_id"] for r in rows}) == 1
    batches = {r["sequence"] >> BATCH_SHIFT for r in rows}
    assert len(batches) >= 2, "one sequence range per micro-batch"


def test_a_stream_restarted_on_a_restored_older_checkpoint_loses_nothing(lakelog, root, tmp_path):
    """A query's checkpoint restored from a copy taken before its last batches keeps the query's
    id: Spark plans those batch ids again, with what the source holds now. Each such batch lands
    (what landed before lands again: duplicates at worst, as with Kafka's sink), never skipped
    as a replay; a batch replayed after a crash still lands once (tests/processes)."""
    TopicAdmin(lakelog, root).create(T, 3)
    source, ck, saved = str(tmp_path / "source"), str(tmp_path / "ck"), str(tmp_path / "saved")

    def add(first: int) -> None:
        make_records(lakelog, 100, keys=9, start=first).select("key", "value").coalesce(1) \
            .write.format("delta").mode("append").save(source)

    def run() -> None:
        lakelog.readStream.format("delta").load(source).writeStream.format("lakelog").option("topic", T).option("checkpointLocation", ck) \
            .trigger(availableNow=True).start().awaitTermination(300)

    add(0)
    run()  # batch 0
    shutil.copytree(ck, saved)  # a backup, taken between runs
    add(100)
    run()  # batch 1
    shutil.rmtree(ck)
    shutil.copytree(saved, ck)  # restored: its next batch is 1 again, planned with what the source holds now
    add(200)
    run()
    values = [int(r["value"]) for r in log_rows(root, T)]
    assert set(values) == set(range(300)), f"lost: {sorted(set(range(300)) - set(values))[:10]}..."
    assert dense(log_rows(root, T))


def test_two_batch_writes_sharing_a_producer_id_without_sequences_both_land(lakelog, root, tmp_path):
    """Without a sequence column a write's rows are numbered after the producer's mark, checked as
    the write commits: a write under the same id that committed meanwhile makes the other number
    its rows again after it, rather than drop them as its duplicates."""
    from tests.processes.test_spark_stream import stream_worker
    from tests.support import pausing_at, resume, while_paused

    TopicAdmin(lakelog, root).create(T, 3)
    point = "produce:after_write@1"  # the first write has read the producer's mark, not committed
    first = stream_worker("batch_write", root, T, "feed", "0", "200", env=pausing_at(tmp_path, point))
    try:
        assert while_paused(first, tmp_path, point), first.communicate()[1][-3000:]
        make_records(lakelog, 150, keys=20, start=200).select("key", "value").write.format("lakelog") \
            .option("topic", T).option("producerId", "feed").mode("append").save()
        resume(tmp_path, point)
        _out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(350)), "both writes' rows land"
    assert sorted(r["sequence"] for r in rows) == list(range(350)) and dense(rows)


def test_an_explicit_partition_column_sends_rows_there_and_null_to_the_keys_partition(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 4)
    df = make_records(lakelog, 100, keys=10).selectExpr(
        "key", "value", "if(sequence % 2 = 0, cast(sequence % 3 as int), null) as partition")
    df.write.format("lakelog").option("topic", T).mode("append").save()
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(100)) and dense(rows)
    for r in rows:
        v = int(r["value"])
        assert r["partition"] == (v % 3 if v % 2 == 0 else partition_for(r["key"], 4)), v


def test_acks_all_lands_in_every_in_sync_root_before_the_write_returns(lakelog, root, tmp_path):
    from deltalake import DeltaTable

    from control_plane.replication.operations import Replication

    follower = str(tmp_path / "us")
    TopicAdmin(lakelog, root).create(T, 2, replicas=[root, follower])
    replication = Replication(lakelog, root)

    def followers_values() -> list[int]:
        path = replication.path(replication.state(T), follower)
        return sorted(int(v) for v in DeltaTable(path).to_pyarrow_table(columns=["value"])["value"].to_pylist())

    def write(first: int, **options) -> None:
        writer = make_records(lakelog, 50, keys=10, start=first).select("key", "value").write.format("lakelog") \
            .option("topic", T).mode("append")
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.save()

    write(0)  # acks=1 (the default): the leader root only
    assert followers_values() == []
    write(50, acks="all")
    assert followers_values() == list(range(100)), "acknowledged once the in-sync follower holds it (and before)"
    with pytest.raises(Exception, match="fewer than min.insync.replicas 3"):
        write(100, acks="-1", minInsyncReplicas="3")
    assert len(log_rows(root, T)) == 100, "refused up front: nothing written"
